package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

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
	ch, stopping, err := p.send(ctx, Message{kind: KindWait, key: key, n: n, arg: q})
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
		return answered(ch, ErrClosed)
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
	case p.mailbox <- Message{kind: KindLeave, key: key, reply: ch}:
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
