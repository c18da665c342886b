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
//   - Stop closes the stop channel, which turns new callers away with
//     ErrClosed, then sends a stop message; the goroutine answers what is
//     queued and exits, closing done. A caller that sees stop still open
//     after its send knows its request is ahead of the stop message, so it
//     waits on its reply alone; one that sees stop closed also watches done,
//     since its request may have come after the goroutine's last look.
//   - The goroutine's own state lives apart from what callers read, so its
//     writes never make callers' cache lines bounce.
//   - The goroutine supervises the algorithm: a panic while deciding a
//     request fails that request with ErrAlgorithmPanic and drops the
//     key's state, which the panic may have left half-written; the
//     partition and its other keys go on.
//   - Idle keys are forgotten as they come due, a few per message (the
//     table's Expire, with a budget that grows with the burst), so a
//     million keys coming due at once never stall the partition.
//     Messages leave a key a second's grace, so that one used every few
//     moments is not forgotten and made anew each time; Stats counts the
//     untouched keys still held apart.
//   - Administrative messages (Stats, Snapshot, a table swap for Restore)
//     travel the same mailbox, so they see the table between two requests
//     and never need a lock.
package actor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// ErrClosed is returned by calls to a stopped partition, and by calls that
// raced with the stop and were not answered.
var ErrClosed = errors.New("chanlimit: router closed")

// ErrAlgorithmPanic is wrapped, with the panic's value, in the error of a
// request during which the algorithm panicked. If the value is an error,
// errors.Is and errors.As find it too.
var ErrAlgorithmPanic = errors.New("chanlimit: algorithm panicked")

// Expiry budget: each burst of messages lets the table do expireBase steps
// of expiry work, plus expirePerRequest for each request in the burst
// (each item of a batch counts). A request adds at most two steps of work
// (its key, new, is forgotten once; a later deadline is caught up with
// once), so expiry keeps pace, a few steps at a time, and never stalls. A
// Stats message forgets nothing: it counts the untouched keys still held
// apart (Stats.Idle), reading at most algorithms.IdleCountLimit entries of
// the deadline heap, so that its Keys is exact unless more than that many
// keys are due or waiting for the heap to catch up with their deadline.
//
// The messages forget keys that have been untouched for linger: a key that
// comes back within it keeps its slot and its state's memory, so a key
// used more often than that costs no allocation even if its state is
// untouched between uses (a generous limit). A new key that needs room
// under MaxKeys takes the place of a key the moment it is untouched.
const (
	expireBase       = 8
	expirePerRequest = 2
	linger           = time.Second
)

// op is the kind of a request. The set is closed: each op has a method on
// Partition, and the partition serves nothing else.
type op uint8

const (
	opAllow op = iota + 1
	opPeek
	opReset
	opBatch
	opStats    // fill in admin.stats
	opSnapshot // append the table's entries to admin.entries
	opNow      // tell the partition's now, in admin.now
	opSwap     // take admin.table in place of the table
	opStop     // sent by Stop: answer what is queued, then exit
)

// request is one message in a mailbox, sent by value.
type request struct {
	op    op
	key   string
	n     int
	batch *[]Item // opBatch: the items, decided in order, answered in place
	admin *admin  // the administrative ops: what they carry both ways
	reply chan reply
}

// admin is what an administrative message carries. The caller makes a new
// one for each message and reads it only after a nil answer.
type admin struct {
	stats   Stats
	entries []byte              // opSnapshot: the entries of every key held
	keys    int                 // opSnapshot: how many
	wall    time.Time           // opSnapshot, opNow: the clock's reading
	now     time.Duration       // opNow: the partition's now
	table   algorithms.Table    // opSwap: the new table
	limit   algorithms.KeyLimit // opSwap: its cap
}

// Item is one request of a batch: N units on Key. The partition writes the
// decision into D, or an error into Err (the table's, or ErrAlgorithmPanic)
// and leaves D zero.
type Item = algorithms.Item

// Stats are a partition's figures. Allowed, Denied and Refused count
// answers delivered: a request whose caller gave up before its answer
// counts nowhere. Panicked also counts the panics met with no one to
// answer: while forgetting keys, or giving back a grant whose caller left.
type Stats struct {
	Keys     int    // keys held whose state is not untouched
	Idle     int    // keys held whose state is untouched, not yet forgotten
	Queued   int    // requests in the mailbox
	Allowed  uint64 // decisions that allowed (a batch's items one by one)
	Denied   uint64 // decisions that denied
	Refused  uint64 // requests refused with an error, ErrTooManyKeys among them
	Panicked uint64 // requests failed with ErrAlgorithmPanic (Peeks, Stats and Snapshots among them), and keys dropped when their rule panicked with no request to fail
	Expired  uint64 // keys forgotten once untouched
	Evicted  uint64 // keys dropped to make room for a new one
}

