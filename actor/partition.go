// Package actor is the partition goroutine of a chanlimit router: the one
// owner of a table of keys, which it serves one request at a time from its
// mailbox. Callers never touch the table; they send a request by value and
// read the answer from a reply channel.
//
// The protocol, and the property each part keeps:
//
//   - The mailbox is a bounded channel and is never closed, so a send can
//     never panic. A caller waits to send while it is full, and gives up
//     when its context is done or the partition stops.
//   - Each call has its own reply channel with a buffer of one, so the
//     partition never blocks on a caller. Channels come from a pool; one
//     that a caller abandoned is never put back.
//   - A caller that stops waiting (its context is done) marks its reply
//     channel by filling it. The partition skips a request whose channel is
//     already full, and takes back a grant it could not deliver, so a
//     cancelled call uses up no quota.
//   - Stop closes the stop channel; the goroutine answers what is already in
//     the mailbox, then exits and closes done. A caller that finds stop
//     closed, or is still waiting when done closes, gets ErrClosed.
package actor

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// ErrClosed is returned by calls to a stopped partition, and by calls that
// raced with the stop and were not answered.
var ErrClosed = errors.New("chanlimit: router closed")

// op is the kind of a request. The set is closed: each op has a method on
// Partition, and the partition serves nothing else.
type op uint8

const (
	opAllow op = iota + 1
)

// request is one message in a mailbox, sent by value.
type request struct {
	op    op
	key   string
	n     int
	reply chan reply
}

// reply is the answer to one request.
type reply struct {
	d   algorithms.Decision
	err error
}

// Partition is one goroutine and the keys it owns. Its methods are safe for
// simultaneous use by many goroutines; its table and timeline are touched
// only by its own goroutine.
type Partition struct {
	mailbox  chan request
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	replies  sync.Pool // of chan reply, each with a buffer of one

	// Owned by the partition goroutine.
	table algorithms.Table
	clock clock.Clock
	last  time.Time     // the clock's reading at the latest request
	now   time.Duration // the timeline: time since Start, never going back
}

// Start starts the goroutine of a partition that owns table, reads the time
// from clk and queues up to mailboxSize requests (at least 0).
func Start(table algorithms.Table, clk clock.Clock, mailboxSize int) *Partition {
	p := &Partition{
		mailbox: make(chan request, max(mailboxSize, 0)),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		table:   table,
		clock:   clk,
		last:    clk.Now(),
	}
	p.replies.New = func() any { return make(chan reply, 1) }
	go p.run()
	return p
}

// AllowN asks the partition to decide n units for key. It returns the
// decision, ErrClosed, ctx.Err(), or the table's error for a bad n.
func (p *Partition) AllowN(ctx context.Context, key string, n int) (algorithms.Decision, error) {
	return p.call(ctx, request{op: opAllow, key: key, n: n})
}

// Depth returns the number of requests waiting in the mailbox.
func (p *Partition) Depth() int { return len(p.mailbox) }

// Stop tells the goroutine to answer what is queued and exit. It does not
// wait; Done is closed once the goroutine has exited. Stop is idempotent.
func (p *Partition) Stop() { p.stopOnce.Do(func() { close(p.stop) }) }

// Done returns a channel that is closed once the goroutine has exited.
func (p *Partition) Done() <-chan struct{} { return p.done }

// call sends req and waits for its answer.
func (p *Partition) call(ctx context.Context, req request) (algorithms.Decision, error) {
	if err := ctx.Err(); err != nil {
		return algorithms.Decision{}, err
	}
	// select picks at random among ready cases: look at stop first, so that
	// a stopped partition takes no more requests.
	select {
	case <-p.stop:
		return algorithms.Decision{}, ErrClosed
	default:
	}
	req.reply = p.replies.Get().(chan reply)
	select {
	case p.mailbox <- req:
	case <-p.stop:
		p.replies.Put(req.reply)
		return algorithms.Decision{}, ErrClosed
	case <-ctx.Done():
		p.replies.Put(req.reply)
		return algorithms.Decision{}, ctx.Err()
	}
	select {
	case r := <-req.reply:
		p.replies.Put(req.reply)
		return r.d, r.err
	case <-ctx.Done():
		return p.abandon(ctx, req.reply)
	case <-p.done:
		// The goroutine has exited; it may have answered just before.
		select {
		case r := <-req.reply:
			return r.d, r.err
		default:
			return algorithms.Decision{}, ErrClosed
		}
	}
}

// abandon stops waiting on reply. Filling the channel tells the partition
// that nobody will read its answer; if the answer is there first, the caller
// takes it, since the decision has been made and applied.
func (p *Partition) abandon(ctx context.Context, ch chan reply) (algorithms.Decision, error) {
	select {
	case ch <- reply{}: // the mark; the channel is never reused
		return algorithms.Decision{}, ctx.Err()
	default:
		r := <-ch
		p.replies.Put(ch)
		return r.d, r.err
	}
}

func (p *Partition) run() {
	defer close(p.done)
	for {
		select {
		case req := <-p.mailbox:
			p.serve(req)
		case <-p.stop:
			p.drain()
			return
		}
	}
}

// drain answers the requests already in the mailbox.
func (p *Partition) drain() {
	for {
		select {
		case req := <-p.mailbox:
			p.serve(req)
		default:
			return
		}
	}
}

// serve decides one request and delivers the answer without blocking.
func (p *Partition) serve(req request) {
	if len(req.reply) > 0 {
		return // the caller gave up before its turn: apply nothing
	}
	now := p.tick()
	var r reply
	switch req.op {
	case opAllow:
		r.d, r.err = p.table.AllowN(req.key, now, req.n)
	}
	select {
	case req.reply <- r:
	default:
		// The caller gave up while we decided: take the grant back.
		if r.d.Allowed {
			p.table.Refund(req.key, now, req.n)
		}
	}
}

// tick reads the clock and returns the partition's timeline: the time since
// Start, counting only forward steps of the clock. A clock that steps back
// adds nothing, and time counts on from its new reading, so a backward step
// neither grants quota nor locks anyone out. The timeline stops at the
// largest Duration, about 292 years after Start.
func (p *Partition) tick() time.Duration {
	reading := p.clock.Now()
	switch d := reading.Sub(p.last); {
	case d <= 0:
	case d > math.MaxInt64-p.now:
		p.now = math.MaxInt64
	default:
		p.now += d
	}
	p.last = reading
	return p.now
}
