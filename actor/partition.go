// Package actor is the partition goroutine of a chanlimit router: the one
// owner of a table of keys, which it serves one request at a time from its
// mailbox. Callers never touch the table; they send a request by value and
// read the answer from a reply channel.
//
// Its API is the router's: a partition owns a table from chanlimit's
// internal packages, so the package is public to be read, as the protocol
// it is, not to be built on.
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
//   - The requests on the hot path (allow, peek, reset, a batch, a wait
//     and its leaving, a batch of tries) are a closed set of messages.
//     Every other message is a function that the goroutine runs on its
//     state between two requests (Do), so an administrative operation is
//     written in one place, by its caller. After it, the partition
//     re-decides the lines of the keys whose policies the table says it
//     changed (Table.Changed), and no other, so a function that changes
//     nothing (Stats, PoliciesOf) costs the same however many callers
//     wait.
//   - Code the partition does not own is supervised: the table meets a
//     panic in a rule (see keytable.Table), and the goroutine a panic in
//     the Clock, which fails the requests that came with that reading. The
//     partition and its other keys go on.
//   - Callers waiting on a key (WaitN) wait in the key's line, in the
//     partition, answered on their reply channels when their turn comes;
//     one timer from the Clock wakes the partition for the earliest line
//     due, and is read only while a line exists, so a partition nobody
//     waits on reads its mailbox alone. A line that is due is served
//     before anything is decided after it, whether or not the timer has
//     fired yet, so a request at its RetryAfter finds the line ahead of
//     it served. A caller that stops waiting sends a leave message and
//     waits for its answer (wait.go).
//   - Idle keys expire a few at a time, after each burst of messages has
//     been answered (the table's Expire, with a budget that grows with the
//     burst), so a million keys becoming idle at once never stall the
//     partition. A key expires a grace period after it becomes idle, so
//     that one used every few moments keeps its memory.
//   - The goroutine's own state lives apart from what callers read, so its
//     writes never make callers' cache lines bounce.
package actor

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/errs"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// Expiry: after each burst of messages the table may do expireBase steps
// of expiring work, plus expirePerRequest for each request in the burst
// (each item of a batch counts). A request adds at most two steps of work
// (its key, new, expires once; a later deadline is caught up with once),
// so expiring keeps pace, a few steps at a time, and never stalls.
//
// A key expires once it has been idle for grace: a key that comes back
// within it keeps its slot and its state's memory, so a key used more
// often than that costs no allocation even if its state is untouched
// between uses (a generous limit). A new key that needs room under
// MaxKeys takes the place of an idle key at once, grace or not.
const (
	expireBase       = 8
	expirePerRequest = 2
	grace            = time.Second
)

// op is the kind of a request. The set is closed: each op has a method on
// Partition.
type op uint8

const (
	opAllow op = iota + 1
	opPeek
	opReset
	opBatch
	opTry   // a batch of WaitN requests, each granted now or left to wait (wait.go)
	opDo    // run do on the partition's state
	opWait  // grant n units on key, in line with the key's other waiters (wait.go)
	opLeave // take the waiter whose reply channel this is out of key's line
	opStop  // sent by Stop: answer what is queued, then exit
)

// request is one message in a mailbox, sent by value.
type request struct {
	op    op
	key   string
	n     int
	quota *keytable.Quota    // opAllow, opPeek, opWait: where to write the key's quota with the answer (fillQuota)
	batch *[]keytable.Item   // opBatch, opTry: decided in order, answered in place
	do    func(*State) error // opDo
	reply chan reply
	ctx   context.Context // the caller's: a remote table's round trip ends with the latest deadline of its burst (remote.go)

	budget time.Duration // opWait: the time left until ctx's deadline when it was sent; -1: no deadline
}

// reply is the answer to one request.
type reply struct {
	d   algorithms.Decision
	err error
}

