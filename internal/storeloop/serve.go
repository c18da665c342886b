package storeloop

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

// Serving a burst: the requests the store can decide together go out as
// one trip, in runs between the other messages, which are served one by
// one, in their order. A request whose caller left before its run was
// handed over is not sent.
//
// Requests sent one after the other on a key by one caller are decided in
// that order, since each waits for its answer; requests that are out at
// once on one key are concurrent, and the store decides them in either
// order, as a partition in memory decides concurrent requests in the order
// they reach its mailbox.

// serveRun serves the messages of burst, in order, at now: in runs handed
// to the store together, and one by one between them. It returns how many
// requests it answered (a batch's items one by one), and whether the stop
// message was among them: the messages sent after it are served too.
func (l *loop) serveRun(burst []actor.Message, now time.Duration, clockErr error) (served int, stop bool) {
	start := 0 // the run to hand over at once starts here
	for i := 0; ; i++ {
		if i < len(burst) && l.joinsTrip(&burst[i], clockErr) {
			continue
		}
		l.left.rest = burst[start:] // if the goroutine ends, the next serves them (takeOver)
		served += l.dispatch(burst[start:i], now)
		if i == len(burst) {
			break
		}
		start = i + 1
		l.left.rest = burst[start:]
		if burst[i].Kind() == actor.KindStop {
			// First: if a request after it ends the goroutine, the next
			// one is stopping too (run drains).
			stop, l.stopping = true, true
			continue
		}
		served += l.serve(&burst[i], now, clockErr)
	}
	l.left.rest = nil
	return served, stop
}

// joinsTrip reports whether req can go to the store in a trip with
// others. If reading the clock failed with clockErr, only a Reset can,
// which needs no time; the others fail with the error (serve).
func (l *loop) joinsTrip(req *actor.Message, clockErr error) bool {
	if clockErr != nil && req.Kind() != actor.KindReset {
		return false
	}
	switch req.Kind() {
	case actor.KindAllow, actor.KindPeek:
		// In line, the line answers it; with a dry-run policy, which
		// decides every request, it goes to the store all the same.
		return l.lines.of(req.Key()) == nil || l.table.HasDryRun(req.Key())
	case actor.KindBatch, actor.KindTry, actor.KindReset, actor.KindRefund, actor.KindHold:
		return true
	}
	return false
}

