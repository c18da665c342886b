// Package storeloop serves a router's partition when the router has a
// Store: the keys' states are the store's (package storetable), so each
// decision is a round trip, and the partition must go on serving its
// other keys while one is out. It serves the caller side of package actor
// (actor.Open) with a loop of its own:
//
//   - The loop takes a burst of messages from the mailbox, reads the
//     clock once for it, and hands the requests it can decide together (an
//     AllowN or a PeekN on a key nobody waits on, a Reset, a Refund, a
//     batch's items) to the store as one round trip (serve.go), in runs
//     between the other messages, which it serves one by one in their
//     order (a WaitN, a leave, a Do).
//   - A round trip (a trip) goes out on a worker that does nothing but
//     wait for the store, and comes back to the loop, which delivers the
//     answers (trips.go). Up to MaxTrips are out at once. Once they are,
//     what callers send is gathered, up to a mailbox's worth, and goes out
//     together when one lands: under load each trip decides many requests.
//   - Callers waiting on a key (WaitN) wait in the key's line, here, as in
//     memory: its head is asked at its turn, in a trip, and a request on
//     the key that does not join the line is answered by it (no barging),
//     or waits behind its head while it is out (lines.go).
//   - A grant whose caller left is given back to where it came from: the
//     store (StoreGiveBack, in a trip), the local keys (FailLocal's), or
//     nowhere (FailOpen's).
//   - The local keys' rules (FailLocal's) and the clock are code the loop
//     does not own: a panic fails the request it was deciding (the table
//     and supervise see to it), and a runtime.Goexit ends the goroutine, so
//     a new one takes over the same state, answering what was in flight
//     with an error (carry.go).
package storeloop

