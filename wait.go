package chanlimit

import (
	"context"
)

// Wait waits until one unit on key is granted: WaitN(ctx, key, 1).
func (r *Router) Wait(ctx context.Context, key string) error {
	_, err := r.WaitN(ctx, key, 1)
	return err
}

// WaitN waits until n units on key are granted, and returns the grant's
// Decision. Callers waiting on one key are served in the order they
// called, each once the key's policies allow its n units (leaky_bucket:
// once its turn has come, its Delay passed); while a key has callers
// waiting, AllowN, Peek and AllowBatch on it are denied, with the
// RetryAfter they would wait in line, so that nobody passes them. The
// waiting happens in the key's partition, on one timer of Config.Clock:
// no goroutine and no timer is made per caller.
//
// If ctx ends before the grant, WaitN returns ctx.Err() and takes nothing,
// and the callers behind it move up at once; from the moment it returns it
// counts nowhere (Stats.Waiting, the line, the denials). If ctx has a
// deadline that the grant would come after, WaitN returns at once, with a
// denied Decision whose RetryAfter is the wait it would have had (and whose
// Remaining is what the key has left, 0 if callers wait on it) and an
// error matching context.DeadlineExceeded, and waits for nothing. The
// wait is the grant time if the callers ahead stay and time runs on: on
// a clock.Fake, a deadline (which is on the real clock) is compared with
// Fake time.
//
// Its other errors are AllowN's, at once (ErrInvalidCount, ErrKeyTooLong,
// ErrExceedsCapacity, ErrTooManyKeys, ErrClosed), and ErrTooManyWaiters if
// key already has MaxWaiters callers waiting; a bad n (ErrInvalidCount,
// ErrExceedsCapacity) is reported before either cap, as by every other
// method, since no wait could ever grant it. Close answers every caller
// still waiting with ErrClosed. A key with callers waiting is never
// forgotten or evicted.
func (r *Router) WaitN(ctx context.Context, key string, n int) (Decision, error) {
	if err := r.check(key, n); err != nil {
		return Decision{}, err
	}
	return r.partition(key).WaitN(ctx, key, n)
}
