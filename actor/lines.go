package actor

import (
	"container/heap"
	"slices"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// The loop's side of the lines of waiters (waiting.go says how waiting
// works): joining, serving the heads due, leaving, and a batch's items on
// keys with a line.

// wait serves a WaitN request at now: it is granted at once if its key
// has no line and the rule allows it with no Delay; otherwise it joins
// the key's line (queued), unless the line is full or ctx's deadline
// comes first.
func (l *loop) wait(req Message, now time.Duration) (r reply, queued bool) {
	ln := l.waits.lineOf(req.key)
	if ln == nil {
		if r.err = l.keys.turn(req.key, now, req.n, &l.d); r.err != nil {
			return r, false
		}
		granted, giveBack, _ := Turn(&l.d)
		if granted {
			r.d = l.d
			return r, false
		}
		if giveBack { // leaky_bucket: its turn is to come
			l.keys.giveBack(req.key, now, req.n)
		}
	}
	budget := req.Budget()
	if ln != nil || budget >= 0 {
		// Errors as AllowN's (an n above the capacity) come first, as at
		// every entry point; then the cap on the line, and the wait in
		// line, for the deadline.
		d, err := l.peek(req.key, req.n, now)
		if r.err = err; r.err != nil {
			return r, false
		}
		if r.err = l.waits.full(ln); r.err != nil {
			return r, false
		}
		if d, r.err = l.lineWait(req.key, req.n, now, ln, &d); r.err != nil {
			return r, false
		}
		if budget >= 0 && d.RetryAfter > budget {
			r.d, r.err = d, &tooLate{wait: d.RetryAfter, budget: budget}
			return r, false
		}
	}
	if ln == nil {
		ln = l.waits.open(req.key, now+1) // asked again when the timer is set (arm), which needs its wait
		l.keys.pin(req.key)
		l.schedule(ln, now, &l.d)
	}
	ln.queue = append(ln.queue, waiter{reply: req.reply, ticket: req.ticket(), n: req.n, quota: req.Quota()})
	l.state.Waiting++
	return reply{}, true
}

// inLine returns the decision for a request of n units on key that does
// not join its line, ln (nil: none): a denial, with the wait it would have
// in line (RetryAfter) and the time until the key is untouched once the
// line has been granted (ResetAfter). Remaining is 0 if the key has a
// line, since what it has left is the line's; with none, it is what the
// key has left now, as a denial by AllowN would say (the units are there
// for a smaller request). Its errors are AllowN's.
func (l *loop) inLine(key string, n int, now time.Duration, ln *line) (algorithms.Decision, error) {
	d, err := l.peek(key, n, now)
	if err != nil {
		return algorithms.Decision{}, err
	}
	return l.lineWait(key, n, now, ln, &d)
}

// lineWait is inLine once the table has peeked d, what AllowN would
// answer now for the request alone.
func (l *loop) lineWait(key string, n int, now time.Duration, ln *line, d *algorithms.Decision) (algorithms.Decision, error) {
	ns := l.waits.ns[:0]
	if ln != nil {
		for _, w := range ln.queue {
			ns = append(ns, w.n)
		}
	}
	ns = append(ns, n)
	l.waits.ns = ns
	from := now
	if ln != nil {
		from = min(from, ln.at) // a line late to be served is served on its schedule
	}
	at, free, ok, err := l.keys.aheadOf(key, from, ns)
	if err != nil {
		if ln != nil {
			l.waits.reschedule(ln, now) // the rule dropped the key: the head may be granted now
		}
		return algorithms.Decision{}, err
	}
	if !ok { // the rule cannot tell: the head's wait is the least of it
		at, free = now+1, after(now, d.ResetAfter)
		if ln != nil {
			at = max(at, ln.at)
		}
	}
	remaining := 0
	if ln == nil {
		remaining = d.Remaining
		if d.Allowed { // leaky_bucket: n fits, but its turn is to come; nothing is taken
			remaining += n
		}
	}
	return algorithms.Decision{
		Limit:      d.Limit,
		Remaining:  remaining,
		RetryAfter: max(at-now, 1),
		ResetAfter: max(free-now, 0),
		Policy:     d.Policy,
	}, nil
}

// leave serves a leave message: the waiter whose reply channel it carries
// leaves its key's line, and is answered errLeft. If it was the head, the
// next is asked at once. A waiter already answered is not in the line,
// and its channel is full: serve passed the message by.
func (l *loop) leave(req Message, now time.Duration) {
	ln := l.waits.lineOf(req.key)
	if ln == nil {
		return
	}
	k := slices.IndexFunc(ln.queue, func(w waiter) bool { return w.reply == req.reply })
	if k < 0 {
		return
	}
	ln.queue = slices.Delete(ln.queue, k, k+1)
	l.state.Waiting--
	req.reply <- reply{err: errLeft}
	ring(req.ticket())
	switch {
	case len(ln.queue) == 0:
		l.closeLine(ln)
	case k == 0:
		l.waits.reschedule(ln, min(ln.at, now)) // the next may be granted now: served after the burst
	}
}

// serveDue serves the lines due at now.
func (l *loop) serveDue(now time.Duration) {
	for l.waits.dueBy(now) {
		l.serveLine(l.waits.due[0], now)
	}
}

// serveLine serves ln, due at now or before: it asks the rule about its
// head at the instant the line is due, and answers it if it is granted
// (or fails), then the next at the same instant, until one must wait; if
// that wait has passed by now too, it goes on from there. A line left
// empty is closed.
func (l *loop) serveLine(ln *line, now time.Duration) {
	for len(ln.queue) > 0 {
		w, at := ln.queue[0], ln.at
		l.inFlight(waiterFlight(w)) // if the rule ends the goroutine, takeOver answers it
		err := l.keys.turn(ln.key, at, w.n, &l.d)
		l.outOfFlight()
		granted, giveBack, _ := Turn(&l.d)
		switch {
		case err != nil:
			l.answer(ln, at, reply{err: err})
		case granted:
			l.answer(ln, at, reply{d: l.d})
		default:
			if giveBack {
				l.keys.giveBack(ln.key, at, w.n)
			}
			l.schedule(ln, at, &l.d)
			if !passed(ln.at, now) {
				return
			}
		}
	}
	l.closeLine(ln)
}

// closeLine closes ln, which is empty.
func (l *loop) closeLine(ln *line) {
	l.waits.close(ln)
	l.keys.unpin(ln.key)
}

// schedule sets ln due when its head, decided d at now (a denial, or a
// grant with a Delay, given back), is to be asked again.
func (l *loop) schedule(ln *line, now time.Duration, d *algorithms.Decision) {
	_, _, wait := Turn(d)
	l.waits.reschedule(ln, after(now, max(wait, 1)))
}

// answer takes ln's head out of the line and sends it r, counted; a
// grant decided at at comes with the key's quota then, if the waiter asked
// for it.
func (l *loop) answer(ln *line, at time.Duration, r reply) {
	w := ln.queue[0]
	ln.queue[0] = waiter{}
	ln.queue = ln.queue[1:]
	l.state.Waiting--
	if w.quota != nil && r.err == nil {
		l.inFlight(waiterFlight(w)) // if the rule ends the goroutine, takeOver answers it
		l.fillQuota(ln.key, at, &r.d, w.quota)
		l.outOfFlight()
	}
	w.reply <- r // never blocks: a waiter's channel gets one answer
	ring(w.ticket)
	l.state.Counts.note(&r.d, r.err)
}

// closeLines answers every waiter with err, oldest first in each line,
// and stops the timer.
func (l *loop) closeLines(err error) {
	for len(l.waits.due) > 0 {
		ln := l.waits.due[0]
		for len(ln.queue) > 0 {
			l.answer(ln, 0, reply{err: err})
		}
		l.closeLine(ln)
	}
	l.stopTimer()
}

// dropWaiter takes the waiter whose reply channel is ch out of its line,
// if it is in one, and sets that line due at now: its next waiter may be
// granted.
func (l *loop) dropWaiter(ch chan reply, now time.Duration) {
	for _, ln := range l.waits.due {
		if k := slices.IndexFunc(ln.queue, func(w waiter) bool { return w.reply == ch }); k >= 0 {
			ln.queue = slices.Delete(ln.queue, k, k+1)
			l.state.Waiting--
			if len(ln.queue) == 0 {
				l.closeLine(ln)
			} else {
				l.waits.reschedule(ln, now)
			}
			return
		}
	}
}

// retryChanged sets due at now the lines of the keys whose policies the
// table says changed (Changed), and no other: what decides their heads may
// have changed, while a line whose key did not change stands as it was
// decided. So a function run by Do costs the same whatever the number of
// callers waiting.
func (l *loop) retryChanged(now time.Duration) {
	all, keys := l.keys.changed()
	switch {
	case all:
		for _, ln := range l.waits.due {
			ln.at = now
		}
		heap.Init(&l.waits.due)
	case len(l.waits.lines) > 0:
		for _, key := range keys {
			if ln := l.waits.lines[key]; ln != nil {
				l.waits.reschedule(ln, now)
			}
		}
	}
}

// inLineEach decides, as inLine, the items of a batch whose key has a
// line, and marks them for the table to pass by. Items of WaitN requests
// that must not wait (tries) fail as WaitN would on a full line, once
// inLine's errors have had their turn.
func (l *loop) inLineEach(items []Item, now time.Duration, tries bool) {
	for k := range items {
		it := &items[k]
		if ln := l.waits.lineOf(it.Key); ln != nil {
			if tries {
				l.tryInLine(it, now, ln)
			} else {
				it.D, it.Err = l.inLine(it.Key, it.N, now, ln)
				if it.Err == nil && l.keys.hasDryRun(it.Key) {
					l.dryInLine(it.Key, it.N, now, true, &it.D)
				}
			}
			it.Skip = true
		}
	}
}

// dryInLine has key's dry-run policies decide a request of n units that
// its line refused (no barging), taking if take, and sets d's WouldDeny:
// they decide every request. If their rule panics, the table has dropped
// the key, and the refusal stands.
func (l *loop) dryInLine(key string, n int, now time.Duration, take bool, d *algorithms.Decision) {
	if wouldDeny, err := l.keys.decideDry(key, now, n, take); err == nil {
		d.WouldDeny = wouldDeny
	}
}

// tryInLine decides it, a try on a key whose line is ln, as WaitN would
// refuse to wait: inLine's denial, or inLine's error, or then a full
// line's.
func (l *loop) tryInLine(it *Item, now time.Duration, ln *line) {
	it.D, it.Err = l.inLine(it.Key, it.N, now, ln)
	if it.Err == nil {
		if it.Err = l.waits.full(ln); it.Err != nil {
			it.D = algorithms.Decision{}
		}
	}
}

// tryEach serves a batch of WaitN requests that must not wait, in order:
// each is granted as wait would grant it at once, or left not Allowed,
// with no error (or WaitN's, a full line's included), having taken
// nothing. (A grant that cannot
// be delivered is given back as a batch's is: giveBack.)
func (l *loop) tryEach(items []Item, now time.Duration) {
	for k := range items {
		it := &items[k]
		if ln := l.waits.lineOf(it.Key); ln != nil {
			l.tryInLine(it, now, ln) // it would join the line
			continue
		}
		if it.Err = l.keys.turn(it.Key, now, it.N, &it.D); it.Err != nil {
			continue
		}
		if _, giveBack, _ := Turn(&it.D); giveBack {
			it.D.Allowed = false // first: if the give-back ends the goroutine, giveBack passes it by
			l.keys.giveBack(it.Key, now, it.N)
		}
	}
}
