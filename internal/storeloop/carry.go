package storeloop

import (
	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/internal/storetable"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// When code the loop calls but does not own (a local rule, under
// FailLocal or a function run by Do, or the clock) runs runtime.Goexit,
// the goroutine ends: no recover can stop it. So that every call still
// returns, run's deferred carryOn notes what the goroutine leaves undone
// and starts another goroutine in its place, on the same state, whose
// takeOver answers it: the message in flight, and the rest of a trip
// that was landing, get an error (ErrAlgorithmPanic, or ErrClockPanic),
// and what they were granted is given back, to where it came from; the
// messages of the burst after them are served. carryOn itself calls no code it does not own,
// since the goroutine is ending; takeOver may, and if that code ends its
// goroutine too, the next goroutine goes on from where it stopped.

// inflight is what is being served: the message, until it is answered, or
// a reading of the clock.
type inflight struct {
	msg    actor.Message
	on     bool              // msg is in flight
	items  []storetable.Item // a batch's, as decided: their grants go back if it is not delivered
	refund int               // the items before it are still to be given back, latest first
	by     storetable.From   // where an AllowN's grant came from
	grant  uint64            // with by: the store's name of the state it was taken from
	clock  bool              // the clock is being read (tick, the timer)
}

// inFlight notes req as in flight.
func (l *loop) inFlight(req *actor.Message) {
	l.inflight = inflight{msg: *req, on: true}
}

// outOfFlight notes that nothing is in flight: what was is answered, or
// will be, elsewhere (its key's line, a chore).
func (l *loop) outOfFlight() { l.inflight = inflight{} }

// leftUndone is what a goroutine that ended leaves undone, for the next.
type leftUndone struct {
	first  actor.Message   // the first message of a burst, until the clock's reading for it
	resume actor.Message   // that message, if the clock ended the goroutine: to serve on the reading before
	answer error           // the error for the message in flight
	ended  bool            // a goroutine ended: takeOver has work
	rest   []actor.Message // the burst, from the message after the one it was on

	landing   *trip // the trip whose answers were being delivered
	landingAt int   // the first of its requests not yet delivered
	choreAt   int   // the first of its chores not yet served
}

// carryOn, deferred by run, notes what the ending goroutine leaves undone
// and starts a goroutine to carry on.
func (l *loop) carryOn() {
	readClock := l.state.ExitedInClock() // a function run by Do was reading the clock
	switch {
	case l.inflight.clock && l.left.first.Kind() != 0: // the burst is not served yet: serve it as if the clock had panicked
		l.state.Counts.ClockPanics++
		l.left.resume = l.left.first
		l.stopping = l.stopping || l.left.first.Kind() == actor.KindStop
	case l.inflight.clock || readClock:
		l.state.Counts.ClockPanics++
		l.left.answer = supervise.Exited(actor.ErrClockPanic)
	default:
		l.table.Abandoned() // the key the rule was on, if any, as for a panic
		l.left.answer = supervise.Exited(actor.ErrAlgorithmPanic)
	}
	l.inflight.clock = false
	l.left.first = actor.Message{}
	l.left.ended = true
	go l.run()
}

// takeOver finishes what the goroutine before this one left undone, each
// step in turn, none deferred: the message whose reading of the clock
// ended it, on the reading before (so one that needs the time fails), the
// message in flight, the trip landing, and the rest of the burst; then it
// sends what these left for the store and sets the lines' timer, which
// nothing else would.
func (l *loop) takeOver() {
	if !l.left.ended {
		return
	}
	l.left.ended = false
	if req := l.left.resume; req.Kind() != 0 {
		l.left.resume = actor.Message{}
		if req.Kind() != actor.KindStop { // carryOn noted the stop message: run drains
			l.serveRun([]actor.Message{req}, l.state.Now, supervise.Exited(actor.ErrClockPanic))
		}
	}
	l.answerInflight()
	l.answerLanding() // after the message in flight, which may be one of its trip's
	for len(l.left.rest) > 0 {
		req := l.left.rest[0]
		l.left.rest = l.left.rest[1:] // first: if this one ends the goroutine too, the next goes on after it
		if req.Kind() == actor.KindStop {
			l.stopping = true // run drains the mailbox
			continue
		}
		l.serve(&req, l.state.Now, nil)
	}
	l.left.rest = nil
	l.flush()
	if len(l.lines.due) > 0 {
		l.arm(l.state.Now)
	}
}

// answerInflight answers the message in flight, if it was not answered,
// with the error the goroutine left: a batch gives back what it was
// granted, a waiter leaves its line, and the lines of the keys a function
// run by Do changed are asked again.
func (l *loop) answerInflight() {
	f := l.inflight
	if f.on {
		mark := len(l.chores)
		switch f.msg.Kind() {
		case actor.KindBatch, actor.KindTry:
			l.giveBack(l.state.Now)
		case actor.KindWait:
			l.dropWaiter(&f.msg, l.state.Now) // if it was in line
		case actor.KindDo:
			l.retryChanged(l.state.Now) // what the function changed before it ended
			mark = len(l.chores)        // its lines' asks: nothing of its own to wait for
		}
		l.answerAfter(mark, &f.msg, l.left.answer)
	}
	l.outOfFlight()
	l.left.answer = nil
}

// answerLanding answers, with an error, the requests of the trip whose
// answers were being delivered when the goroutine ended, giving back
// what they were granted, and serves its chores so: a head asked is
// answered with the error, and its line goes on; a grant whose answer
// waited is answered so, and given back.
func (l *loop) answerLanding() {
	tr := l.left.landing
	if tr == nil {
		return
	}
	l.left.landing = nil
	exited := supervise.Exited(actor.ErrAlgorithmPanic)
	requests := len(tr.items) - len(tr.chores) // the requests' items come first
	for i := l.left.landingAt; i < len(tr.run); i++ {
		mark := len(l.chores)
		end := requests
		if i+1 < len(tr.sent) {
			end = tr.sent[i+1]
		}
		for k := tr.sent[i]; k < end; k++ { // its grants go back: the request failed
			if it := &tr.items[k]; it.Kind != storetable.Peek && it.Err == nil && it.D.Allowed {
				l.refund(it.Key, tr.now, it.N, it.By, it.Grant)
			}
		}
		l.answerAfter(mark, &tr.run[i], exited)
	}
	first, from := len(tr.items)-len(tr.chores), l.left.choreAt
	l.left.choreAt = 0
	for k := from; k < len(tr.chores); k++ {
		c, it := &tr.chores[k], &tr.items[first+k]
		mark := len(l.chores)
		switch {
		case c.ask != nil:
			var head *waiter
			if ln := c.ask; l.lines.of(ln.key) == ln && ln.asking && ln.asks == c.no {
				ln.asking = false
				if len(ln.queue) > 0 && ln.queue[0].asked == c.no {
					head = l.pop(ln)
				}
				l.askNext(ln, c.at)
			}
			if mark = len(l.chores); it.Err == nil && it.D.Allowed { // after the next's ask
				l.refund(c.item.Key, c.at, c.item.N, it.By, it.Grant)
			}
			if head != nil {
				l.answerAfter(mark, &head.msg, exited)
			}
		case c.w != nil:
			l.refund(c.item.Key, c.at, c.w.msg.N(), c.by, c.grant)
			if !l.quotaWaiterLeft(c.w) {
				l.answerAfter(mark, &c.w.msg, exited)
			}
		case c.err != nil: // its give-backs landed, unless the goroutine ended on them
			l.answerAfter(mark, &c.req, c.err)
		case c.req.Kind() != 0:
			switch {
			case c.req.Kind() == actor.KindAllow && c.d.Allowed:
				l.refund(c.req.Key(), c.at, c.req.N(), c.by, c.grant)
			case c.req.Kind() == actor.KindTry:
				for i := range c.items {
					if it := &c.items[i]; it.D.Allowed {
						l.refund(it.Key, c.at, it.N, it.By, it.Grant)
					}
				}
			}
			l.answerAfter(mark, &c.req, exited)
		}
	}
	l.trips.put(tr)
}
