package storeloop

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

// The lines of callers waiting on keys (WaitN), served in order: a line's
// head is asked at its turn, in a trip (a chore), and the store's answer
// grants it, or says when to ask again. The store is never asked at once,
// so a request on a key with a line that does not join it is answered
// with the line's wait (no barging), from what the key's policies say
// (Table.Hint) and its head's latest denial; and while the head is out
// (asking), such a request (AllowN, PeekN, Reset, a batch or a try with
// an item on it) is parked behind it, and served once the line waits
// again or is closed, so that what is due is served before anything
// after it. The first waiter's deadline is checked when its head's first
// decision lands.

// lines is the lines of a partition's keys (their timer is the
// Timeline's).
type lines struct {
	byKey map[string]*line
	due   lineHeap // the lines, earliest at first
	max   int      // MaxWaiters: the longest line; 0: no cap
}

// line is the callers waiting on one key, first first.
type line struct {
	key   string
	queue []*waiter
	at    time.Duration // when its head is to be asked; the largest Duration while it is out
	index int           // its place in due

	asking bool                // its head is out in a trip
	asked  time.Duration       // when it was asked
	asks   uint64              // the asks sent: the one out is the latest
	again  time.Duration       // while it is out, the earliest it was set due: asked again then, if it must wait
	seen   algorithms.Decision // its head's latest denial, for the answers of requests that do not join it
	parked []actor.Message     // requests on its key that came while its head was out
}

// next returns when ln's head is next decided: when it was asked, while
// it is out.
func (ln *line) next() time.Duration {
	if ln.asking {
		return ln.asked
	}
	return ln.at
}

// waiter is a WaitN in line.
type waiter struct {
	msg    actor.Message
	budget time.Duration // the first waiter's time to its deadline, checked when it is first decided; -1: none
	asked  uint64        // the line's ask that asked it last
	left   bool          // granted, its answer waiting for its quota's peek, and its caller left
}

func (ls *lines) of(key string) *line {
	if len(ls.byKey) == 0 { // no map read while nobody waits
		return nil
	}
	return ls.byKey[key]
}

func (ls *lines) dueBy(now time.Duration) bool {
	return len(ls.due) > 0 && ls.due[0].at <= now && ls.due[0].at != math.MaxInt64
}

// open opens key's line, due at at.
func (ls *lines) open(key string, at time.Duration) *line {
	if ls.byKey == nil {
		ls.byKey = make(map[string]*line)
	}
	ln := &line{key: key, at: at}
	ls.byKey[key] = ln
	heap.Push(&ls.due, ln)
	return ln
}

// reschedule sets ln due at at; while its head is out, it notes the
// earliest it was set due, to ask again then if it must wait.
func (ls *lines) reschedule(ln *line, at time.Duration) {
	if ln.asking {
		ln.again = min(ln.again, at)
		return
	}
	ln.at = at
	heap.Fix(&ls.due, ln.index)
}

// full returns an error wrapping ErrTooManyWaiters if ln holds MaxWaiters.
func (ls *lines) full(ln *line) error {
	if ln == nil || ls.max <= 0 || len(ln.queue) < ls.max {
		return nil
	}
	return fmt.Errorf("%w: %d callers wait on this key, MaxWaiters is %d", actor.ErrTooManyWaiters, len(ln.queue), ls.max)
}

// lineHeap orders lines by when they are due.
type lineHeap []*line

func (h lineHeap) Len() int           { return len(h) }
func (h lineHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h lineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *lineHeap) Push(x any) {
	ln := x.(*line)
	ln.index = len(*h)
	*h = append(*h, ln)
}

func (h *lineHeap) Pop() any {
	old := *h
	ln := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return ln
}