// dispatch sends the requests of run to the store as one trip, or gathers
// them if no trip has room, and returns how many requests it answered
// (none, unless the table refused every item).
func (l *loop) dispatch(run []actor.Message, now time.Duration) (served int) {
	if len(run) == 0 {
		return 0
	}
	if !l.trips.room() {
		l.trips.gather(run) // they go out together when a trip lands (flush)
		return 0
	}
	l.serveDue(now) // as in memory: a request on a key whose line is due is decided after the line
	tr := l.trips.get()
	tr.now = now
	for i := range run {
		req := &run[i]
		if req.Left() || l.parks(req) { // the caller left: not sent; or it waits behind a line's head
			continue
		}
		tr.run = append(tr.run, *req)
		tr.sent = append(tr.sent, len(tr.items))
		switch k := req.Kind(); {
		case (k == actor.KindAllow || k == actor.KindPeek) && l.lines.of(req.Key()) != nil:
			tr.items = append(tr.items, l.dryInTrip(req, now))
		case k == actor.KindAllow:
			tr.items = append(tr.items, storetable.Item{Key: req.Key(), N: req.N(), Kind: storetable.Allow})
		case k == actor.KindPeek:
			tr.items = append(tr.items, storetable.Item{Key: req.Key(), N: req.N(), Kind: storetable.Peek})
		case k == actor.KindReset:
			tr.items = append(tr.items, storetable.Item{Key: req.Key(), Kind: storetable.Reset})
		case k == actor.KindRefund:
			tr.items = append(tr.items, storetable.Item{Key: req.Key(), N: req.N(), Kind: storetable.Refund})
		case k == actor.KindHold && req.Hold() <= 0: // changes nothing: sent nowhere
			tr.items = append(tr.items, storetable.Item{Key: req.Key(), Kind: storetable.Hold, Skip: true})
		case k == actor.KindHold:
			tr.items = append(tr.items, storetable.Item{Key: req.Key(), Kind: storetable.Hold, Hold: req.Hold()})
		default: // a batch, or a batch of tries: each item granted now, or left to wait (a turn)
			kind := storetable.Allow
			if k == actor.KindTry {
				kind = storetable.Turn
			}
			from := len(tr.items)
			for _, it := range *req.Items() {
				tr.items = append(tr.items, storetable.Item{Key: it.Key, N: it.N, Kind: kind})
			}
			if len(l.lines.due) > 0 {
				l.inLineEach(tr.items[from:], now, k == actor.KindTry)
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
func (l *loop) dryInTrip(req *actor.Message, now time.Duration) storetable.Item {
	it := storetable.Item{Key: req.Key(), N: req.N(), Kind: storetable.DryRun, Dry: true, Skip: true}
	if req.Kind() == actor.KindPeek {
		it.Kind = storetable.Peek // taking nothing: its WouldDeny alone is read
	}
	if it.D, it.Err = l.inLine(req.Key(), req.N(), now, l.lines.of(req.Key())); it.Err != nil {
		it.Dry = false
	}
	return it
}

// send sends tr, whose items are filled, to the store on a worker, and
// returns how many requests it answered at once (none, unless the table
// refused every item). It is called only while fewer than trips.max are
// out (dispatch and flush see to it). A trip ends with the latest deadline
// of its callers, or none if one has none; a trip of chores alone has
// none.
func (l *loop) send(tr *trip) (served int) {
	if tr.out = l.table.Prepare(tr.items, tr.now); tr.out == nil {
		return l.land(tr) // answered without a trip: every item refused
	}
	tr.ctx, tr.cancel = context.Background(), func() {}
	if len(tr.chores) == 0 {
		latest, bounded := time.Time{}, true
		for i := range tr.run {
			dl, ok := tr.run[i].Deadline()
			bounded = bounded && ok
			if dl.After(latest) {
				latest = dl
			}
		}
		if bounded {
			tr.ctx, tr.cancel = context.WithDeadline(tr.ctx, latest)
		}
	}
	l.trips.launch(tr)
	return 0
}

// land delivers the answers tr brought back, and returns how many
// requests they answered.
func (l *loop) land(tr *trip) (served int) {
	l.trips.back(tr)
	l.left.landing, l.left.landingAt = tr, 0
	if tr.out != nil {
		l.table.Finish(tr.out, tr.items, tr.now)
	}
	for k := range tr.run {
		req := &tr.run[k]
		l.left.landingAt = k + 1 // first: if this one ends the goroutine, takeOver answers the rest
		at := tr.sent[k]
		l.inFlight(req)
		switch req.Kind() {
		case actor.KindAllow, actor.KindPeek:
			it := &tr.items[at]
			l.inflight.by, l.inflight.grant = it.By, it.Grant
			served++
			d, err := it.D, it.Err
			if q := req.Quota(); q != nil && err == nil {
				if d.Allowed && req.Kind() == actor.KindAllow { // its answer waits for its key's wait of one more unit
					l.chores = append(l.chores, quotaChore(req.Key(), tr.now, it, chore{req: *req, d: d}))
					l.outOfFlight()
					continue
				}
				// A denial's, and an allowed peek's: nothing to ask (one more
				// unit than a peek would leave is its own, there now).
				l.fillQuota(req.Key(), tr.now, &d, q, -1)
			}
			l.deliver(req, tr.now, d, err)
		case actor.KindReset, actor.KindRefund, actor.KindHold:
			if ln := l.lines.of(req.Key()); ln != nil {
				l.lines.reschedule(ln, tr.now) // its head may be granted now
			}
			served++
			l.deliver(req, tr.now, algorithms.Decision{}, tr.items[at].Err)
		default: // a batch, or a batch of tries
			batch := *req.Items()
			items := tr.items[at : at+len(batch)]
			l.inflight.items, l.inflight.refund = items, len(items)
			served += len(batch)
			if req.Kind() == actor.KindTry && l.turnsToCome(items, tr.now) {
				// Its answer waits for its refunds, so that what its
				// caller asks next finds them made.
				copyBack(batch, items)
				last := &l.chores[len(l.chores)-1]
				last.req, last.items = *req, slices.Clone(items)
				l.outOfFlight()
				continue
			}
			copyBack(batch, items)
			l.deliver(req, tr.now, algorithms.Decision{}, nil)
		}
		l.outOfFlight()
	}
	l.landChores(tr, len(tr.items)-len(tr.chores))
	l.left.landing = nil
	l.trips.put(tr)
	return served
}

// copyBack writes the answers of a batch's items, decided in a trip, into
// the caller's.
func copyBack(batch []actor.Item, items []storetable.Item) {
	for i := range batch {
		batch[i].D, batch[i].Err = items[i].D, items[i].Err
	}
}

// turnsToCome gives back the grants of a try's items that come with a
// Delay (leaky_bucket's turn is to come: they would wait), leaving them
// not Allowed, and reports whether a give-back to the store is among
// them, the last chore. Those on keys with a line were answered as in
// line, and not sent (Skip).
func (l *loop) turnsToCome(items []storetable.Item, now time.Duration) (sent bool) {
	for k := range items {
		it := &items[k]
		if it.Skip || it.Err != nil {
			continue
		}
		if _, giveBack, _ := actor.Turn(&it.D); !giveBack {
			continue
		}
		it.D.Allowed = false // first: if the give-back ends the goroutine, giveBack passes it by
		l.refund(it.Key, now, it.N, it.By, it.Grant)
		sent = sent || it.By == storetable.FromStore
	}
	return sent
}

// landAll waits for every trip out to land, and delivers their answers.
func (l *loop) landAll() {
	for l.trips.out > 0 {
		l.land(<-l.trips.landed)
	}
}

// serve serves one message that does not go out in a trip, at now: a
// WaitN, a leave, a Do, an AllowN or a PeekN that its key's line answers,
// or, if reading the clock failed with clockErr, a request that needs the
// time, which fails with it. It returns how many requests that was.
func (l *loop) serve(req *actor.Message, now time.Duration, clockErr error) (served int) {
	if req.Left() {
		return 0 // the caller gave up before its turn: apply nothing
	}
	if l.joinsTrip(req, clockErr) { // its key's line closed since its burst was read
		return l.dispatch([]actor.Message{*req}, now)
	}
	if clockErr == nil && req.Kind() != actor.KindLeave {
		l.serveDue(now) // what is due comes first: its heads are asked before anything after them
	}
	l.inFlight(req)
	var d algorithms.Decision
	err, late := clockErr, false
	served = 1
	switch req.Kind() {
	case actor.KindAllow, actor.KindPeek:
		if err == nil {
			ln := l.lines.of(req.Key())
			if ln.asking {
				ln.parked = append(ln.parked, *req) // behind its head, out to the store
				l.outOfFlight()
				return 0
			}
			d, err = l.inLine(req.Key(), req.N(), now, ln)
		}
	case actor.KindWait:
		if err == nil {
			var queued bool
			if d, late, queued, err = l.wait(req, now); queued {
				l.outOfFlight()
				return 1 // answered when its turn comes
			}
		}
	case actor.KindLeave:
		l.leave(req, now)
		l.outOfFlight()
		return 0
	case actor.KindBatch, actor.KindTry: // clockErr: each item fails with it
		items := *req.Items()
		for i := range items {
			items[i].D, items[i].Err = algorithms.Decision{}, err
		}
		served = len(items)
	case actor.KindDo:
		l.state.ClockErr = clockErr
		l.state.Wall = l.timeline.Wall()
		err = req.Func()(&l.state)
		l.state.ClockErr = nil
		l.retryChanged(l.state.Now)
	case actor.KindHold: // clockErr: it fails with it
	}
	if q := req.Quota(); q != nil && (err == nil || late) { // a wait too late tells the quota it would have had
		l.fillQuota(req.Key(), now, &d, q, -1)
	}
	l.deliver(req, now, d, err)
	l.outOfFlight()
	return served
}

// deliver sends the answer d, err to req, without blocking, and counts it.
// If the caller gave up while the request was decided, its channel is
// full: the grants are then given back, a batch's latest first. (A Reset
// or a Refund whose caller left stands: the caller cannot tell whether it
// happened, as it cannot for one whose answer it got just as its context
// ended. So does what a function run by Do did.)
func (l *loop) deliver(req *actor.Message, now time.Duration, d algorithms.Decision, err error) {
	if l.state.Answer(req, d, err) {
		return
	}
	switch req.Kind() {
	case actor.KindAllow:
		if d.Allowed {
			l.refund(req.Key(), now, req.N(), l.inflight.by, l.inflight.grant)
		}
	case actor.KindBatch, actor.KindTry:
		l.giveBack(now)
	}
}

// refund gives back n units on key, granted at now, to where the grant
// came from: the store (in a trip: a chore), the local keys, or nowhere.
func (l *loop) refund(key string, now time.Duration, n int, by storetable.From, grant uint64) {
	switch by {
	case storetable.FromLocal:
		l.table.GiveBack(key, now, n)
	case storetable.FromStore:
		l.chores = append(l.chores, chore{at: now, item: storetable.Item{Key: key, N: n, Kind: storetable.GiveBack, Grant: grant}})
	}
}

// giveBack gives back the grants of the batch in flight, latest first,
// from its refund mark down. The mark passes each item before its
// give-back, so that if a rule ends the goroutine there, the next one goes
// on after it and gives nothing back twice.
func (l *loop) giveBack(now time.Duration) {
	items := l.inflight.items
	for l.inflight.refund > 0 {
		l.inflight.refund--
		if it := &items[l.inflight.refund]; it.D.Allowed && it.Err == nil {
			l.refund(it.Key, now, it.N, it.By, it.Grant)
		}
	}
}

// quotaChore returns c, for a grant it on key at at, as the peek of one
// more unit than the grant left.
func quotaChore(key string, at time.Duration, it *storetable.Item, c chore) chore {
	c.at, c.by, c.grant = at, it.By, it.Grant
	c.item = storetable.Item{Key: key, N: it.D.Remaining + 1, Kind: storetable.Peek}
	if it.D.Remaining == math.MaxInt {
		c.item.N = math.MaxInt // above any capacity: the peek fails, and the wait is 0
	}
	return c
}