// reply is the answer to one request.
type reply struct {
	d   algorithms.Decision
	err error
}

// Partition is one goroutine and the keys it owns. Its methods are safe for
// simultaneous use by many goroutines.
type Partition struct {
	mailbox  chan request
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	replies  sync.Pool // of chan reply, each with a buffer of one
	loop     *loop     // touched only by the partition goroutine
}

// loop is the partition goroutine's own state.
type loop struct {
	table   algorithms.Table
	batcher algorithms.BatchTable // table, if it decides a batch in one call
	stats   Stats                 // the counts of answers; the rest is filled in when asked
	retired algorithms.Counts     // the counts of tables swapped out
	clock   clock.Clock
	origin  time.Time     // the clock's reading at Start
	reading time.Duration // the clock's latest reading, as time since origin
	now     time.Duration // the timeline: time since Start, never going back
	next    int           // the batch item being decided (a field: its address goes to the table)
}

// Start starts the goroutine of a partition that owns table, reads the time
// from clk and queues up to mailboxSize requests (at least 0).
func Start(table algorithms.Table, clk clock.Clock, mailboxSize int) *Partition {
	p := newPartition(table, clk, mailboxSize)
	go p.run()
	return p
}

// newPartition returns a partition whose goroutine is not started.
func newPartition(table algorithms.Table, clk clock.Clock, mailboxSize int) *Partition {
	p := &Partition{
		mailbox: make(chan request, max(mailboxSize, 0)),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		loop:    &loop{clock: clk, origin: clk.Now()},
	}
	p.replies.New = func() any { return make(chan reply, 1) }
	p.loop.own(table)
	return p
}

// own makes table the loop's.
func (l *loop) own(table algorithms.Table) {
	l.table = table
	l.batcher, _ = table.(algorithms.BatchTable)
}

// AllowN asks the partition to decide n units for key. It returns the
// decision, ErrClosed, ctx.Err(), or the table's error for a bad n.
func (p *Partition) AllowN(ctx context.Context, key string, n int) (algorithms.Decision, error) {
	return p.call(ctx, request{op: opAllow, key: key, n: n})
}

// PeekN asks the partition what AllowN would answer now, changing nothing.
func (p *Partition) PeekN(ctx context.Context, key string, n int) (algorithms.Decision, error) {
	return p.call(ctx, request{op: opPeek, key: key, n: n})
}

// Reset asks the partition to forget key, so that it is untouched again.
func (p *Partition) Reset(ctx context.Context, key string) error {
	_, err := p.call(ctx, request{op: opReset, key: key})
	return err
}

// Pending is a batch in a partition's mailbox, to be waited on.
type Pending struct {
	p        *Partition
	ch       chan reply
	stopping bool
}

// SendBatch puts items in the mailbox as one message, to be decided in
// order with one reading of the clock, and returns at once; Wait waits for
// the answers. Each item's N must already be checked: the partition does not
// refuse a bad one, it records the table's error as a zero decision. Until
// Wait has returned nil, items belong to the partition: the caller must not
// touch them, and after a Wait that returned an error, never again.
func (p *Partition) SendBatch(ctx context.Context, items *[]Item) (Pending, error) {
	ch, stopping, err := p.send(ctx, request{op: opBatch, batch: items})
	return Pending{p, ch, stopping}, err
}

// Wait returns nil once every item of the batch holds its decision. If ctx
// is done first it returns ctx.Err() and the batch takes nothing (or gives
// back what it took), unless the answer beat the cancellation, in which case
// Wait returns nil. It returns ErrClosed if the partition stopped without
// deciding the batch.
func (pd Pending) Wait(ctx context.Context) error {
	_, err := pd.p.wait(ctx, pd.ch, pd.stopping)
	return err
}

// Stats returns the partition's figures.
func (p *Partition) Stats(ctx context.Context) (Stats, error) {
	a := &admin{}
	if _, err := p.call(ctx, request{op: opStats, admin: a}); err != nil {
		return Stats{}, err
	}
	a.stats.Queued = p.Depth()
	return a.stats, nil
}