import (
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

// Expiry of the local keys, after each burst, as a partition in memory
// expires its keys (actor): expireBase steps, plus expirePerRequest for
// each request served, of keys idle for grace.
const (
	expireBase       = 8
	expirePerRequest = 2
	grace            = time.Second
)

// loop is the partition's goroutine's own state.
type loop struct {
	srv      *actor.Server
	mailbox  <-chan actor.Message
	size     int // the mailbox's
	table    *storetable.Table
	state    actor.State
	timeline actor.Timeline // the clock's readings, and the lines' timer
	stopping bool           // the stop message has come: drain, then exit

	lines    lines           // the lines of callers waiting on keys (lines.go)
	inflight inflight        // what is being served, until it is answered (carry.go)
	left     leftUndone      // what a goroutine that ended left undone, for the next (carry.go)
	burst    []actor.Message // the burst, taken from the mailbox
	trips    trips           // the round trips out, and what waits for room (trips.go)
	chores   []chore         // work for the store that is no caller's request, to send (flush)
	unparked []actor.Message // requests held behind a line's head, to serve now that it waits

	// The waiters granted whose answer waits for their quota's peek (a
	// chore, out or to send): a leave message finds them here.
	quotaWaits []*waiter
}

// Start starts the goroutine of a partition on table, which reads the
// time from clk, taking origin (a reading of clk) as the start of its
// timeline, queues up to mailboxSize requests, and lets a key's line hold
// at most maxWaiters (0: no cap), as actor.Start does for a table in
// memory.
func Start(table *storetable.Table, clk clock.Clock, origin time.Time, mailboxSize, maxWaiters int) *actor.Partition {
	p, l := newLoop(table, clk, origin, mailboxSize, maxWaiters)
	go l.run()
	return p
}

// newLoop returns a partition and its loop, whose goroutine is not
// started.
func newLoop(table *storetable.Table, clk clock.Clock, origin time.Time, mailboxSize, maxWaiters int) (*actor.Partition, *loop) {
	p, srv := actor.Open(mailboxSize)
	l := &loop{
		srv:      srv,
		mailbox:  srv.Mailbox(),
		size:     max(mailboxSize, 1),
		table:    table,
		state:    actor.NewState(table, clk, origin),
		timeline: actor.NewTimeline(clk, origin),
		trips:    newTrips(MaxTrips),
	}
	l.lines.max = max(maxWaiters, 0)
	return p, l
}

// run is the partition's goroutine: it takes over what a goroutine before
// it left undone, then receives and serves messages until the stop
// message, and answers what is left.
func (l *loop) run() {
	exited := false
	defer func() {
		if !exited {
			l.carryOn()
		}
	}()
	l.takeOver()
	if l.stopping {
		l.drain(l.state.Now, nil)
		exited = true
		l.exit()
		return
	}
	for {
		req, tr, got := l.receive()
		switch got {
		case gotTimer: // a line is due
			now, err := l.tick()
			if err == nil {
				l.serveDue(now)
			}
			l.afterBurst(expireBase)
			continue
		case gotTrip:
			served := l.land(tr)
			l.afterBurst(expireBase + expirePerRequest*served)
			continue
		}
		// The requests queued behind req were all sent before the clock is
		// read, so one reading serves them all.
		queued := len(l.mailbox)
		l.left.first = req // until the clock is read
		now, err := l.tick()
		l.left.first = actor.Message{}
		if !l.trips.room() { // what it takes may be gathered: req, and no more than there is room for
			queued = min(queued, max(l.trips.gatherRoom(l.size)-1, 0))
		}
		burst := append(l.burst[:0], req)
		for ; queued > 0; queued-- {
			burst = append(burst, <-l.mailbox) // there: only this goroutine receives
		}
		l.burst = burst
		served, stop := l.serveRun(burst, now, err)
		clear(burst) // no reference to a caller's channel or batch is kept
		if stop {
			l.drain(now, err)
			exited = true
			l.exit()
			return
		}
		if err == nil {
			l.serveDue(now)
		}
		l.afterBurst(expireBase + expirePerRequest*served)
	}
}

// afterBurst sends what the burst left for the store, sets the lines'
// timer, and expires local keys, within budget, once the burst's answers
// are out.
func (l *loop) afterBurst(budget int) {
	l.flush()
	l.arm(l.state.Now)
	l.table.Expire(l.state.Now-grace, budget)
}

// What receive got.
const (
	gotRequest = iota
	gotTimer   // the timer of the lines fired
	gotTrip    // a trip landed
)

// receive returns the next message in the mailbox, or that the timer of
// the lines fired or a trip landed first. While no trip has room and a
// mailbox's worth of requests is gathered (trips.gatherRoom), it leaves
// the mailbox unread.
func (l *loop) receive() (actor.Message, *trip, int) {
	fired := l.timeline.Fired()
	if fired == nil && l.trips.out == 0 {
		return <-l.mailbox, nil, gotRequest
	}
	var landed chan *trip // nil while no trip is out: never ready
	if l.trips.out > 0 {
		landed = l.trips.landed
	}
	mailbox := l.mailbox
	if !l.trips.room() && l.trips.gatherRoom(l.size) == 0 {
		mailbox = nil // it waits for a trip to land
	}
	select {
	case req := <-mailbox:
		return req, nil, gotRequest
	case <-fired:
		l.timeline.Spent()
		return actor.Message{}, nil, gotTimer
	case tr := <-landed:
		return actor.Message{}, tr, gotTrip
	}
}

// drain answers the messages still in the mailbox with the latest clock
// reading, taken before any of them, or its error, once every trip out
// has landed and what they left has been sent; then every waiter still in
// line gets ErrClosed.
func (l *loop) drain(now time.Duration, clockErr error) {
	l.stopping = true
	for {
		l.landAll()
		select {
		case req := <-l.mailbox:
			l.serveRun([]actor.Message{req}, now, clockErr)
			continue
		default:
		}
		if l.flush() {
			continue // work went out, or requests were unparked
		}
		lines := len(l.lines.due) > 0
		l.closeLines(actor.ErrClosed) // the requests held behind the lines are unparked, to serve
		if !lines {
			return
		}
	}
}

// exit lets the workers go and tells the callers that all is answered.
func (l *loop) exit() {
	l.trips.stop()
	l.srv.Exit()
}

// tick reads the clock once for a burst (actor.Timeline.Tick), and
// returns the partition's now. If the clock panics, tick counts it and
// returns its error, and now stays where it was.
func (l *loop) tick() (time.Duration, error) {
	l.inflight.clock = true
	now, err := l.timeline.Tick()
	l.inflight.clock = false
	if err != nil {
		l.state.Counts.ClockPanics++
		return l.state.Now, err
	}
	l.state.Tick(now)
	return now, nil
}
