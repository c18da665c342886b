package redislimit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/chanlimit/chanlimit"
)

// A router calls Decide from each partition's round trips, so a store
// under load is asked by many goroutines at once: on a machine of many
// cores, many partitions, each with a few requests. Redis spends on a
// call much more than on each request in it, and a pipeline of several
// calls costs it a read and a write where as many pipelines cost one
// each: so the store has a limit on its round trips out (lanes.go), and the
// Decides that come while they are out wait, and go together in the next
// round trip that has room (combiner). Under a light load each Decide
// goes at once, alone, on its own goroutine.
//
// The Decide that makes a round trip (its leader) takes along the
// waiting Decides whose deadline is not later than its own, in the order
// they came, behind its own ops, and makes the trip with its own
// deadline, so that none of them is cut short. A Decide whose ctx ends
// (its deadline, or a cancel) while it waits leaves at once with ctx's
// error, and nothing of it is sent. Once a trip carries its ops, it stays
// for the trip's answers, as it would for its own round trip: the client
// may well have sent them (go-redis bounds a trip by its timeouts, not by
// ctx, unless ContextTimeoutEnabled), and a router gives back the grants
// of callers that left only from answers. A leader whose ctx is canceled
// stays likewise.

// DefaultRoundTrips is the number of round trips out a store starts with
// when Options.RoundTrips is 0, and adapts from (lanes.go).
const DefaultRoundTrips = 4

// maxCombined is the most ops a leader takes along in its round trip,
// its own included, unless its own are more (the others wait for the
// next): a few calls' worth, so that no round trip holds Redis long.
const maxCombined = 8 * MaxPerCall

// combiner is the store's round trips out, and the Decides waiting for
// one. Its mutex guards this bookkeeping of the client's calls, never a
// key's state, which is Redis's.
type combiner struct {
	lanes *lanes // a token for each round trip that may go out (lanes.go)

	mu      sync.Mutex
	waiting []*decide // in the order they came
}

// decide is one Decide call, from when it waits to when it returns.
type decide struct {
	ctx      context.Context
	deadline time.Time // ctx's; zero: none
	ops      []chanlimit.StoreOp
	queued   bool                // in the combiner's waiting; under its mutex
	done     chan struct{}       // sent once the round trip that took it has answered it; room for one
	batch    []*decide           // a leader's: the Decides its round trip carries, kept to reuse
	combined []chanlimit.StoreOp // a leader's: their ops, kept to reuse
}

var decides = sync.Pool{New: func() any { return &decide{done: make(chan struct{}, 1)} }}

// combine serves ops, which Decide has checked, in a round trip of its
// own or in another Decide's, and returns once they are answered, or once
// ctx has ended if no round trip has taken them yet.
func (s *Store) combine(ctx context.Context, ops []chanlimit.StoreOp) {
	c := &s.combiner
	d := decides.Get().(*decide)
	d.ctx, d.ops, d.queued = ctx, ops, true
	d.deadline, _ = ctx.Deadline()
	c.mu.Lock()
	c.waiting = append(c.waiting, d)
	c.mu.Unlock()
	select {
	case <-d.done: // another's round trip answered it
		d.release()
	case <-c.lanes.free:
		if s.onLane(d) {
			d.release()
			return
		}
		d.await(c) // another's round trip has it, or its ctx has ended
	case <-ctx.Done():
		d.leave(c)
	}
}

// onLane makes d's round trip, on the lane it holds, which it gives back
// however the trip ends (a panic included), and reports whether it did:
// not if another's trip has d already, or if d's ctx has ended.
func (s *Store) onLane(d *decide) bool {
	c := &s.combiner
	c.lanes.took()
	rtt, ops := time.Duration(-1), 0 // none, unless the trip comes back
	defer func() { c.lanes.back(rtt, ops) }()
	if d.ctx.Err() != nil {
		return false
	}
	batch := c.take(d)
	if batch == nil {
		return false
	}
	for _, w := range batch {
		for i := range w.ops {
			if w.ops[i].Err == nil { // one Decide refused is not sent
				ops++
			}
		}
	}
	rtt = s.lead(d, batch)
	return true
}