// Snapshot returns the entries (see algorithms.NextEntry) of every key the
// partition holds that is not untouched, how many there are, and the
// clock's reading when it took them. Its error wraps errors.ErrUnsupported
// if the algorithm cannot save its states.
func (p *Partition) Snapshot(ctx context.Context, dst []byte) (entries []byte, keys int, wall time.Time, err error) {
	a := &admin{entries: dst}
	if _, err := p.call(ctx, request{op: opSnapshot, admin: a}); err != nil {
		return dst, 0, time.Time{}, err
	}
	return a.entries, a.keys, a.wall, nil
}

// Now returns the partition's now, a point on its timeline, and the
// clock's reading at that point. The partition's now never goes back.
func (p *Partition) Now(ctx context.Context) (time.Duration, time.Time, error) {
	a := &admin{}
	if _, err := p.call(ctx, request{op: opNow, admin: a}); err != nil {
		return 0, time.Time{}, err
	}
	return a.now, a.wall, nil
}

// Swap makes table the partition's table, in place of the one it has, and
// bounds it by limit. table must not be used by anyone else. Swap waits for the partition
// whatever ctx says once the request is sent, so a swap is never left
// half-done; it returns ErrClosed if the partition stopped first.
func (p *Partition) Swap(ctx context.Context, table algorithms.Table, limit algorithms.KeyLimit) error {
	ch, stopping, err := p.send(ctx, request{op: opSwap, admin: &admin{table: table, limit: limit}})
	if err != nil {
		return err
	}
	_, err = p.wait(context.Background(), ch, stopping)
	return err
}

// Depth returns the number of requests waiting in the mailbox.
func (p *Partition) Depth() int { return len(p.mailbox) }

// Stop turns new calls away with ErrClosed and tells the goroutine to answer
// what is queued and exit. It may wait for room in the mailbox, not for the
// goroutine to exit: Done is closed once it has. Stop is idempotent.
func (p *Partition) Stop() {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.mailbox <- request{op: opStop}
	})
}

// Done returns a channel that is closed once the goroutine has exited.
func (p *Partition) Done() <-chan struct{} { return p.done }

// call sends req and waits for its answer.
func (p *Partition) call(ctx context.Context, req request) (algorithms.Decision, error) {
	ch, stopping, err := p.send(ctx, req)
	if err != nil {
		return algorithms.Decision{}, err
	}
	return p.wait(ctx, ch, stopping)
}

// send puts req in the mailbox with a reply channel of its own, and returns
// that channel, and whether the partition was stopping once it was sent.
func (p *Partition) send(ctx context.Context, req request) (ch chan reply, stopping bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	// select picks at random among ready cases: look at stop first, so that
	// a stopped partition takes no more requests.
	if closed(p.stop) {
		return nil, false, ErrClosed
	}
	req.reply = p.replies.Get().(chan reply)
	select {
	case p.mailbox <- req: // room in the mailbox: the common case
	default:
		select {
		case p.mailbox <- req:
		case <-p.stop:
			p.replies.Put(req.reply)
			return nil, false, ErrClosed
		case <-ctx.Done():
			p.replies.Put(req.reply)
			return nil, false, ctx.Err()
		}
	}
	// If stop is still open, Stop's message will come after req.
	return req.reply, closed(p.stop), nil
}

// wait returns the answer that arrives on ch, ctx.Err() if ctx is done first
// or, if the partition was stopping when the request was sent, ErrClosed if
// the goroutine exits without answering.
func (p *Partition) wait(ctx context.Context, ch chan reply, stopping bool) (algorithms.Decision, error) {
	done := ctx.Done()
	switch {
	case !stopping && done == nil: // context.Background and the like
		r := <-ch
		p.replies.Put(ch)
		return r.d, r.err
	case !stopping:
		select {
		case r := <-ch:
			p.replies.Put(ch)
			return r.d, r.err
		case <-done:
			return p.abandon(ctx, ch)
		}
	}
	select {
	case r := <-ch:
		return r.d, r.err
	case <-done:
		return p.abandon(ctx, ch)
	case <-p.done:
		// The goroutine has exited. If it drained our request, the
		// answer is there; one sent after its last look never will be.
		select {
		case r := <-ch:
			return r.d, r.err
		default:
			return algorithms.Decision{}, ErrClosed
		}
	}
}