// wait serves a WaitN: it joins its key's line, opening it if there is
// none, to be decided when its turn comes (queued). Its errors come first,
// in the order of every entry point: an n above the capacity, a full line,
// then a deadline that the wait in line passes (late; for the first
// waiter, once its first decision lands).
func (l *loop) wait(req *actor.Message, now time.Duration) (d algorithms.Decision, late, queued bool, err error) {
	if _, err = l.table.Hint(req.Key(), req.N()); err != nil {
		return d, false, false, err
	}
	ln := l.lines.of(req.Key())
	budget := req.Budget()
	if ln != nil {
		if err = l.lines.full(ln); err != nil {
			return d, false, false, err
		}
		if budget >= 0 {
			if d, err = l.inLine(req.Key(), req.N(), now, ln); err != nil {
				return algorithms.Decision{}, false, false, err
			}
			if d.RetryAfter > budget {
				return d, true, false, actor.TooLate(d.RetryAfter, budget)
			}
		}
		budget = -1
	} else {
		ln = l.lines.open(req.Key(), now) // due: its head is asked at the end of the turn
		l.table.Pin(req.Key())
	}
	ln.queue = append(ln.queue, &waiter{msg: *req, budget: budget})
	l.state.Waiting++
	return algorithms.Decision{}, false, true, nil
}

// inLine returns the answer of a request for n units on key at now, which
// does not join ln, its line: denied, with the line's wait, and Limit and
// Policy its head's latest denial's (a hold's names none), or the key's
// tightest policy's before any.
func (l *loop) inLine(key string, n int, now time.Duration, ln *line) (algorithms.Decision, error) {
	d, err := l.table.Hint(key, n)
	if err != nil {
		return algorithms.Decision{}, err
	}
	if ln.seen.RetryAfter > 0 { // a denial seen: every denial has its wait
		d.Limit, d.Policy, d.ResetAfter = ln.seen.Limit, ln.seen.Policy, ln.seen.ResetAfter
	}
	at, free := max(now+1, ln.next()), after(now, d.ResetAfter) // the store cannot tell more
	return algorithms.Decision{
		Limit:      d.Limit,
		RetryAfter: max(at-now, 1),
		ResetAfter: max(free-now, 0),
		Policy:     d.Policy,
	}, nil
}

// inLineEach answers the items (a batch's, or a batch of tries) on keys
// with a line as in line, and marks them not to be decided (Skip); under a
// dry-run policy, the store's dry-run policies decide them beside (Dry).
func (l *loop) inLineEach(items []storetable.Item, now time.Duration, tries bool) {
	for k := range items {
		it := &items[k]
		ln := l.lines.of(it.Key)
		if ln == nil {
			continue
		}
		it.D, it.Err = l.inLine(it.Key, it.N, now, ln)
		it.Skip = true
		switch {
		case it.Err != nil:
		case tries: // it would join the line
			if it.Err = l.lines.full(ln); it.Err != nil {
				it.D = algorithms.Decision{}
			}
		case l.table.HasDryRun(it.Key):
			it.Kind, it.Dry = storetable.DryRun, true
		}
	}
}