// take returns the Decides d's round trip carries, d first, then those
// waiting whose deadline is not later than d's and whose ctx has not
// ended, in the order they came, up to maxCombined ops; takes them out of waiting; and copies their ops
// into d.combined, if there are others. It returns nil if another's round
// trip has d already.
func (c *combiner) take(d *decide) []*decide {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !d.queued {
		return nil
	}
	batch := append(d.batch[:0], d)
	n := len(d.ops)
	kept := c.waiting[:0]
	for _, w := range c.waiting {
		switch {
		case w == d:
			d.queued = false
		case w.ctx.Err() != nil: // ended before its goroutine could leave: it leaves, sent nowhere
			kept = append(kept, w)
		case n+len(w.ops) <= maxCombined && notLater(w.deadline, d.deadline):
			w.queued = false
			batch = append(batch, w)
			n += len(w.ops)
		default:
			kept = append(kept, w)
		}
	}
	clear(c.waiting[len(kept):])
	c.waiting = kept
	d.batch = batch
	if len(batch) > 1 {
		all := d.combined[:0]
		for _, w := range batch {
			all = append(all, w.ops...)
		}
		d.combined = all
	}
	return batch
}

// notLater reports whether deadline a is not later than b (zero: none,
// later than any).
func notLater(a, b time.Time) bool {
	return b.IsZero() || (!a.IsZero() && !a.After(b))
}

// errCarrierPanicked is the error of ops whose round trip panicked in
// another Decide (a client's hook, say): the panic goes on in that one.
var errCarrierPanicked = errors.New("redislimit: the round trip that carried this request panicked")

// lead makes the round trip that carries batch, d's (d first), with d's
// deadline, and answers each Decide of it; if the trip panics, it
// answers the others with errCarrierPanicked, and the panic goes on. It
// returns the trip's time, as roundTrip does.
func (s *Store) lead(d *decide, batch []*decide) time.Duration {
	if len(batch) == 1 {
		return s.roundTrip(d.ctx, d.ops)
	}
	all, c := d.combined, &s.combiner
	defer func() {
		clear(all)
		clear(batch)
		if cap(all) > 2*maxCombined { // a burst's outsize ops: not kept
			all = nil
		}
		d.combined = all[:0]
	}()
	answered := false
	defer func() {
		if !answered {
			c.answer(batch[1:], nil, errCarrierPanicked)
		}
	}()
	// Not canceled with d's ctx: the others' would fail with it.
	ctx := context.WithoutCancel(d.ctx)
	if !d.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.deadline)
		defer cancel()
	}
	rtt := s.roundTrip(ctx, all)
	answered = true
	answerInto(d.ops, all)
	c.answer(batch[1:], all[len(d.ops):], nil)
	return rtt
}

// answerInto writes the answers of from's first len(ops) ops into ops:
// each one's Decision, Err and Grant, all that the store answers.
func answerInto(ops, from []chanlimit.StoreOp) {
	for i := range ops {
		ops[i].Decision, ops[i].Err, ops[i].Grant = from[i].Decision, from[i].Err, from[i].Grant
	}
}

// answer writes into each Decide of batch its answers, the ops of from
// in turn (nil: err instead), and lets it go.
func (c *combiner) answer(batch []*decide, from []chanlimit.StoreOp, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := 0
	for _, w := range batch {
		n := len(w.ops) // read first: once answered, w is its Decide's again
		if from != nil {
			answerInto(w.ops, from[at:])
		} else {
			for i := range w.ops {
				if w.ops[i].Err == nil {
					w.ops[i].Err = err
				}
			}
		}
		w.done <- struct{}{}
		at += n
	}
}

// await returns once another's round trip has answered d, or d's ctx has
// ended while it waits (leave).
func (d *decide) await(c *combiner) {
	select {
	case <-d.done:
		d.release()
	case <-d.ctx.Done():
		d.leave(c)
	}
}

// leave returns d, whose ctx has ended, with its ops failed with ctx's
// error if it still waits for a round trip; if one carries it, once that
// trip has answered it.
func (d *decide) leave(c *combiner) {
	c.mu.Lock()
	if !d.queued { // carried
		c.mu.Unlock()
		<-d.done
		d.release()
		return
	}
	k := slices.Index(c.waiting, d)
	c.waiting = slices.Delete(c.waiting, k, k+1)
	c.mu.Unlock()
	err := d.ctx.Err()
	for i := range d.ops {
		if d.ops[i].Err == nil {
			d.ops[i].Err = err
		}
	}
	d.release()
}

// release keeps d, which nothing else holds, for another Decide.
func (d *decide) release() {
	d.ctx, d.ops = nil, nil
	decides.Put(d)
}