// closed reports whether c is closed, without waiting.
func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
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
	l := p.loop
	for {
		req := <-p.mailbox
		// The requests queued behind req were all sent before the clock is
		// read, so one reading serves them all: never a time before a
		// caller's send, and one clock read per burst under load.
		queued := len(p.mailbox)
		now := l.tick()
		served := 0 // requests, a batch's items one by one
		for {
			if req.op == opStop {
				p.drain(now)
				return
			}
			served += l.serve(req, now)
			if queued == 0 {
				break
			}
			req, queued = <-p.mailbox, queued-1 // there: only this goroutine receives
		}
		// Forgetting comes after the burst's answers, so no caller in it
		// waits for it.
		l.expire(now-linger, expireBase+expirePerRequest*served)
	}
}

// drain answers the requests still in the mailbox; now is the latest clock
// reading, taken before any of them.
func (p *Partition) drain(now time.Duration) {
	for {
		select {
		case req := <-p.mailbox:
			p.loop.serve(req, now)
		default:
			return
		}
	}
}

// serve decides one request at now and delivers the answer. It returns
// how many requests that was: a batch's items, or 1.
func (l *loop) serve(req request, now time.Duration) (served int) {
	if len(req.reply) > 0 {
		return 0 // the caller gave up before its turn: apply nothing
	}
	served = 1
	var r reply
	switch req.op {
	case opAllow:
		r.d, r.err = l.allow(req.key, now, req.n)
	case opPeek:
		r.d, r.err = l.peek(req.key, now, req.n)
	case opReset:
		l.table.Reset(req.key)
	case opBatch:
		items := *req.batch
		for i := 0; i < len(items); {
			i = l.allowFrom(items, i, now)
		}
		served = len(items)
	default:
		r.err = l.administer(req.op, req.admin, now)
	}
	l.deliver(req, now, r)
	return served
}

// allow decides n units for key at now, under supervision.
func (l *loop) allow(key string, now time.Duration, n int) (d algorithms.Decision, err error) {
	defer l.supervise(key, &d, &err)
	return l.table.AllowN(key, now, n)
}

// allowFrom decides items from the i-th on, under one supervision for
// them all, and returns len(items); or, if the algorithm panics on an
// item, fails that item as allow would and returns the index after it.
func (l *loop) allowFrom(items []Item, i int, now time.Duration) (next int) {
	defer func() {
		if v := recover(); v != nil {
			i := l.next // the item the table was deciding
			items[i].D, items[i].Err = algorithms.Decision{}, panicError(v)
			l.table.Reset(items[i].Key)
			next = i + 1
		}
	}()
	l.next = i
	if l.batcher != nil {
		l.batcher.AllowEach(items, now, &l.next)
		return len(items)
	}
	for ; l.next < len(items); l.next++ {
		it := &items[l.next]
		it.D, it.Err = l.table.AllowN(it.Key, now, it.N)
	}
	return len(items)
}

// peek says what allow would, under supervision. The table peeks on a copy
// of the key's state value, so a panic in it fails the Peek and leaves the
// key as it was (unless PeekN, breaking its promise, wrote through a
// pointer the state holds: the built-in algorithms never do).
func (l *loop) peek(key string, now time.Duration, n int) (d algorithms.Decision, err error) {
	defer func() {
		if v := recover(); v != nil {
			d, err = algorithms.Decision{}, panicError(v)
		}
	}()
	return l.table.PeekN(key, now, n)
}

// refund gives back n units on key, under supervision: a refund that
// panics drops the key, and is counted.
func (l *loop) refund(key string, now time.Duration, n int) {
	if l.tryRefund(key, now, n) != nil {
		l.stats.Panicked++
	}
}

// tryRefund gives back n units on key, and returns ErrAlgorithmPanic if
// the rule panicked (and the key was dropped).
func (l *loop) tryRefund(key string, now time.Duration, n int) (err error) {
	var d algorithms.Decision
	defer l.supervise(key, &d, &err)
	l.table.Refund(key, now, n)
	return nil
}

// supervise, deferred, turns a panic in the algorithm into an
// ErrAlgorithmPanic for the request, and drops the key's state, which the
// panic may have left half-written.
func (l *loop) supervise(key string, d *algorithms.Decision, err *error) {
	v := recover()
	if v == nil {
		return
	}
	*d, *err = algorithms.Decision{}, panicError(v)
	l.table.Reset(key)
}

