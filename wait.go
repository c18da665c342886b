package chanlimit

import (
	"context"

	"github.com/chanlimit/chanlimit/actor"
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
// If ctx ends before the grant, WaitN returns ctx.Err() and takes nothing
// (with a Store, a turn the store granted as the caller left holds its
// units until it is given back: see Store), and the callers behind it
// move up at once; from the moment it returns it counts nowhere
// (Stats.Waiting, the line, the denials). If ctx has a
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
	if r.observe == nil {
		if err := r.check(key, n); err != nil {
			return Decision{}, err
		}
		return r.partition(key).WaitN(ctx, key, n)
	}
	start := r.now()
	var d Decision
	err := r.check(key, n)
	if err == nil {
		d, err = r.partition(key).WaitN(ctx, key, n)
	}
	r.observed(ctx, Event{Kind: EventWait, Key: key, N: n, Decision: d, Err: err, Waited: r.since(start)})
	return d, err
}

// A Ticket is a wait that StartWait put in its key's line. Once it is
// answered, it comes on the channel StartWait was given, and its Answer
// returns what WaitN would have: the grant, or the error. Leave takes it
// out of the line, as a WaitN caller whose context ends leaves it.
type Ticket = actor.Ticket

// StartWait is WaitN for a goroutine that has many waits out at once (a
// pipeline stage, a scheduler): it puts n units on key in the key's line,
// as WaitN does, and returns without waiting for the grant (only for room
// in the mailbox, as WaitN does, and, once Close has begun, for the
// partition to end). The Ticket comes on ready once it is
// answered, and its Answer is WaitN's: the grant, or WaitN's error
// (ErrExceedsCapacity, ErrTooManyWaiters, ErrTooManyKeys, ErrClosed, one
// matching context.DeadlineExceeded if ctx's deadline comes before the
// grant).
// Like WaitN's callers, the waits have no goroutine and no timer of their
// own: a thousand Tickets out cost a thousand places in lines.
//
// ctx counts until the request is in line: it bounds StartWait's wait for
// room in the mailbox, and its deadline is compared with the grant's time
// when the request joins the line, as WaitN's is (a wait it would pass is
// refused at once). Once in line, nothing watches ctx: a Ticket stays
// until it is answered or Leave takes it out, past ctx's deadline too. ready should have room
// for every Ticket started on it and not yet received (a partition never
// waits on a caller: a Ticket that finds ready full is sent by a goroutine
// made for it).
//
// A request that never reaches the key's partition gets its error from
// StartWait itself, with no Ticket: ErrInvalidCount, ErrKeyTooLong,
// ErrClosed, an error for a nil ready, or ctx.Err() if ctx is done first.
func (r *Router) StartWait(ctx context.Context, key string, n int, ready chan<- *Ticket) (*Ticket, error) {
	if r.observe == nil {
		if err := r.check(key, n); err != nil {
			return nil, err
		}
		return r.partition(key).StartWait(ctx, key, n, ready)
	}
	start := r.now()
	err := r.check(key, n)
	if err == nil {
		var t *Ticket
		t, err = r.partition(key).StartWaitObserved(ctx, key, n, ready, func(d Decision, err error) {
			r.observed(ctx, Event{Kind: EventWait, Key: key, N: n, Decision: d, Err: err, Waited: r.since(start)})
		})
		if err == nil {
			return t, nil
		}
	}
	r.observed(ctx, Event{Kind: EventWait, Key: key, N: n, Err: err, Waited: r.since(start)})
	return nil, err
}
