package storeloop

import (
	"math"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

// A line's head: asked in a trip when its line is due (a chore), and
// answered when the store's decision lands: granted, refused for its
// deadline, or set due again when its turn may come.

// serveDue asks the heads of the lines due by now.
func (l *loop) serveDue(now time.Duration) {
	for l.lines.dueBy(now) {
		l.ask(l.lines.due[0])
	}
}

// ask sends ln's head out to the store, as a chore, at the instant ln is
// due. ln is due no more until the answer lands (heardHead).
func (l *loop) ask(ln *line) {
	w := ln.queue[0]
	at := ln.at
	l.lines.reschedule(ln, math.MaxInt64)
	ln.asks++
	ln.asking, ln.asked, ln.again = true, at, math.MaxInt64
	w.asked = ln.asks
	l.chores = append(l.chores, chore{at: at, item: storetable.Item{Key: ln.key, N: w.msg.N(), Kind: storetable.Turn}, ask: ln, no: ln.asks})
}

// heardHead serves the decision it of the head of the line c asked. The
// line is set right (due, or waiting) before any rule is called (a
// give-back to the local keys): if the rule ends the goroutine, the next
// finds it so.
func (l *loop) heardHead(c *chore, it *storetable.Item) {
	ln, at := c.ask, c.at
	granted := it.Err == nil && it.D.Allowed
	if l.lines.of(ln.key) != ln || !ln.asking || ln.asks != c.no { // closed while its head was out: its waiters left
		if granted {
			l.refund(ln.key, at, c.item.N, it.By, it.Grant)
		}
		return
	}
	ln.asking = false
	again := ln.again
	if len(ln.queue) == 0 || ln.queue[0].asked != c.no { // the head left while it was out
		l.lines.reschedule(ln, at) // the next, at the same instant
		if granted {
			l.refund(ln.key, at, c.item.N, it.By, it.Grant)
		}
		return
	}
	turn, giveBack, wait := actor.Turn(&it.D)
	w := ln.queue[0]
	budget := w.budget
	w.budget = -1 // checked once
	switch {
	case it.Err != nil:
		l.answer(ln, at, algorithms.Decision{}, it.Err)
		l.askNext(ln, at)
	case turn:
		l.grant(ln, at, it)
	default:
		ln.seen = it.D
		if budget >= 0 && wait > budget { // the first waiter's deadline comes first
			l.tooLate(ln, at, it.D, wait, budget)
			l.askNext(ln, at)
		} else {
			l.lines.reschedule(ln, after(at, max(wait, 1)))
			if again < ln.at { // it was set due while out: what decided it may have changed
				l.lines.reschedule(ln, max(again, at))
			}
			l.unpark(ln) // it waits: what came behind its head is served
		}
		if giveBack { // leaky_bucket: its turn is to come
			l.refund(ln.key, at, c.item.N, it.By, it.Grant)
		}
	}
}

// askNext has ln's next waiter asked at at, the instant its head was
// answered, or closes ln if nobody is left.
func (l *loop) askNext(ln *line, at time.Duration) {
	if len(ln.queue) == 0 {
		l.closeLine(ln)
		return
	}
	l.lines.reschedule(ln, at)
}

// pop takes ln's head out of it.
func (l *loop) pop(ln *line) *waiter {
	w := ln.queue[0]
	ln.queue[0] = nil
	ln.queue = ln.queue[1:]
	l.state.Waiting--
	return w
}

// answer answers ln's head with d, err, decided at at, and counts it.
func (l *loop) answer(ln *line, at time.Duration, d algorithms.Decision, err error) {
	w := l.pop(ln)
	if q := w.msg.Quota(); q != nil && err == nil {
		l.fillQuota(ln.key, at, &d, q, -1)
	}
	l.deliverWaiter(w, d, err)
}

// deliverWaiter answers w, which is always delivered (a waiter's caller
// leaves with a leave message, not by marking its channel), and counts it.
func (l *loop) deliverWaiter(w *waiter, d algorithms.Decision, err error) {
	l.state.Answer(&w.msg, d, err)
}

// tooLate answers ln's head that its wait, decided d at at, passes its
// deadline, budget: a denial, counted as one, as a WaitN's at once is.
func (l *loop) tooLate(ln *line, at time.Duration, d algorithms.Decision, wait, budget time.Duration) {
	w := l.pop(ln)
	d.Allowed, d.Delay, d.RetryAfter = false, 0, wait
	if q := w.msg.Quota(); q != nil {
		l.fillQuota(ln.key, at, &d, q, -1) // a denial's: nothing to ask the store
	}
	l.deliverWaiter(w, d, actor.TooLate(wait, budget))
}

// grant answers ln's head, granted it at at; if it asked for its key's
// quota, the answer waits for a peek of one more unit (a chore).
func (l *loop) grant(ln *line, at time.Duration, it *storetable.Item) {
	if ln.queue[0].msg.Quota() == nil {
		l.answer(ln, at, it.D, nil)
	} else {
		w := l.pop(ln)
		l.quotaWaits = append(l.quotaWaits, w)
		l.chores = append(l.chores, quotaChore(ln.key, at, it, chore{w: w, d: it.D}))
	}
	l.askNext(ln, at)
}