// panicError wraps a panic's value in ErrAlgorithmPanic.
func panicError(v any) error {
	if e, ok := v.(error); ok {
		return fmt.Errorf("%w: %w", ErrAlgorithmPanic, e)
	}
	return fmt.Errorf("%w: %v", ErrAlgorithmPanic, v)
}

// expire forgets keys untouched at now, within budget, under supervision:
// the table forgets a key whose rule panics as it asks it, and the panic
// is counted.
func (l *loop) expire(now time.Duration, budget int) {
	defer func() {
		if v := recover(); v != nil {
			l.stats.Panicked++
		}
	}()
	l.table.Expire(now, budget)
}

// administer serves an administrative request. A panic in the rule (while
// counting idle keys, or saving states) fails the request; the table has
// forgotten the key it panicked on.
func (l *loop) administer(o op, a *admin, now time.Duration) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicError(v)
		}
	}()
	switch o {
	case opStats:
		c := l.table.Counts(now)
		a.stats = l.stats
		a.stats.Keys, a.stats.Idle = l.table.Len()-c.Idle, c.Idle
		a.stats.Expired = l.retired.Expired + c.Expired
		a.stats.Evicted = l.retired.Evicted + c.Evicted
	case opSnapshot:
		a.entries, a.keys, err = l.table.AppendSnapshot(a.entries, now)
		a.wall = l.clock.Now()
	case opNow:
		a.now, a.wall = now, l.clock.Now()
	case opSwap:
		c := l.table.Counts(math.MinInt64) // no key is idle then: no need to count them
		l.retired.Expired += c.Expired
		l.retired.Evicted += c.Evicted
		a.table.Bound(a.limit)
		l.own(a.table)
		a.table = nil
	}
	return err
}

// deliver sends r without blocking and counts it. If the caller gave up
// while the request was decided, its channel is full: the grants are then
// taken back, a batch's latest first. (A Reset whose caller left stands:
// the caller cannot tell whether it happened, and forgetting a key again is
// harmless. So does a swap: see Swap.)
func (l *loop) deliver(req request, now time.Duration, r reply) {
	var c Stats
	c.count(req, r) // now: once sent, a batch's items are the caller's
	select {
	case req.reply <- r:
		l.stats.Allowed += c.Allowed
		l.stats.Denied += c.Denied
		l.stats.Refused += c.Refused
		l.stats.Panicked += c.Panicked
		return
	default:
	}
	switch req.op {
	case opAllow:
		if r.d.Allowed {
			l.refund(req.key, now, req.n)
		}
	case opBatch:
		items := *req.batch
		for i := len(items) - 1; i >= 0; i-- {
			if items[i].D.Allowed {
				l.refund(items[i].Key, now, items[i].N)
			}
		}
	}
}

// count counts the answer r to req.
func (s *Stats) count(req request, r reply) {
	switch req.op {
	case opAllow:
		s.note(r.d, r.err)
	case opBatch:
		for _, it := range *req.batch {
			s.note(it.D, it.Err)
		}
	default: // a Peek, an administrative request
		if errors.Is(r.err, ErrAlgorithmPanic) {
			s.Panicked++
		}
	}
}

// note counts one decision or error.
func (s *Stats) note(d algorithms.Decision, err error) {
	switch {
	case err == nil && d.Allowed:
		s.Allowed++
	case err == nil:
		s.Denied++
	case errors.Is(err, ErrAlgorithmPanic):
		s.Panicked++
	default:
		s.Refused++
	}
}

// tick reads the clock and returns the partition's timeline: the time since
// Start, counting only forward steps of the clock. A clock that steps back
// adds nothing, and time counts on from its new reading, so a backward step
// neither grants quota nor locks anyone out. The timeline stops at the
// largest Duration, about 292 years after Start.
//
// The clock is read only when a request arrives. clock.Real is monotonic,
// so this changes nothing for it; for a clock that steps back and then
// forward again (a Fake, a custom Clock), what the forward step counts
// depends on whether a request read the clock in between: if one did, the
// whole forward step counts as time passing.
func (l *loop) tick() time.Duration {
	reading := l.clock.Since(l.origin)
	if reading > l.reading {
		d := reading - l.reading // below 0 if the step passed the largest Duration
		if d < 0 || d > math.MaxInt64-l.now {
			l.now = math.MaxInt64
		} else {
			l.now += d
		}
	}
	l.reading = reading
	return l.now
}
