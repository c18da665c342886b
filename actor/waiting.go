package actor

import (
	"container/heap"
	"fmt"
	"math"
	"time"
)

// Waiting (WaitN). The partition keeps the callers waiting on a key in a
// line, oldest first, and asks the key's rule about the line's head alone:
// when the head's request is granted, it is answered and the next asked at
// once; when it is denied, the line waits for the head's RetryAfter (a
// grant with a Delay, leaky_bucket's, is given back and asked again once
// the Delay has passed, so that a waiter returns at its turn). One timer,
// from the partition's Clock, is set for the earliest instant a line is due.
// No goroutine and no timer belongs to a waiter.
//
// A line is served on its own schedule: its head is decided at the
// instant it was due, not at the later instant the partition got round to
// it (a timer fires late, a Fake jumps past several grants at once), so
// waking late never costs a waiter the quota a bucket at its cap would
// have lost meanwhile, and the waiters of a key are granted at exactly the
// rate its policies allow. Nothing else changes a key's state while it has
// a line (the requests that do not join it are denied), so the key's own
// timeline never goes back. What is due is served first: before the
// partition decides any request (serve), it
// serves the lines due by then, so a request at exactly its RetryAfter
// meets the line it waited behind already served, however late the timer
// fires.
//
// While a key has a line, requests that do not join it (AllowN, PeekN, a
// batch's items) are denied, with the wait they would have in the line,
// so nobody passes the waiters (no barging). A caller that stops waiting
// sends a leave message and waits for its answer, so that from the moment
// WaitN returns it counts nowhere; if its head leaves, the line's next
// waiter is asked at once. A key with a line is pinned in the table (never
// evicted), and, its head being denied, it is never idle, so never
// forgotten either.
//
// A waiter's reply channel gets exactly one answer: its grant, an error,
// or errLeft for its leave message. A channel whose caller sent a leave is
// never put back in the pool, since the leave may still be in the mailbox.

// waiting is the lines of a partition's keys (their timer is the
// Timeline's).
type waiting struct {
	lines map[string]*line
	due   lineHeap // the lines, earliest at first
	max   int      // MaxWaiters: the longest line; 0: no cap
	ns    []int    // the requests of a line and one more, for Ahead
}

// line is the callers waiting on one key, oldest first.
type line struct {
	key   string
	queue []waiter
	at    time.Duration // when its head is to be asked again
	index int           // its place in due
}

// waiter is one WaitN call in a line.
type waiter struct {
	reply  chan reply
	ticket *Ticket // StartWait's, rung with its answer (ring); nil: WaitN's
	n      int
	quota  *Quota // WaitQuota's: written with the grant
}

// lineOf returns key's line, or nil.
func (w *waiting) lineOf(key string) *line {
	if len(w.lines) == 0 { // no map read while nobody waits
		return nil
	}
	return w.lines[key]
}

// dueBy reports whether a line is due at now.
func (w *waiting) dueBy(now time.Duration) bool {
	return len(w.due) > 0 && passed(w.due[0].at, now)
}

// open opens key's line, due at at.
func (w *waiting) open(key string, at time.Duration) *line {
	if w.lines == nil {
		w.lines = make(map[string]*line)
	}
	ln := &line{key: key, at: at}
	w.lines[key] = ln
	heap.Push(&w.due, ln)
	return ln
}

// close closes ln, which is empty.
func (w *waiting) close(ln *line) {
	delete(w.lines, ln.key)
	heap.Remove(&w.due, ln.index)
}

// reschedule sets ln due at at.
func (w *waiting) reschedule(ln *line, at time.Duration) {
	ln.at = at
	heap.Fix(&w.due, ln.index)
}

// passed reports whether at has come at now; the largest Duration never
// comes (see Table.Ahead).
func passed(at, now time.Duration) bool { return at <= now && at != math.MaxInt64 }

// after returns now + wait, saturating at the largest Duration.
func after(now, wait time.Duration) time.Duration {
	if wait > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + wait
}

// lineHeap is a min-heap of lines by at (container/heap).
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

// full returns ErrTooManyWaiters if ln, a key's line (nil: none), has
// MaxWaiters callers already, and otherwise nil.
func (w *waiting) full(ln *line) error {
	if ln == nil || w.max <= 0 || len(ln.queue) < w.max {
		return nil
	}
	return fmt.Errorf("%w: %d callers wait on this key, MaxWaiters is %d", ErrTooManyWaiters, len(ln.queue), w.max)
}
