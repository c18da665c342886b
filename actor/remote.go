package actor

import (
	"context"
	"math"
	"time"

	"github.com/chanlimit/chanlimit/internal/supervise"
)

// A remote table (Remote) keeps its keys' states elsewhere, in a
// store across the network, so each decision is a round trip. The
// partition serves a burst of messages as one: the requests it can hand
// the table together (an AllowN or a PeekN on a key nobody waits on, a
// Reset, a batch's items) go as one round trip, in runs between the other
// messages, which are served one by one, in their order, as they are for
// a table in memory. A request whose caller left before its run was
// handed over is not sent.
//
// A round trip (a trip) goes out on a goroutine that does nothing but
// wait for the store, and comes back to the partition, which delivers the
// answers (trips.go keeps the trips, their goroutines and what waits for
// room). Meanwhile the partition goes on serving its mailbox, with up to
// maxTrips trips out. Under a
// light load each request goes out at once. Once maxTrips are out, the
// requests for trips that come are gathered, up to a mailbox's worth
// (the others, a waiter leaving, Stats, are served meanwhile; past that
// the mailbox waits, full, as callers do), and go out together, in one
// trip, when one lands, taking turns with the partition's own work for
// the lines (chores): under a heavy load each trip decides many
// requests. Everything of the table's
// (its Prepare and Finish, the answers, the counts) stays on the
// partition's goroutine. A partition that stops waits for its trips to
// land, and sends what it gathered, before it answers what is left.
//
// Requests sent one after the other on a key by one caller are decided in
// that order, since each waits for its answer; requests that are out at
// once on one key are concurrent, and the store decides them in either
// order, as a partition in memory decides concurrent requests in the order
// they reach its mailbox.

// serveRemote serves req and the queued requests behind it, in order, at
// now (while no trip has room, only as many as may be gathered), and
// returns as serveBurst does. The requests behind the stop
// message, taken out of the mailbox with the burst, are served before it
// returns.
func (p *Partition) serveRemote(req request, queued int, now time.Duration, clockErr error) (served int, stop bool) {
	l := p.loop
	if !l.trips.room() { // what it takes may be gathered: req, and no more than there is room for
		queued = min(queued, max(l.trips.gatherRoom(cap(p.mailbox))-1, 0))
	}
	burst := append(l.burst[:0], req)
	for ; queued > 0; queued-- {
		burst = append(burst, <-p.mailbox) // there: only this goroutine receives
	}
	l.burst = burst
	served, stop = l.serveRun(burst, now, clockErr)
	clear(burst) // no reference to a caller's channel or batch is kept
	return served, stop
}

// serveRun serves the requests of burst, in order, at now: in runs handed
// to the remote table together, and one by one between them.
func (l *loop) serveRun(burst []request, now time.Duration, clockErr error) (served int, stop bool) {
	start := 0 // the run to hand over at once starts here
	for i := 0; ; i++ {
		if i < len(burst) && l.joinsTrip(burst[i], clockErr) {
			continue
		}
		l.unfinished.rest = burst[start:] // if the goroutine ends, the next serves them (takeOver)
		served += l.dispatch(burst[start:i], now)
		if i == len(burst) {
			break
		}
		start = i + 1
		l.unfinished.rest = burst[start:]
		if burst[i].op == opStop {
			// First: if a request after it ends the goroutine, the next
			// one is stopping too (run drains).
			stop, l.stopping = true, true
			continue // the requests sent after it are answered, as drain answers them
		}
		served += l.serve(&burst[i], now, clockErr)
	}
	l.unfinished.rest = nil
	return served, stop
}

// joinsTrip reports whether req can go to the remote table in a trip with
// others. If reading the clock failed with clockErr, only a Reset can,
// which needs no time; the others fail with the error (serve).
func (l *loop) joinsTrip(req request, clockErr error) bool {
	if clockErr != nil && req.op != opReset {
		return false
	}
	switch req.op {
	case opAllow, opPeek:
		// In line, inLine answers it; with a dry-run policy, which decides
		// every request, it goes to the store all the same (dispatch).
		return l.waits.lineOf(req.key) == nil || l.keys.hasDryRun(req.key)
	case opBatch, opTry, opReset, opRefund:
		return true
	}
	return false
}

