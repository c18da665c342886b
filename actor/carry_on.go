package actor

import (
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// When code the partition calls but does not own (a rule, through the
// table, or the clock) runs runtime.Goexit, as t.FailNow does in a test,
// the goroutine ends: no recover can stop it. So that every call still
// returns, run's deferred carryOn notes what the goroutine leaves undone
// and starts another goroutine in its place, whose takeOver finishes it
// before serving the mailbox on. carryOn itself calls no code it does not
// own, since the goroutine is ending; takeOver may, and if that code ends
// its goroutine too, the next goroutine goes on from where it stopped.

// unfinished is what a goroutine that ended leaves undone, for the next.
type unfinished struct {
	first  Message // the first request of a burst, until the clock's reading for it
	resume Message // that request, if the clock ended the goroutine: to serve on the reading before
	next   Message // a request taken from the mailbox while the lines due are served before it (serve): to serve after them
	answer error   // the error for the request in flight, if the goroutine ended while serving it
}

// carryOn, deferred by run, notes what the ending goroutine leaves undone
// and starts a goroutine to carry on.
func (p *Partition) carryOn() {
	l := p.loop
	switch l.state.calling {
	case callingTick: // the request is not served yet: serve it as if the clock had panicked
		l.state.Counts.ClockPanics++
		l.unfinished.resume = l.unfinished.first
		l.stopping = l.stopping || l.unfinished.first.kind == KindStop
	case callingClock:
		l.state.Counts.ClockPanics++
		l.unfinished.answer = supervise.Exited(ErrClockPanic)
	default:
		l.keys.abandoned() // the key the rule was on, if any, as for a panic
		l.unfinished.answer = supervise.Exited(ErrAlgorithmPanic)
	}
	l.state.calling = callingNone
	l.unfinished.first = Message{}
	go p.run()
}

// takeOver finishes what the goroutine before this one left undone: it
// serves the request whose reading of the clock ended it, on the reading before
// (so a request that needs the time fails, and one that needs none goes
// on, as when the clock panics), answers the request it was serving with
// an error, having given back what a batch was granted, then serves what
// it had taken from the mailbox and not served, in order, and sets the
// timer for the lines, which nothing else would wake. Each step is done
// in turn, none deferred: if code the partition does not own ends this
// goroutine too, the next goes on from the step it was on, and nothing
// runs while a goroutine is ending.
func (p *Partition) takeOver() {
	l := p.loop
	if req := l.unfinished.resume; req.kind != 0 {
		l.unfinished.resume = Message{}
		if req.kind != KindStop { // carryOn noted the stop message: run drains
			l.serve(&req, l.state.Now, supervise.Exited(ErrClockPanic))
		}
	}
	l.answerInflight()
	l.serveNext() // after the waiter in flight, whose line was served before it
	if len(l.waits.due) > 0 {
		l.arm(l.state.Now) // a line may be due, or opened just now: nothing else would wake it
	}
}

// answerInflight answers the request the goroutine that ended was
// serving, if it was not answered, with the error it left: a batch gives
// back what it was granted, a waiter leaves its line, and the lines of the
// keys a function run by Do changed are decided again.
func (l *loop) answerInflight() {
	if l.inflight.reply == nil { // answered, or none
		l.unfinished.answer = nil
		return
	}
	if l.inflight.kind == KindBatch || l.inflight.kind == KindTry {
		l.giveBack(l.state.Now)
	}
	if l.inflight.kind == KindWait {
		l.dropWaiter(l.inflight.reply, l.state.Now) // if it was in line
	}
	if l.inflight.kind == KindDo {
		l.retryChanged(l.state.Now) // what the function changed before it ended
	}
	select {
	case l.inflight.reply <- reply{err: l.unfinished.answer}:
		ring(l.inflight.ticket)
	default: // the caller gave up
	}
	l.inflight = inflight{}
	l.unfinished.answer = nil
}

// serveNext serves the request that the lines due were being served
// before when the goroutine ended, as serve would have.
func (l *loop) serveNext() {
	if req := l.unfinished.next; req.kind != 0 {
		l.unfinished.next = Message{} // first: if it ends the goroutine too, it is served no more
		l.serve(&req, l.state.Now, nil)
	}
}
