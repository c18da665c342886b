package actor

import (
	"context"
	"time"

	"github.com/chanlimit/chanlimit/internal/keytable"
)

// A remote table (keytable.Remote) keeps its keys' states elsewhere, in a
// store across the network, so each decision is a round trip. The
// partition serves a burst of messages as one: the requests it can hand
// the table together (an AllowN or a PeekN on a key nobody waits on, a
// Reset, a batch's items) go as one DecideEach, one round trip, in runs between
// the other messages, which are served one by one, in their order, as
// they are for a table in memory. A request whose caller left before its
// run was handed over is not sent.
//
// The partition's goroutine waits for the round trip: while it does, the
// next burst gathers in the mailbox, so under load each round trip
// decides many requests.

// serveRemote serves req and the queued requests behind it, in order, at
// now, and returns as serveBurst does. The requests behind the stop
// message, taken out of the mailbox with the burst, are served before it
// returns.
func (p *Partition) serveRemote(req request, queued int, now time.Duration, clockErr error) (served int, stop bool) {
	l := p.loop
	burst := append(l.burst[:0], req)
	for ; queued > 0; queued-- {
		burst = append(burst, <-p.mailbox) // there: only this goroutine receives
	}
	l.burst = burst
	start := 0 // the run to hand over at once starts here
	for i := 0; ; i++ {
		if i < len(burst) && clockErr == nil && l.together(burst[i]) {
			continue
		}
		l.left.rest = burst[start:] // if the goroutine ends, the next serves them (takeOver)
		served += l.serveRun(burst[start:i], now)
		if i == len(burst) {
			break
		}
		start = i + 1
		l.left.rest = burst[start:]
		if burst[i].op == opStop {
			stop = true
			continue // the requests sent after it are answered, as drain answers them
		}
		served += l.serve(burst[i], now, clockErr)
	}
	l.left.rest = nil
	clear(burst) // no reference to a caller's channel or batch is kept
	return served, stop
}

// together reports whether req can go to the remote table with others.
func (l *loop) together(req request) bool {
	switch req.op {
	case opAllow, opPeek:
		return l.waits.lineOf(req.key) == nil // in line: inLine answers it
	case opBatch, opReset:
		return true
	}
	return false
}

// serveRun hands the requests of run to the remote table as one
// DecideEach, delivers their answers, and returns how many requests that
// was.
func (l *loop) serveRun(run []request, now time.Duration) (served int) {
	if len(run) == 0 {
		return 0
	}
	items, sent := l.items[:0], l.sent[:0]
	var deadline time.Time
	bounded := true // every request sent has a deadline
	for _, req := range run {
		if len(req.reply) > 0 { // the caller left: not sent
			sent = append(sent, -1)
			continue
		}
		sent = append(sent, len(items))
		if dl, ok := req.ctx.Deadline(); !ok {
			bounded = false
		} else if dl.After(deadline) {
			deadline = dl
		}
		switch req.op {
		case opAllow:
			items = append(items, keytable.Item{Key: req.key, N: req.n})
		case opPeek:
			items = append(items, keytable.Item{Key: req.key, N: req.n, Op: keytable.OpPeek})
		case opReset:
			items = append(items, keytable.Item{Key: req.key, Op: keytable.OpReset})
		case opBatch:
			if len(l.waits.lines) > 0 {
				l.inLineEach(*req.batch, now)
			}
			items = append(items, *req.batch...)
		}
	}
	l.items, l.sent = items, sent
	if len(items) == 0 {
		return 0
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	l.remote.DecideEach(ctx, items, now)
	for k, req := range run {
		at := sent[k]
		if at < 0 {
			continue
		}
		l.hold(req)
		var r reply
		switch req.op {
		case opAllow, opPeek:
			it := &items[at]
			r.d, r.err = it.D, it.Err
			if req.more && r.err == nil && r.d.Allowed {
				r.more = l.untilMore(req.key, now, r.d.Remaining)
			}
			served++
		case opReset:
			r.err = items[at].Err
			if ln := l.waits.lineOf(req.key); ln != nil {
				l.waits.reschedule(ln, now) // its head may be granted now
			}
			served++
		case opBatch:
			batch := *req.batch
			copy(batch, items[at:at+len(batch)])
			served += len(batch)
		}
		l.deliver(req, now, r)
		l.inflight.reply = nil
	}
	clear(items) // no key is kept
	return served
}