// State is a partition's state, lent to a function that Do runs between
// two requests. The function must not keep any of it.
type State struct {
	Table keytable.Table // the partition's keys
	Now   time.Duration  // the partition's now: time since Start, never going back

	// Wall is the time of day Now stands for, as the clock counted it: its
	// reading at Start plus the time it has counted since, which a step of
	// the clock's time of day after Start does not move (see ReadClock).
	Wall time.Time

	// ClockErr is the error of the reading of the clock that came with
	// this message, if it failed; Now and Wall are then those of the
	// latest reading that worked.
	ClockErr error

	Counts Counts // of the answers delivered so far

	Waiting int // WaitN calls in line on the partition's keys

	clock   clock.Clock
	calling calling // the code the goroutine is in that it does not own, if it may end the goroutine
}

// ReadClock returns the clock's reading now, its time of day, for a
// function that needs one besides Wall: a clock's time of day can be set,
// and then the two differ. The reading is supervised: a panic is counted,
// and returned as an error wrapping ErrClockPanic.
func (s *State) ReadClock() (time.Time, error) {
	var t time.Time
	s.calling = callingClock
	err := supervise.Call(errs.ErrClockPanic, func() { t = s.clock.Now() })
	s.calling = callingNone
	if err != nil {
		s.Counts.ClockPanics++
	}
	return t, err
}

// calling says what code the goroutine does not own it is in, for when
// that code ends the goroutine (see carryOn).
type calling uint8

const (
	callingNone  calling = iota // the table (which notes the rule it asks) or nothing
	callingTick                 // the clock, for the reading of a burst
	callingClock                // the clock, for a function run by Do
)

// Counts are what a partition counts itself: the answers it delivered (a
// batch's items one by one), and the panics of its Clock. A request whose
// caller gave up before its answer counts nowhere, and neither does a Peek.
type Counts struct {
	Allowed     uint64 // decisions that allowed
	Denied      uint64 // decisions that denied
	Refused     uint64 // requests refused with ErrTooManyKeys
	ClockPanics uint64 // readings of the Clock that panicked
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
	state    State
	d        algorithms.Decision // where the table writes a decision: a pointer passed to an interface escapes, and this one is on the heap already
	origin   time.Time           // the clock's reading at Start
	reading  time.Duration       // the clock's latest reading, as time since origin
	real     bool                // the clock is clock.Real, which is not supervised (tick)
	inflight inflight            // the request being served, until it is answered
	stopping bool                // the stop message has come: drain, then exit
	left     left                // what a goroutine that ended left for the next (carry_on.go)
	waits    waiting             // the lines of callers waiting on keys (wait.go)
	remote   keytable.Remote     // the table, if its keys live elsewhere (remote.go); else nil

	// A remote table's (remote.go):
	burst       []request      // the burst, taken from the mailbox
	trips       int            // trips out
	work        chan *trip     // trips for the workers to make; room for maxTrips
	workers     int            // trip workers started
	workersDone sync.WaitGroup // the workers, until stopWorkers
	landed      chan *trip     // where trips come back; room for maxTrips
	landing     *trip          // the trip whose answers are being delivered
	landingAt   int            // the first of its requests not yet delivered
	choreAt     int            // the first of its chores not yet served
	spare       []*trip        // trips to reuse
	chores      []chore        // work for the table that is no caller's request, to send (flush)
	unparked    []request      // requests held behind a line's head, to serve now that it waits (remote_lines.go)
}

// inflight is what the goroutine must know of the request it serves to
// answer it, if code it does not own ends the goroutine (carry_on.go).
type inflight struct {
	reply  chan reply // nil: none
	op     op
	batch  *[]keytable.Item
	refund int           // a batch's refund mark: the items before it are still to be given back, latest first
	by     keytable.From // where a remote table's grant came from (AllowN's; a batch's are in its items)
}

// The errors a partition returns are chanlimit's: ErrClosed below is
// chanlimit.ErrClosed.

// Start starts the goroutine of a partition that owns table, reads the time
// from clk, taking origin (a reading of clk) as the start of its timeline,
// and queues up to mailboxSize requests (at least 0). A key's line of
// waiters (WaitN) holds at most maxWaiters; 0 means no cap. Start itself
// calls neither the table nor the clock.
func Start(table keytable.Table, clk clock.Clock, origin time.Time, mailboxSize, maxWaiters int) *Partition {
	p := newPartition(table, clk, origin, mailboxSize)
	p.loop.waits.max = max(maxWaiters, 0)
	go p.run()
	return p
}