// dispatch sends the requests of run to the remote table as one trip, or
// gathers them if no trip has room, or answers them at once if nothing is
// left to send, and returns how many requests it answered.
func (l *loop) dispatch(run []request, now time.Duration) (served int) {
	if len(run) == 0 {
		return 0
	}
	if !l.trips.room() {
		l.trips.gather(run) // they go out together when a trip lands (flush)
		return 0
	}
	l.serveDue(now) // as serve does: a batch's item on a key whose line is due is decided after the line
	tr := l.trips.get()
	tr.now = now
	for _, req := range run {
		if len(req.reply) > 0 || l.parks(req) { // the caller left: not sent; or it waits behind a line's head
			continue
		}
		tr.run = append(tr.run, req)
		tr.sent = append(tr.sent, len(tr.items))
		switch {
		case (req.op == opAllow || req.op == opPeek) && l.waits.lineOf(req.key) != nil:
			tr.items = append(tr.items, l.dryInTrip(req, now))
		case req.op == opAllow:
			tr.items = append(tr.items, Item{Key: req.key, N: req.n})
		case req.op == opPeek:
			tr.items = append(tr.items, Item{Key: req.key, N: req.n, Op: OpPeek})
		case req.op == opReset:
			tr.items = append(tr.items, Item{Key: req.key, Op: OpReset})
		case req.op == opRefund:
			tr.items = append(tr.items, Item{Key: req.key, N: req.n, Op: OpRefund})
		case req.op == opBatch || req.op == opTry:
			if len(l.waits.lines) > 0 {
				l.inLineEach(*req.batch(), now, req.op == opTry)
			}
			from := len(tr.items)
			tr.items = append(tr.items, *req.batch()...)
			if req.op == opTry {
				for k := from; k < len(tr.items); k++ {
					tr.items[k].Op = OpTurn // granted now, or left to wait: a turn
				}
			}
		}
	}
	if len(tr.items) == 0 {
		l.trips.put(tr)
		return 0
	}
	return l.send(tr)
}

// dryInTrip returns the item of req, an AllowN or a PeekN on a key whose
// line answers it (no barging), for the store's dry-run policies to decide
// beside that answer: a request the line refuses is decided by them all
// the same. An error of the line's answer is the item's, sent nowhere.
func (l *loop) dryInTrip(req request, now time.Duration) Item {
	it := Item{Key: req.key, N: req.n, Op: OpDryRun}
	if req.op == opPeek {
		it.Op = OpDryPeek
	}
	if it.D, it.Err = l.inRemoteLine(req.key, req.n, now, l.waits.lineOf(req.key)); it.Err != nil {
		it.Op, it.Skip = OpAllow, true
	}
	return it
}

// send sends tr, whose items are filled, to the remote table on a
// goroutine of its own, and returns how many requests it answered at once
// (none, unless the table refused every item). It is called only while
// fewer than maxTrips are out (dispatch and flush see to it). A trip ends
// with the latest deadline of its callers, or none if one has none; a
// trip of chores alone has none.
func (l *loop) send(tr *trip) (served int) {
	if tr.out = l.remote.Prepare(tr.items, tr.now); tr.out == nil {
		return l.land(tr) // answered without a trip: every item refused
	}
	deadline := time.Duration(math.MinInt64)
	bounded := len(tr.chores) == 0 // every request sent has a deadline
	for _, req := range tr.run {
		bounded = bounded && req.deadline != 0
		deadline = max(deadline, req.deadline)
	}
	tr.ctx = context.Background()
	var cancel context.CancelFunc = func() {}
	if bounded {
		tr.ctx, cancel = context.WithDeadline(tr.ctx, epoch.Add(deadline))
	}
	tr.cancel = cancel
	l.trips.launch(tr)
	return served
}

