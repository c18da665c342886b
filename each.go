package chanlimit

import (
	"context"
	"fmt"

	"github.com/chanlimit/chanlimit/actor"
)

// AllowEach decides every request of reqs as AllowBatch does, one round
// trip per partition, and writes the decision for reqs[i] into out[i];
// but a request the router refuses fails alone, with its error in
// errs[i] (ErrInvalidCount, ErrKeyTooLong, ErrExceedsCapacity,
// ErrTooManyKeys, ErrAlgorithmPanic, ErrClockPanic, ErrStoreUnavailable),
// and the others are decided. A request whose errs[i] is not nil already
// is passed by: it is not decided, and keeps its error (a pipeline stage
// marks so the items it could not key). out and errs must be at least as
// long as reqs.
//
// AllowEach returns nil once every partition has answered, whatever the
// requests' errors; or ctx.Err() or ErrClosed if they came first: then,
// as with AllowBatch, the parts decided stand, and a request not decided
// has a zero out[i] (its Limit is 0) and a nil errs[i].
func (r *Router) AllowEach(ctx context.Context, reqs []Request, out []Decision, errs []error) error {
	return r.eachOf("AllowEach", ctx, reqs, out, errs, (*actor.Partition).SendBatch)
}

// TryWaitEach decides every request of reqs as WaitN would if it could
// not wait at all, one round trip per partition: a request WaitN would
// grant at once (its key has no callers waiting, and its policies allow
// it with no Delay) is granted into out[i]; any other takes nothing and
// gets a Decision that is not Allowed: its wait is WaitN's to decide; a
// request WaitN would fail at once (a bad n or key, ErrExceedsCapacity,
// ErrTooManyWaiters, ...) gets its error in errs[i].
// Requests are decided in their order in reqs, several on one key
// included. As with AllowEach, a request whose errs[i] is set already is
// passed by, out and errs must be as long as reqs, and TryWaitEach
// returns nil, ctx.Err() or ErrClosed.
//
// A pipeline that shapes its items (package pipeline's Throttle) tries
// each item so, and has only those not granted wait, with WaitN.
func (r *Router) TryWaitEach(ctx context.Context, reqs []Request, out []Decision, errs []error) error {
	return r.eachOf("TryWaitEach", ctx, reqs, out, errs, (*actor.Partition).SendTries)
}

// eachOf checks each request of reqs that errs does not pass by, and sends
// the others to their partitions with send.
func (r *Router) eachOf(method string, ctx context.Context, reqs []Request, out []Decision, errs []error, send sendFunc) error {
	if len(out) < len(reqs) || len(errs) < len(reqs) {
		return fmt.Errorf("%w: %s: %d requests, %d slots for decisions and %d for errors", ErrShortOutput, method, len(reqs), len(out), len(errs))
	}
	for i := range reqs {
		if errs[i] == nil {
			errs[i] = r.check(reqs[i].Key, reqs[i].N)
		}
	}
	return r.batch(ctx, reqs, out, errs, send)
}
