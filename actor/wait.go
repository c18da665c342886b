package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/errs"
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
// partition decides any request (serve, or a remote table's run), it
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

// waiting is the lines of a partition's keys and their timer.
type waiting struct {
	lines map[string]*line
	due   lineHeap // the lines, earliest at first
	max   int      // MaxWaiters: the longest line; 0: no cap
	timer clock.Timer
	fired <-chan time.Time // the timer's channel while it is set, else nil
	setAt time.Duration    // the instant the timer is set for
	ns    []int            // the requests of a line and one more, for Ahead
}

// line is the callers waiting on one key, oldest first.
type line struct {
	key   string
	queue []waiter
	at    time.Duration // when its head is to be asked again
	index int           // its place in due

	// A remote table's (remote_lines.go):
	asking bool                // its head is out in a trip: at is the largest Duration meanwhile
	asked  time.Duration       // when it was asked
	asks   uint64              // the asks sent: the one out is the latest
	again  time.Duration       // while it is out, the earliest it was set due: asked again then, if it must wait
	seen   algorithms.Decision // its head's latest denial, for the answers of requests that do not join it
	parked []request           // requests on its key that came while its head was out
}

// next returns when ln's head is to be asked, or was, if it is out.
func (ln *line) next() time.Duration {
	if ln.asking {
		return ln.asked
	}
	return ln.at
}

// waiter is one WaitN call in a line.
type waiter struct {
	reply  chan reply
	ticket *Ticket // StartWait's, rung with its answer (ring); nil: WaitN's
	n      int
	quota  *Quota        // WaitQuota's: written with the grant
	budget time.Duration // a remote table's first waiter's: the time to its deadline, checked when its head is first decided; -1: none
	asked  uint64        // a remote table's: the line's ask that asked it last (remote_lines.go)
}

// errLeft answers a leave message: the waiter left its line, taking
// nothing.
var errLeft = errors.New("actor: left the line")

// tooLate is WaitN's error when ctx's deadline comes before the grant
// would.
type tooLate struct{ wait, budget time.Duration }

func (e *tooLate) Error() string {
	return fmt.Sprintf("chanlimit: WaitN: the grant would come in %v, after the context's deadline (in %v): %v", e.wait, e.budget, context.DeadlineExceeded)
}

// Unwrap makes the error match context.DeadlineExceeded.
func (e *tooLate) Unwrap() error { return context.DeadlineExceeded }

// Timeout reports true, as context.DeadlineExceeded does.
func (e *tooLate) Timeout() bool { return true }

// WaitN asks the partition for n units on key and waits until they are
// granted, in line behind the callers already waiting on key. It returns
// the decision; ErrClosed; ctx.Err() if ctx ends first, having taken
// nothing; an error matching context.DeadlineExceeded, at once, if ctx has
// a deadline that the grant would come after; ErrTooManyWaiters if key's
// line is full; or the table's error, as AllowN.
func (p *Partition) WaitN(ctx context.Context, key string, n int) (algorithms.Decision, error) {
	return p.waitN(ctx, key, n, nil)
}

// WaitQuota is WaitN, and with the grant, or with the denial of a wait
// that ctx's deadline comes before, it writes into q what key has under
// each of its policies, as AllowQuota does, in the same round trip.
func (p *Partition) WaitQuota(ctx context.Context, key string, n int, q *Quota) (algorithms.Decision, error) {
	return p.waitN(ctx, key, n, q)
}

// waitN is WaitN, writing the quota into q if it is not nil.
func (p *Partition) waitN(ctx context.Context, key string, n int, q *Quota) (algorithms.Decision, error) {
	budget := time.Duration(-1) // no deadline
	// A context's deadline is on the wall clock (context reads time.Now),
	// so the time left to it is too, whatever the partition's Clock.
	if dl, ok := ctx.Deadline(); ok {
		budget = max(time.Until(dl), 0)
	}
	ch, stopping, err := p.send(ctx, request{op: opWait, key: key, n: n, budget: budget, quota: q})
	if err != nil {
		return algorithms.Decision{}, err
	}
	var exited <-chan struct{} // nil: the goroutine answers before it exits
	if stopping {
		exited = p.done
	}
	select {
	case r := <-ch:
		if !stopping {
			p.replies.Put(ch)
		}
		return r.d, r.err
	case <-ctx.Done():
		return p.leave(ctx, key, ch)
	case <-exited:
		return answered(ch, errs.ErrClosed)
	}
}

// leave takes the waiter whose reply channel is ch out of key's line, and
// returns its answer: ctx.Err() if it left, or what came first (its grant,
// an error).
func (p *Partition) leave(ctx context.Context, key string, ch chan reply) (algorithms.Decision, error) {
	select {
	case r := <-ch: // answered while ctx ended
		p.replies.Put(ch)
		return r.d, r.err
	case p.mailbox <- request{op: opLeave, key: key, reply: ch}:
	case <-p.done:
		return answered(ch, ctx.Err())
	}
	select {
	case r := <-ch:
		if r.err == errLeft {
			return algorithms.Decision{}, ctx.Err()
		}
		return r.d, r.err
	case <-p.done: // it answered every waiter before it exited; the wait itself may have come too late
		return answered(ch, ctx.Err())
	}
}

// answered returns the answer in ch, if there is one, and otherwise err.
func answered(ch chan reply, err error) (algorithms.Decision, error) {
	select {
	case r := <-ch:
		if r.err == errLeft {
			return algorithms.Decision{}, err
		}
		return r.d, r.err
	default:
		return algorithms.Decision{}, err
	}
}