// land delivers the answers tr brought back, and returns how many
// requests they answered.
func (l *loop) land(tr *trip) (served int) {
	l.trips.back(tr)
	l.landing, l.landingAt = tr, 0
	if tr.out != nil {
		l.remote.Finish(tr.out, tr.items, tr.now)
	}
	for k, req := range tr.run {
		l.landingAt = k + 1 // first: if this one ends the goroutine, takeOver answers the rest
		at := tr.sent[k]
		f := flightOf(&req)
		if req.op == opAllow || req.op == opPeek {
			f.by, f.grant = tr.items[at].By, tr.items[at].Grant
		}
		l.inFlight(f)
		var r reply
		switch req.op {
		case opAllow, opPeek:
			it := &tr.items[at]
			r.d, r.err = it.D, it.Err
			served++
			if req.quota() != nil && r.err == nil && r.d.Allowed {
				// Its answer waits for its key's wait of one more unit.
				l.chores = append(l.chores, l.quotaChore(req.key, tr.now, it, chore{req: req, r: r}))
				l.outOfFlight()
				continue
			}
			if req.quota() != nil && r.err == nil {
				l.fillQuota(req.key, tr.now, &r.d, req.quota()) // a denial's: nothing to ask the table
			}
		case opReset, opRefund:
			r.err = tr.items[at].Err
			if ln := l.waits.lineOf(req.key); ln != nil {
				l.waits.reschedule(ln, tr.now) // its head may be granted now
			}
			served++
		case opBatch, opTry:
			batch := *req.batch()
			copy(batch, tr.items[at:at+len(batch)])
			served += len(batch)
			if req.op == opTry && l.turnsToCome(batch, tr.now) {
				// Its answer waits for its refunds, so that what its
				// caller asks next finds them made.
				l.chores[len(l.chores)-1].req = req
				l.outOfFlight()
				continue
			}
		}
		l.deliver(&req, tr.now, &r)
		l.outOfFlight()
	}
	l.landChores(tr, len(tr.items)-len(tr.chores))
	l.landing = nil
	l.trips.put(tr)
	return served
}

// turnsToCome gives back, as tryEach does, the grants of a try's items
// that come with a Delay (leaky_bucket's turn is to come: they would
// wait), leaving them not Allowed, and reports whether a refund to the
// store is among them, the last chore. Those on keys with a line were
// answered as in line, and not sent (Skip).
func (l *loop) turnsToCome(items []Item, now time.Duration) (sent bool) {
	for k := range items {
		it := &items[k]
		if it.Skip || it.Err != nil {
			continue
		}
		if _, giveBack, _ := Turn(&it.D); !giveBack {
			continue
		}
		it.D.Allowed = false // first: if the refund ends the goroutine, giveBack passes it by
		l.refund(it.Key, now, it.N, it.By, it.Grant)
		sent = sent || it.By == FromStore
	}
	return sent
}

// landAll waits for every trip out to land, and delivers their answers.
func (l *loop) landAll() {
	for l.trips.out > 0 {
		l.land(<-l.trips.landed)
	}
}

// answerLanding answers, with an error, the requests of the trip whose
// answers were being delivered when the goroutine ended, and lets the
// trip go.
func (l *loop) answerLanding() {
	tr := l.landing
	if tr == nil {
		return
	}
	l.landing = nil
	exited := reply{err: supervise.Exited(ErrAlgorithmPanic)}
	for _, req := range tr.run[l.landingAt:] {
		select {
		case req.reply <- exited:
		default: // the caller gave up
		}
	}
	// Its chores: a head asked is answered with the error, and its line
	// goes on; a grant whose answer waited is answered so, and given back
	// to the store (a grant of the local keys is not: that would call the
	// rule again, while it ends goroutines).
	first, from := len(tr.items)-len(tr.chores), l.choreAt
	l.choreAt = 0
	for k := from; k < len(tr.chores); k++ {
		c, it := &tr.chores[k], &tr.items[first+k]
		switch {
		case c.ask != nil:
			if ln := c.ask; l.waits.lineOf(ln.key) == ln && ln.asking && ln.asks == c.no {
				ln.asking = false
				if len(ln.queue) > 0 && ln.queue[0].asked == c.no {
					l.answer(ln, c.at, exited)
				}
				l.askNext(ln, c.at)
			}
			if it.Err == nil && it.D.Allowed && it.By == FromStore {
				l.refund(c.item.Key, c.at, c.item.N, it.By, it.Grant)
			}
		case c.waiter:
			if !l.waiterLeft(c) {
				c.w.reply <- exited // never blocks: a waiter's channel gets one answer
				ring(c.w.ticket)
			}
			if c.by == FromStore {
				l.refund(c.item.Key, c.at, c.w.n, c.by, c.grant)
			}
		case c.req.reply != nil:
			select {
			case c.req.reply <- exited:
			default:
			}
			switch {
			case c.req.op == opAllow && c.r.d.Allowed && c.by == FromStore:
				l.refund(c.req.key, c.at, c.req.n, c.by, c.grant)
			case c.req.op == opTry:
				for i := range *c.req.batch() {
					if it := &(*c.req.batch())[i]; it.D.Allowed && it.By == FromStore {
						l.refund(it.Key, c.at, it.N, it.By, it.Grant)
					}
				}
			}
		}
	}
	l.trips.put(tr)
}