// newPartition returns a partition whose goroutine is not started.
func newPartition(table keytable.Table, clk clock.Clock, origin time.Time, mailboxSize int) *Partition {
	p := &Partition{
		mailbox: make(chan request, max(mailboxSize, 0)),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		loop:    &loop{state: State{Table: table, Wall: origin, clock: clk}, origin: origin, real: clk == clock.Real()},
	}
	p.replies.New = func() any { return make(chan reply, 1) }
	if remote, ok := table.(keytable.Remote); ok {
		p.loop.remote, p.loop.landed, p.loop.work = remote, make(chan *trip, maxTrips), make(chan *trip, maxTrips)
	}
	return p
}

// AllowN asks the partition to decide n units for key; n must lie in
// [1, the rule's capacity]. It returns the decision, ErrClosed, ctx.Err(),
// or the table's error.
func (p *Partition) AllowN(ctx context.Context, key string, n int) (algorithms.Decision, error) {
	r := p.call(ctx, request{op: opAllow, key: key, n: n})
	return r.d, r.err
}

// AllowQuota is AllowN, and once the request is decided it writes into q
// what key has under each of its policies (see fillQuota), in the same
// round trip: what an HTTP RateLimit field tells. q is the partition's
// until AllowQuota returns; after it returned ctx's error, the caller must
// not touch q again.
func (p *Partition) AllowQuota(ctx context.Context, key string, n int, q *keytable.Quota) (algorithms.Decision, error) {
	r := p.call(ctx, request{op: opAllow, key: key, n: n, quota: q})
	return r.d, r.err
}

// PeekQuota is PeekN, and writes into q what AllowQuota would.
func (p *Partition) PeekQuota(ctx context.Context, key string, n int, q *keytable.Quota) (algorithms.Decision, error) {
	r := p.call(ctx, request{op: opPeek, key: key, n: n, quota: q})
	return r.d, r.err
}

// PeekN asks the partition what AllowN would answer now, changing nothing.
func (p *Partition) PeekN(ctx context.Context, key string, n int) (algorithms.Decision, error) {
	r := p.call(ctx, request{op: opPeek, key: key, n: n})
	return r.d, r.err
}

// Reset asks the partition to drop key, so that it is untouched again.
func (p *Partition) Reset(ctx context.Context, key string) error {
	return p.call(ctx, request{op: opReset, key: key}).err
}

// Pending is a batch in a partition's mailbox, to be waited on.
type Pending struct {
	p        *Partition
	ch       chan reply
	stopping bool
}

// SendBatch puts items in the mailbox as one message, to be decided in
// order with one reading of the clock, and returns at once; Wait waits for
// the answers. Each item's N must lie in [1, the rule's capacity]. Until
// Wait has returned nil, items belong to the partition: the caller must not
// touch them, and after a Wait that returned an error, never again.
func (p *Partition) SendBatch(ctx context.Context, items *[]keytable.Item) (Pending, error) {
	ch, stopping, err := p.send(ctx, request{op: opBatch, batch: items})
	return Pending{p, ch, stopping}, err
}

// SendTries is SendBatch for WaitN requests that must not wait: each item
// is granted if WaitN would grant it at once (its key has no line, and the
// rule allows it with no Delay), and otherwise left not Allowed, with no
// error, having taken nothing; its errors are WaitN's.
func (p *Partition) SendTries(ctx context.Context, items *[]keytable.Item) (Pending, error) {
	ch, stopping, err := p.send(ctx, request{op: opTry, batch: items})
	return Pending{p, ch, stopping}, err
}

// Wait returns nil once every item of the batch holds its decision or its
// error. If ctx is done first it returns ctx.Err() and the batch takes
// nothing (or gives back what it took), unless the answer beat the
// cancellation, in which case Wait returns nil. It returns ErrClosed if the
// partition stopped without deciding the batch.
func (pd Pending) Wait(ctx context.Context) error {
	return pd.p.wait(ctx, pd.ch, pd.stopping).err
}

