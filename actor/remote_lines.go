package actor

import (
	"math"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// Lines and the rest of a remote table's work, off the partition's
// goroutine. A remote table is never asked at once: what the lines need
// of it (their heads' decisions), the grants given back, and the quota a
// granted request asks for (its key's wait for one more unit) are chores,
// gathered while the partition serves and sent at the end of its turn
// (flush) as trips, which land as the callers' do. Meanwhile the partition
// goes on serving the other keys.
//
// A line whose head is out (asking) is its key's: a request on that key
// that does not join the line (AllowN, PeekN, Reset, a batch or a try
// with an item on it) is parked behind it, and served once the line
// waits again or is closed, so that what is due is still served before
// anything after it (property 7). A waiter joins the line as it would in
// memory; the first waiter of a key opens its line, and its deadline is
// checked when its head's first decision lands.

// chore is a remote table's work that is not a request from the mailbox:
// its item, decided at at, and what to do with the answer.
type chore struct {
	at   time.Duration
	item Item

	ask *line  // the line whose head this asks, if it does
	no  uint64 // which of its asks this is

	// A grant whose answer waits for its key's quota (the item is a peek
	// of one more unit than it left): the request, or the waiter, and
	// its answer; or a try whose answer waits for its refunds (the last).
	req    request
	w      waiter
	r      reply
	by     From
	grant  uint64 // with by: the store's name of the state its grant was taken from (Item.Grant)
	waiter bool
}

// flush asks the heads of the lines due, serves the requests unparked,
// and, while there is room for a trip, sends the chores, in trips of one
// instant each, and the requests gathered while there was none, taking
// turns when both wait, so that neither holds the other up under load;
// what is left waits for a trip to land (the partition's loop flushes
// after each). It reports whether it did anything, or left anything to
// send.
func (l *loop) flush() (worked bool) {
	if l.remote == nil {
		return false
	}
	for {
		gathered := len(l.trips.gathered) > 0
		switch {
		case l.waits.dueBy(l.state.Now):
			l.serveDue(l.state.Now) // their heads, as chores
		case len(l.unparked) > 0:
			run := l.unparked
			l.unparked = nil
			l.serveRun(run, l.state.Now, nil)
		case len(l.chores) == 0 && !gathered:
			return worked
		case !l.trips.room():
			return true // no room: sent when a trip lands
		case len(l.chores) > 0 && !(gathered && l.trips.gatheredNext):
			l.trips.gatheredNext = true
			l.send(l.choresOf(l.chores[0].at))
		default:
			l.trips.gatheredNext = false
			l.serveRun(l.trips.takeGathered(), l.state.Now, nil)
		}
		worked = true
	}
}

// choresOf takes the chores of the instant at, in their order, into a
// trip.
func (l *loop) choresOf(at time.Duration) *trip {
	tr := l.trips.get()
	tr.now = at
	rest := l.chores[:0]
	for _, c := range l.chores {
		if c.at != at {
			rest = append(rest, c)
			continue
		}
		tr.chores = append(tr.chores, c)
		tr.items = append(tr.items, c.item)
	}
	clear(l.chores[len(rest):])
	l.chores = rest
	return tr
}

// ask sends ln's head out to the table, as a chore, at the instant ln is
// due. ln is due no more until the answer lands (heard).
func (l *loop) ask(ln *line) {
	w := ln.queue[0]
	at := ln.at
	l.waits.reschedule(ln, math.MaxInt64)
	ln.asks++
	ln.asking, ln.asked, ln.again = true, at, math.MaxInt64
	ln.queue[0].asked = ln.asks
	l.chores = append(l.chores, chore{at: at, item: Item{Key: ln.key, N: w.n, Op: OpTurn}, ask: ln, no: ln.asks})
}

// heard serves the answer to c, a chore, decided at c.at.
func (l *loop) heard(c *chore, it *Item) {
	switch {
	case c.ask != nil:
		l.heardHead(c, it)
	case c.item.Op == OpPeek: // a grant's quota
		more := time.Duration(0)
		if it.Err == nil && !it.D.Allowed {
			more = it.D.RetryAfter
		}
		if c.waiter {
			if l.waiterLeft(c) {
				l.refund(c.item.Key, c.at, c.w.n, c.by, c.grant)
				return
			}
			l.fillQuotaMore(c.item.Key, c.at, &c.r.d, c.w.quota, more)
			c.w.reply <- c.r // never blocks: a waiter's channel gets one answer
			ring(c.w.ticket)
			l.state.Counts.note(&c.r.d, c.r.err)
			return
		}
		f := flightOf(&c.req)
		f.by, f.grant = c.by, c.grant
		l.inFlight(f)
		l.fillQuotaMore(c.req.key, c.at, &c.r.d, c.req.quota(), more)
		l.deliver(&c.req, c.at, &c.r)
		l.outOfFlight()
	case c.req.reply != nil: // a try whose answer waited for its refunds
		l.inFlight(flightOf(&c.req))
		l.deliver(&c.req, c.at, &reply{})
		l.outOfFlight()
	}
	// A refund's answer is nothing to deliver; its failure is counted.
}

// heardHead serves the decision it of the head of the line c asked. The
// line is set right (due, or waiting) before any rule is called (a refund
// to the local keys): if the rule ends the goroutine, the next finds it
// so.
func (l *loop) heardHead(c *chore, it *Item) {
	ln, at := c.ask, c.at
	granted := it.Err == nil && it.D.Allowed
	if l.waits.lineOf(ln.key) != ln || !ln.asking || ln.asks != c.no { // closed while its head was out: its waiters left
		if granted {
			l.refund(ln.key, at, c.item.N, it.By, it.Grant)
		}
		return
	}
	ln.asking = false
	again := ln.again
	if len(ln.queue) == 0 || ln.queue[0].asked != c.no { // the head left while it was out
		l.waits.reschedule(ln, at) // the next, at the same instant
		if granted {
			l.refund(ln.key, at, c.item.N, it.By, it.Grant)
		}
		return
	}
	turn, giveBack, wait := Turn(&it.D)
	w := &ln.queue[0]
	budget := w.budget
	w.budget = -1 // checked once
	switch {
	case it.Err != nil:
		l.answer(ln, at, reply{err: it.Err})
		l.askNext(ln, at)
	case turn:
		l.grant(ln, at, it)
	default:
		ln.seen = it.D
		if budget >= 0 && wait > budget { // the first waiter's deadline comes first
			l.tooLate(ln, at, it.D, wait, budget)
			l.askNext(ln, at)
		} else {
			l.schedule(ln, at, &it.D)
			if again < ln.at { // it was set due while out: what decided it may have changed
				l.waits.reschedule(ln, max(again, at))
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
	l.waits.reschedule(ln, at)
}

// tooLate answers ln's head that its wait, decided d at at, passes its
// deadline, budget: a denial, counted as one, as WaitN's at once is.
func (l *loop) tooLate(ln *line, at time.Duration, d algorithms.Decision, wait, budget time.Duration) {
	w := ln.queue[0]
	ln.queue[0] = waiter{}
	ln.queue = ln.queue[1:]
	l.state.Waiting--
	d.Allowed, d.Delay, d.RetryAfter = false, 0, wait
	if w.quota != nil {
		l.fillQuota(ln.key, at, &d, w.quota) // a denial's: nothing to ask the table
	}
	w.reply <- reply{d: d, err: &tooLate{wait: wait, budget: budget}} // never blocks
	ring(w.ticket)
	l.state.Counts.Denied++
}

// grant answers ln's head, granted it at at; if it asked for its key's
// quota, the answer waits for a peek of one more unit (a chore).
func (l *loop) grant(ln *line, at time.Duration, it *Item) {
	w := ln.queue[0]
	if w.quota == nil {
		l.answer(ln, at, reply{d: it.D})
	} else {
		ln.queue[0] = waiter{}
		ln.queue = ln.queue[1:]
		l.state.Waiting--
		if l.quotaWaits == nil {
			l.quotaWaits = make(map[chan reply]bool)
		}
		l.quotaWaits[w.reply] = false
		l.chores = append(l.chores, l.quotaChore(ln.key, at, it, chore{w: w, waiter: true, r: reply{d: it.D}}))
	}
	l.askNext(ln, at)
}

// quotaChore returns c, for a grant it on key at at, as the peek of one
// more unit than the grant left.
func (l *loop) quotaChore(key string, at time.Duration, it *Item, c chore) chore {
	c.at, c.by, c.grant = at, it.By, it.Grant
	c.item = Item{Key: key, N: it.D.Remaining + 1, Op: OpPeek}
	if it.D.Remaining == math.MaxInt {
		c.item.N = math.MaxInt // above any capacity: the peek fails, and the wait is 0
	}
	return c
}

// unpark moves the requests parked behind ln to be served next.
func (l *loop) unpark(ln *line) {
	if len(ln.parked) == 0 {
		return
	}
	l.unparked = append(l.unparked, ln.parked...)
	clear(ln.parked)
	ln.parked = ln.parked[:0]
}

// parks reports whether req, a request for a remote table, must wait
// behind a line whose head is out, and if so parks it there.
func (l *loop) parks(req request) bool {
	if len(l.waits.lines) == 0 {
		return false
	}
	var ln *line
	switch req.op {
	case opAllow, opPeek, opReset, opRefund:
		ln = l.waits.lineOf(req.key)
	case opBatch, opTry:
		for i := range *req.batch() {
			if ln = l.waits.lineOf((*req.batch())[i].Key); ln != nil && ln.asking {
				break
			}
		}
	}
	if ln == nil || !ln.asking {
		return false
	}
	ln.parked = append(ln.parked, req)
	return true
}

// waitRemote is wait for a remote table: the request joins its key's
// line, opening it if there is none, to be decided when its turn comes.
// Its errors come first, in the order of every entry point: an n above
// the capacity, a full line, then a deadline that the wait in line
// passes (for the first waiter, once its first decision lands).
func (l *loop) waitRemote(req request, now time.Duration) (r reply, queued bool) {
	if _, r.err = l.remote.Hint(req.key, req.n); r.err != nil {
		return r, false
	}
	ln := l.waits.lineOf(req.key)
	budget := req.budget()
	if ln != nil {
		if r.err = l.waits.full(ln); r.err != nil {
			return r, false
		}
		if budget >= 0 {
			d, err := l.inRemoteLine(req.key, req.n, now, ln)
			if err != nil {
				return reply{err: err}, false
			}
			if d.RetryAfter > budget {
				return reply{d: d, err: &tooLate{wait: d.RetryAfter, budget: budget}}, false
			}
		}
		budget = -1
	} else {
		ln = l.waits.open(req.key, now) // due: its head is asked at the end of the turn
		l.keys.pin(req.key)
	}
	ln.queue = append(ln.queue, waiter{reply: req.reply, ticket: req.ticket(), n: req.n, quota: req.quota(), budget: budget})
	l.state.Waiting++
	return reply{}, true
}

// inRemoteLine is inLine for a remote table, which cannot be asked at
// once: the wait is the line's, and Limit and Policy are its head's
// latest denial's, or the key's tightest policy's before any.
func (l *loop) inRemoteLine(key string, n int, now time.Duration, ln *line) (algorithms.Decision, error) {
	d, err := l.remote.Hint(key, n)
	if err != nil {
		return algorithms.Decision{}, err
	}
	if ln.seen.Policy != "" {
		d.Limit, d.Policy, d.ResetAfter = ln.seen.Limit, ln.seen.Policy, ln.seen.ResetAfter
	}
	return l.lineWait(key, n, now, ln, &d)
}

// landChores serves the answers to tr's chores, whose items follow those
// of its requests from first on.
func (l *loop) landChores(tr *trip, first int) {
	for k := range tr.chores {
		l.choreAt = k + 1 // first: if this one ends the goroutine, takeOver answers the rest (answerLanding)
		l.heard(&tr.chores[k], &tr.items[first+k])
	}
	l.choreAt = 0
}

// leftBeforeItsQuota answers a leave message from a waiter granted whose
// answer waits for its quota's peek, if req is one: the caller gets
// errLeft at once, and the grant goes back when the peek lands
// (waiterLeft). It reports whether req was one.
func (l *loop) leftBeforeItsQuota(req request) bool {
	left, ok := l.quotaWaits[req.reply]
	if !ok || left {
		return false
	}
	l.quotaWaits[req.reply] = true
	req.reply <- reply{err: errLeft} // never blocks: its grant is not sent now
	ring(req.ticket())
	return true
}

// waiterLeft lets c, the quota's peek of a waiter's grant, go, and
// reports whether its caller left meanwhile: then nobody is to be
// answered, and the grant is to be given back.
func (l *loop) waiterLeft(c *chore) bool {
	left := l.quotaWaits[c.w.reply]
	delete(l.quotaWaits, c.w.reply)
	return left
}