// fillQuota writes into q what key has under its policies at now, once d
// was decided on it: the deciding policy's alone, since each policy's
// state is the store's. more is the wait of one more unit than an allowed
// d left, as a peek answered it (a chore), or below 0: none. While callers
// wait on the key, what it has is the line's: 0 remaining, and the wait a
// request of one unit would have in line.
func (l *loop) fillQuota(key string, now time.Duration, d *algorithms.Decision, q *actor.Quota, more time.Duration) {
	l.table.Quota(key, now, q) // the set alone
	q.Policies = q.Policies[:0]
	if j := q.Set.Index(d.Policy); j >= 0 {
		switch {
		case !d.Allowed:
			more = d.RetryAfter
		case more < 0:
			more = 0
		}
		q.Policies = append(q.Policies, actor.PolicyQuota{Policy: j, Remaining: d.Remaining, More: more})
	}
	if ln := l.lines.of(key); ln != nil && len(ln.queue) > 0 {
		in, err := l.inLine(key, 1, now, ln)
		if err != nil {
			q.Policies = q.Policies[:0]
			return
		}
		for i := range q.Policies {
			q.Policies[i].Remaining, q.Policies[i].More = 0, in.RetryAfter
		}
	}
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

// parks reports whether req, a request for the store, must wait behind a
// line whose head is out, and if so parks it there.
func (l *loop) parks(req *actor.Message) bool {
	if len(l.lines.byKey) == 0 {
		return false
	}
	var ln *line
	switch req.Kind() {
	case actor.KindBatch, actor.KindTry:
		for i := range *req.Items() {
			if ln = l.lines.of((*req.Items())[i].Key); ln != nil && ln.asking {
				break
			}
		}
	default:
		ln = l.lines.of(req.Key())
	}
	if ln == nil || !ln.asking {
		return false
	}
	ln.parked = append(ln.parked, *req)
	return true
}

// leave serves a leave message: its waiter leaves its line, if it is
// still in it, and gets its context's error; one granted whose answer
// waits for its quota's peek likewise, its grant given back when the
// peek lands. One answered already is not answered again.
func (l *loop) leave(req *actor.Message, now time.Duration) {
	for _, w := range l.quotaWaits {
		if req.Is(&w.msg) && !w.left {
			w.left = true
			req.AnswerLeave()
			return
		}
	}
	ln := l.lines.of(req.Key())
	if ln == nil {
		return
	}
	k := slices.IndexFunc(ln.queue, func(w *waiter) bool { return req.Is(&w.msg) })
	if k < 0 {
		return
	}
	ln.queue = slices.Delete(ln.queue, k, k+1)
	l.state.Waiting--
	req.AnswerLeave()
	switch {
	case len(ln.queue) == 0:
		l.closeLine(ln)
	case k == 0 && !ln.asking: // out, its trip asks the next when it lands
		l.lines.reschedule(ln, min(ln.at, now)) // the next may be granted now: served after the burst
	}
}

// quotaWaiterLeft lets w, a waiter granted whose answer waited for its
// quota's peek, go, and reports whether its caller left meanwhile: then
// nobody is to be answered, and the grant is to be given back.
func (l *loop) quotaWaiterLeft(w *waiter) bool {
	if k := slices.Index(l.quotaWaits, w); k >= 0 {
		l.quotaWaits = slices.Delete(l.quotaWaits, k, k+1)
	}
	return w.left
}

// dropWaiter takes the waiter in flight out of its line, if it is in one:
// the goroutine ended while serving it.
func (l *loop) dropWaiter(req *actor.Message, now time.Duration) {
	ln := l.lines.of(req.Key())
	if ln == nil {
		return
	}
	if k := slices.IndexFunc(ln.queue, func(w *waiter) bool { return req.Is(&w.msg) }); k >= 0 {
		ln.queue = slices.Delete(ln.queue, k, k+1)
		l.state.Waiting--
		if len(ln.queue) == 0 {
			l.closeLine(ln)
		} else if !ln.asking {
			l.lines.reschedule(ln, now)
		}
	}
}

// closeLine closes ln, whose queue is empty: its key is unpinned, and
// what was parked behind it is served next.
func (l *loop) closeLine(ln *line) {
	delete(l.lines.byKey, ln.key)
	heap.Remove(&l.lines.due, ln.index)
	l.table.Unpin(ln.key)
	l.unpark(ln)
}

// closeLines answers every waiter with err, and closes every line.
func (l *loop) closeLines(err error) {
	for len(l.lines.due) > 0 {
		ln := l.lines.due[0]
		for len(ln.queue) > 0 {
			l.deliverWaiter(l.pop(ln), algorithms.Decision{}, err)
		}
		l.closeLine(ln)
	}
	l.stopTimer()
}

// retryChanged sets due again the lines of the keys whose policies a
// function run by Do changed: what decided their heads may have changed.
func (l *loop) retryChanged(now time.Duration) {
	all, keys := l.table.Changed()
	switch {
	case all:
		for _, ln := range l.lines.due {
			if ln.asking {
				ln.again = min(ln.again, now)
			} else {
				ln.at = now
			}
		}
		heap.Init(&l.lines.due)
	case len(l.lines.byKey) > 0:
		for _, key := range keys {
			if ln := l.lines.byKey[key]; ln != nil {
				l.lines.reschedule(ln, now)
			}
		}
	}
}

// after returns now+wait, or the largest Duration if that is past it.
func after(now, wait time.Duration) time.Duration {
	if wait > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + wait
}