// Do runs f on the partition's goroutine, between two requests, and
// returns f's error. f sees the partition's state as it stands then; it
// may read it and use its Table, and must not keep anything of it. Do
// returns ErrClosed if the partition stopped first, and ctx.Err() if ctx
// ends first: f then runs at most once, and whatever it writes, the
// caller must not read. (Pass a ctx that never ends for a step that must
// not be left half-done.) f needs no reading of the clock: if the one that
// came with this message panicked, f sees the latest that worked.
func (p *Partition) Do(ctx context.Context, f func(*State) error) error {
	return p.call(ctx, request{op: opDo, do: f}).err
}

// Queued returns the number of requests waiting in the mailbox.
func (p *Partition) Queued() int { return len(p.mailbox) }

// Stop turns new calls away with ErrClosed and tells the goroutine to answer
// what is queued and exit. It may wait for room in the mailbox, not for the
// goroutine to exit: Done is closed once it has. The goroutine exits only
// once the request it is serving returns: a rule that never returns keeps
// it, and Done, open. Stop is idempotent.
func (p *Partition) Stop() {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.mailbox <- request{op: opStop}
	})
}

// Done returns a channel that is closed once the goroutine has exited.
func (p *Partition) Done() <-chan struct{} { return p.done }

// call sends req and waits for its answer.
func (p *Partition) call(ctx context.Context, req request) reply {
	ch, stopping, err := p.send(ctx, req)
	if err != nil {
		return reply{err: err}
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
		return nil, false, errs.ErrClosed
	}
	req.reply = p.replies.Get().(chan reply)
	req.ctx = ctx
	select {
	case p.mailbox <- req: // room in the mailbox: the common case
	default:
		select {
		case p.mailbox <- req:
		case <-p.stop:
			p.replies.Put(req.reply)
			return nil, false, errs.ErrClosed
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
func (p *Partition) wait(ctx context.Context, ch chan reply, stopping bool) reply {
	done := ctx.Done()
	switch {
	case !stopping && done == nil: // context.Background and the like
		r := <-ch
		p.replies.Put(ch)
		return r
	case !stopping:
		select {
		case r := <-ch:
			p.replies.Put(ch)
			return r
		case <-done:
			return p.abandon(ctx, ch)
		}
	}
	select {
	case r := <-ch:
		return r
	case <-done:
		return p.abandon(ctx, ch)
	case <-p.done:
		// The goroutine has exited. If it drained our request, the
		// answer is there; one sent after its last look never will be.
		select {
		case r := <-ch:
			return r
		default:
			return reply{err: errs.ErrClosed}
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
func (p *Partition) abandon(ctx context.Context, ch chan reply) reply {
	select {
	case ch <- reply{}: // the mark; the channel is never reused
		return reply{err: ctx.Err()}
	default:
		r := <-ch
		p.replies.Put(ch)
		return r
	}
}

func (p *Partition) run() {
	exited := false
	defer func() {
		if !exited {
			p.carryOn()
		}
	}()
	l := p.loop
	p.takeOver() // what a goroutine before this one left undone, if any
	if l.stopping {
		p.drain(l.state.Now, nil)
		exited = true
		l.stopWorkers()
		close(p.done)
		return
	}
	for {
		req, tr, got := p.receive()
		switch got {
		case gotTimer: // a line is due
			l.wake()
			continue
		case gotTrip: // a remote table's round trip is back
			served := l.land(tr)
			l.flush()
			l.arm(l.state.Now)
			l.state.Table.Expire(l.state.Now-grace, expireBase+expirePerRequest*served)
			continue
		}
		// The requests queued behind req were all sent before the clock is
		// read, so one reading serves them all: never a time before a
		// caller's send, and one clock read per burst under load.
		queued := len(p.mailbox)
		l.left.first = req // until the clock is read
		now, err := l.tick()
		l.left.first = request{}
		var served int // requests, a batch's items one by one
		var stop bool
		if l.remote == nil {
			served, stop = p.serveBurst(req, queued, now, err)
		} else {
			served, stop = p.serveRemote(req, queued, now, err) // remote.go
		}
		if stop {
			l.stopping = true
			p.drain(now, err)
			exited = true
			l.stopWorkers()
			close(p.done)
			return
		}
		if len(l.waits.due) > 0 {
			if err == nil {
				l.serveDue(now)
			}
			l.flush()
			l.arm(l.state.Now)
		} else {
			l.flush()
		}
		// Expiring comes after the burst's answers, so no caller in it
		// waits for it.
		l.state.Table.Expire(now-grace, expireBase+expirePerRequest*served)
	}
}

// serveBurst serves req and the queued requests behind it, in order, at
// now, and reports how many requests that was (see serve), and whether the
// stop message came: the requests behind it are left in the mailbox, for
// drain.
func (p *Partition) serveBurst(req request, queued int, now time.Duration, clockErr error) (served int, stop bool) {
	for {
		if req.op == opStop {
			return served, true
		}
		served += p.loop.serve(req, now, clockErr)
		if queued == 0 {
			return served, false
		}
		req, queued = <-p.mailbox, queued-1 // there: only this goroutine receives
	}
}

// What receive got.
const (
	gotRequest = iota
	gotTimer   // the timer of the lines fired
	gotTrip    // a remote table's trip landed
)

// receive returns the next request in the mailbox, or that the timer of
// the lines fired or a remote table's trip landed first. While no line is
// due and no trip is out, it reads the mailbox alone.
func (p *Partition) receive() (request, *trip, int) {
	l := p.loop
	fired := l.waits.fired
	if fired == nil && l.trips == 0 {
		return <-p.mailbox, nil, gotRequest
	}
	var landed chan *trip // nil while no trip is out: never ready
	if l.trips > 0 {
		landed = l.landed
	}
	select {
	case req := <-p.mailbox:
		return req, nil, gotRequest
	case <-fired:
		l.waits.fired = nil // spent
		return request{}, nil, gotTimer
	case tr := <-landed:
		return request{}, tr, gotTrip
	}
}

// wake serves the lines due when the timer fires, and sets it again.
func (l *loop) wake() {
	now, err := l.tick()
	if err == nil {
		l.serveDue(now)
	}
	l.flush()
	l.arm(l.state.Now)
	l.state.Table.Expire(now-grace, expireBase)
}

// drain answers the requests still in the mailbox with the latest clock
// reading, taken before any of them, or its error, and then every waiter
// still in line with ErrClosed.
func (p *Partition) drain(now time.Duration, clockErr error) {
	l := p.loop
	for {
		l.landAll()
		select {
		case req := <-p.mailbox:
			l.serve(req, now, clockErr)
			continue
		default:
		}
		if l.flush() {
			continue // a remote table's work went out, or requests were unparked
		}
		lines := len(l.waits.due) > 0
		l.closeLines(errs.ErrClosed) // a remote table's requests held behind the lines are unparked, to serve
		if !lines {
			return
		}
	}
}

// serve decides one request at now and delivers the answer, holding it
// as the request in flight meanwhile. If reading the clock failed with
// clockErr, the requests that need the time (AllowN, PeekN, a batch) fail
// with that error; Reset and Do need none, and go on at the latest reading
// that worked. It returns how many requests that was: a batch's items, or
// 1.
func (l *loop) serve(req request, now time.Duration, clockErr error) (served int) {
	if len(req.reply) > 0 {
		return 0 // the caller gave up before its turn: apply nothing
	}
	if l.remote != nil && clockErr == nil && l.together(req) {
		return l.dispatch([]request{req}, now) // a remote table decides through trips alone
	}
	if clockErr == nil && req.op != opLeave && l.waits.dueBy(now) {
		// What is due comes first: a line due by now is served on its
		// schedule before anything after it is decided, even if the
		// timer has not told the partition yet (a timer fires late, and
		// select picks the mailbox or the timer at random). req waits in
		// left.next meanwhile: if the rule ends the goroutine on a
		// waiter, the next serves req after answering it.
		l.left.next = req
		l.serveDue(now)
		l.left.next = request{}
	}
	l.hold(req)
	served = 1
	t := l.state.Table
	var r reply
	switch {
	case req.op == opLeave:
		l.leave(req, now)
		l.inflight.reply = nil
		return 0
	case clockErr != nil && req.op == opWait:
		r.err = clockErr
	case req.op == opWait:
		var queued bool
		if r, queued = l.wait(req, now); queued {
			l.inflight.reply = nil // answered when its turn comes
			return 1
		}
	case clockErr != nil && (req.op == opBatch || req.op == opTry):
		items := *req.batch
		for i := range items {
			items[i].D, items[i].Err = algorithms.Decision{}, clockErr
		}
		served = len(items)
	case clockErr != nil && (req.op == opAllow || req.op == opPeek):
		r.err = clockErr
	case (req.op == opAllow || req.op == opPeek) && l.waits.lineOf(req.key) != nil:
		if ln := l.waits.lineOf(req.key); ln.asking {
			l.inflight.reply = nil
			ln.parked = append(ln.parked, req) // behind its head, out to a remote table (remote_lines.go)
			return 0
		}
		r.d, r.err = l.inLine(req.key, req.n, now, l.waits.lineOf(req.key)) // no barging
	case req.op == opAllow:
		r.err = t.AllowN(req.key, now, req.n, &l.d)
		r.d = l.d
	case req.op == opPeek:
		r.err = t.PeekN(req.key, now, req.n, &l.d)
		r.d = l.d
	case req.op == opReset:
		t.Reset(req.key)
		if ln := l.waits.lineOf(req.key); ln != nil {
			l.waits.reschedule(ln, now) // its head may be granted now
		}
	case req.op == opBatch:
		if len(l.waits.lines) > 0 {
			l.inLineEach(*req.batch, now)
		}
		t.AllowEach(*req.batch, now)
		served = len(*req.batch)
	case req.op == opTry:
		l.tryEach(*req.batch, now)
		served = len(*req.batch)
	case req.op == opDo:
		l.state.ClockErr = clockErr
		l.state.Wall = l.origin.Add(l.reading)
		r.err = req.do(&l.state)
		l.state.ClockErr = nil
		l.retryChanged(l.state.Now)
	}
	if req.quota != nil && decided(r.err) {
		l.fillQuota(req.key, now, &r.d, req.quota)
	}
	l.deliver(req, now, r)
	l.inflight.reply = nil // answered; not deferred: code that ends the goroutine leaves it for takeOver
	return served
}

// untilMore returns the wait of a request for remaining+1 units on key
// at now: 0 if that is above the key's capacity, or if the peek fails (a
// rule's panic, which the table has dealt with; the allowance stands).
func (l *loop) untilMore(key string, now time.Duration, remaining int) time.Duration {
	// l.d is free: the allowance was copied out of it. A remote table's
	// wait comes in a trip of its own (remote_lines.go), never at once.
	if l.remote != nil || remaining == math.MaxInt || l.state.Table.PeekN(key, now, remaining+1, &l.d) != nil {
		return 0
	}
	return l.d.RetryAfter
}

// hold notes req as the request in flight. A batch's refund mark starts
// past its last item: those not decided yet are not Allowed, and giveBack
// passes them by.
func (l *loop) hold(req request) {
	l.inflight = inflight{reply: req.reply, op: req.op, batch: req.batch}
	if req.batch != nil {
		l.inflight.refund = len(*req.batch)
	}
}

// deliver sends r without blocking and counts it. If the caller gave up
// while the request was decided, its channel is full: the grants are then
// taken back, a batch's latest first. (A Reset whose caller left stands:
// the caller cannot tell whether it happened, and dropping a key again is
// harmless. So does what a function run by Do did: see Do.)
func (l *loop) deliver(req request, now time.Duration, r reply) {
	var c Counts
	c.count(req, r) // now: once sent, a batch's items are the caller's
	select {
	case req.reply <- r:
		l.state.Counts.Allowed += c.Allowed
		l.state.Counts.Denied += c.Denied
		l.state.Counts.Refused += c.Refused
		return
	default:
	}
	switch req.op {
	case opAllow:
		if r.d.Allowed {
			l.refund(req.key, now, req.n, l.inflight.by)
		}
	case opBatch, opTry:
		l.giveBack(now)
	}
}

// refund gives back n units on key, granted at now, to where the grant
// came from: the table, or for a remote one, its store (through a trip),
// its local keys, or nowhere.
func (l *loop) refund(key string, now time.Duration, n int, by keytable.From) {
	switch {
	case l.remote == nil || by == keytable.FromLocal:
		l.state.Table.Refund(key, now, n)
	case by == keytable.FromStore:
		l.chores = append(l.chores, chore{at: now, item: keytable.Item{Key: key, N: n, Op: keytable.OpRefund}})
	}
}

// giveBack refunds the grants of the batch in flight, latest first, from
// its refund mark down, but for those whose key lost its state later in
// the batch (Item.Gone). The mark passes each item before its refund, so
// that if the rule ends the goroutine there, the next one goes on after it
// and gives nothing back twice (that item's key is dropped anyway).
func (l *loop) giveBack(now time.Duration) {
	items := *l.inflight.batch
	for l.inflight.refund > 0 {
		l.inflight.refund--
		if it := &items[l.inflight.refund]; it.D.Allowed && !it.Gone {
			l.refund(it.Key, now, it.N, it.By)
		}
	}
}

// count counts the answer r to req.
func (c *Counts) count(req request, r reply) {
	switch req.op {
	case opAllow:
		c.note(&r.d, r.err)
	case opWait:
		if _, late := r.err.(*tooLate); late {
			c.Denied++
		} else {
			c.note(&r.d, r.err)
		}
	case opBatch:
		items := *req.batch
		for i := range items { // by index: an Item is too large to copy per item
			c.note(&items[i].D, items[i].Err)
		}
	case opTry: // one left to wait is no answer yet
		items := *req.batch
		for i := range items {
			if it := &items[i]; it.Err != nil || it.D.Allowed {
				c.note(&it.D, it.Err)
			}
		}
	}
}

// note counts one decision or error. A panic's error counts where the
// panic does: the table counts a rule's, tick the Clock's. (It asks a
// panic's error nothing: errors.Is would call into the panic's value.)
func (c *Counts) note(d *algorithms.Decision, err error) {
	switch {
	case err == nil && d.Allowed:
		c.Allowed++
	case err == nil:
		c.Denied++
	case supervise.Panicked(err):
	case errors.Is(err, errs.ErrTooManyKeys):
		c.Refused++
	}
}

// tick reads the clock and returns the partition's timeline: the time since
// Start, counting only forward steps of the clock. A clock that steps back
// adds nothing, and time counts on from its new reading, so a backward step
// neither grants quota nor locks anyone out. The timeline stops at the
// largest Duration, about 292 years after Start. If the clock panics, tick
// counts it and returns its error, and the timeline stays where it was.
//
// The clock is read only when a request arrives. clock.Real is monotonic,
// so this changes nothing for it; for a clock that steps back and then
// forward again (a Fake, a custom Clock), what the forward step counts
// depends on whether a request read the clock in between: if one did, the
// whole forward step counts as time passing.
func (l *loop) tick() (time.Duration, error) {
	var reading time.Duration
	if l.real {
		// The package's own clock: it cannot panic, so it is read without
		// supervision, which costs more than the reading on every burst.
		reading = l.state.clock.Since(l.origin)
	} else {
		l.state.calling = callingTick
		err := supervise.Call(errs.ErrClockPanic, func() { reading = l.state.clock.Since(l.origin) })
		l.state.calling = callingNone
		if err != nil {
			l.state.Counts.ClockPanics++
			return l.state.Now, err
		}
	}
	if reading < l.reading {
		l.waits.setAt = math.MinInt64 // the timer is on the clock's time: set it again (arm)
	}
	if reading > l.reading {
		d := reading - l.reading // below 0 if the step passed the largest Duration
		if d < 0 || d > math.MaxInt64-l.state.Now {
			l.state.Now = math.MaxInt64
		} else {
			l.state.Now += d
		}
	}
	l.reading = reading // State.Wall is worked out from it when a function run by Do may read it
	return l.state.Now, nil
}
