package chanlimit

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/shaping"
)

// batch is AllowBatch's scratch space, kept for the next call unless a
// partition may still hold part of it.
type batch struct {
	items   [][]keytable.Item // per partition, in request order
	at      [][]int           // per partition: the index in reqs of each item
	pending []actor.Pending
	sent    []int // the partitions sent to, in order
}

// AllowBatch decides every request of reqs, as AllowN would one by one, and
// writes the decision for reqs[i] into out[i]. The requests for each
// partition travel as one message, and the partitions work in parallel, so
// a batch pays the channel round trip once per partition instead of once
// per request. Requests for one key are decided in their order in reqs.
//
// Every N and every key's length is checked before anything is sent: a bad
// one fails the whole batch with ErrInvalidCount or ErrKeyTooLong (wrapped
// with its index) and nothing is applied. A request that a partition
// refuses (ErrExceedsCapacity for an N above its key's capacity,
// ErrTooManyKeys, ErrAlgorithmPanic, ErrClockPanic) gets a zero Decision,
// the others are decided, and
// AllowBatch returns the error of the first refused request in reqs'
// order, wrapped with its index. If ctx ends, or the router closes, before
// every partition has answered, AllowBatch returns ctx.Err() or ErrClosed;
// the partitions that had not decided their part take nothing, and the
// parts that were decided stand, with their decisions in out. A zero
// Decision marks a request that was not decided (a decided one is
// Allowed, or has its deciding policy's Limit).
func (r *Router) AllowBatch(ctx context.Context, reqs []Request, out []Decision) error {
	if len(out) < len(reqs) {
		return fmt.Errorf("%w (%d slots for %d requests)", ErrShortOutput, len(out), len(reqs))
	}
	for i, req := range reqs {
		if err := r.check(req.Key, req.N); err != nil {
			return fmt.Errorf("chanlimit: AllowBatch: request %d: %w", i, err)
		}
	}
	return r.batch(ctx, reqs, out, nil, (*actor.Partition).SendBatch, EventAllow)
}

// sendFunc sends a partition its part of a batch (Partition.SendBatch,
// or SendTries).
type sendFunc func(p *actor.Partition, ctx context.Context, items *[]keytable.Item) (actor.Pending, error)

// batch sends each partition its part of reqs with send, waits for the
// answers, and writes the decision for reqs[i] into out[i]; it returns as
// AllowBatch does. With errs, it writes each request's error into
// errs[i] as well, and passes by the requests whose errs[i] is set
// already.
// Each request decided is observed as an Event of kind (see tried).
func (r *Router) batch(ctx context.Context, reqs []Request, out []Decision, errs []error, send sendFunc, kind EventKind) error {
	return r.batchWith(r.batches.Get().(*batch), ctx, reqs, out, errs, send, kind)
}

// batchWith is batch with b, a batch from r.batches, as scratch space.
func (r *Router) batchWith(b *batch, ctx context.Context, reqs []Request, out []Decision, errs []error, send sendFunc, kind EventKind) error {
	for i, req := range reqs {
		if errs != nil && errs[i] != nil {
			continue
		}
		h := keytable.Hash(req.Key)
		pi := r.partitionOf(h)
		// The item's fields are set in place: appending an Item built
		// aside copies it through memory, which stalls (items come back
		// from reset zeroed).
		items := slices.Grow(b.items[pi], 1)
		items = items[:len(items)+1]
		it := &items[len(items)-1]
		it.Key, it.N, it.Hash, it.Hashed = req.Key, req.N, h, true
		b.items[pi] = items
		b.at[pi] = append(b.at[pi], i)
	}
	clear(out[:len(reqs)]) // a request left undecided keeps a zero Decision

	var err error
	for pi := range b.items {
		if len(b.items[pi]) == 0 {
			continue
		}
		if b.pending[pi], err = send(r.parts[pi], ctx, &b.items[pi]); err != nil {
			break // the parts sent are still waited for: their decisions stand
		}
		b.sent = append(b.sent, pi)
	}
	reusable := true
	refused := len(reqs) // the index of the first refused request
	var refusal error
	for _, pi := range b.sent {
		if werr := b.pending[pi].Wait(ctx); werr != nil {
			// The partition may still hold this part: never reuse b.
			err, reusable = cmp.Or(err, werr), false
			continue
		}
		for k, i := range b.at[pi] {
			it := &b.items[pi][k]
			out[i] = it.D
			if errs != nil {
				errs[i] = it.Err
			}
			if it.Err != nil && i < refused {
				refused, refusal = i, it.Err
			}
			if r.observe != nil {
				r.observeItem(ctx, kind, &reqs[i], it.D, it.Err)
			}
		}
	}
	if err == nil && refusal != nil && errs == nil { // with errs, each refusal is its request's alone
		err = fmt.Errorf("chanlimit: AllowBatch: request %d: %w", refused, refusal)
	}
	if reusable {
		b.reset()
		r.batches.Put(b)
	}
	return err
}

// reset empties b for the next batch, dropping its references to keys.
func (b *batch) reset() {
	for pi := range b.items {
		clear(b.items[pi])
		b.items[pi] = b.items[pi][:0]
		b.at[pi] = b.at[pi][:0]
	}
	b.sent = b.sent[:0]
}

// AllowEach decides every request of reqs as AllowBatch does, one round
// trip per partition, and writes the decision for reqs[i] into out[i];
// but a request the router refuses fails alone, with its error in
// errs[i] (ErrInvalidCount, ErrKeyTooLong, ErrExceedsCapacity,
// ErrTooManyKeys, ErrAlgorithmPanic, ErrClockPanic, ErrStoreUnavailable),
// and the others are decided. A request whose errs[i] is not nil already
// is passed by: it is not decided, and keeps its error (a pipeline stage
// marks so the items it could not key, and an errs reused from a call
// before must be cleared first). out and errs must be at least as long as
// reqs, or AllowEach returns ErrShortOutput and decides nothing.
//
// AllowEach returns nil once every partition has answered, whatever the
// requests' errors; or ctx.Err() or ErrClosed if they came first: then,
// as with AllowBatch, the parts decided stand, and a request not decided
// has a zero out[i] and a nil errs[i].
func (r *Router) AllowEach(ctx context.Context, reqs []Request, out []Decision, errs []error) error {
	return r.eachOf("AllowEach", ctx, reqs, out, errs, (*actor.Partition).SendBatch, EventAllow)
}

// TryWaitEach decides every request of reqs as WaitN would if it could
// not wait at all, one round trip per partition: a request WaitN would
// grant at once (its key has no callers waiting, and its policies allow
// it with no Delay) is granted into out[i]; any other takes nothing and
// gets a Decision that is not Allowed: its wait is WaitN's to decide
// (under leaky_bucket, a request whose turn is to come has a Delay and no
// RetryAfter); a request WaitN would fail at once (a bad n or key,
// ErrExceedsCapacity, ErrTooManyWaiters on a full line, ErrTooManyKeys,
// ErrAlgorithmPanic, ErrClockPanic, ErrStoreUnavailable) gets its error
// in errs[i]. ctx's deadline refuses nothing here: only WaitN knows how
// long it would wait. Requests are decided in their order in reqs,
// several on one key included, but no line forms among them: a later,
// smaller request on a key may be granted where an earlier one was not.
// As with AllowEach, a request whose errs[i] is set already is passed
// by, out and errs must be as long as reqs (else ErrShortOutput), and
// TryWaitEach returns nil, ctx.Err() or ErrClosed.
//
// A pipeline that shapes its items (package pipeline's Throttle) tries
// each item so, and has only those not granted wait, with WaitN.
func (r *Router) TryWaitEach(ctx context.Context, reqs []Request, out []Decision, errs []error) error {
	kind := EventAllow
	if r.observe != nil && shaping.Is(ctx) {
		kind = tried
	}
	return r.eachOf("TryWaitEach", ctx, reqs, out, errs, (*actor.Partition).SendTries, kind)
}

// eachOf checks each request of reqs that errs does not pass by, and sends
// the others to their partitions with send.
func (r *Router) eachOf(method string, ctx context.Context, reqs []Request, out []Decision, errs []error, send sendFunc, kind EventKind) error {
	if len(out) < len(reqs) || len(errs) < len(reqs) {
		return fmt.Errorf("%w: %s: %d requests, %d slots for decisions and %d for errors", ErrShortOutput, method, len(reqs), len(out), len(errs))
	}
	for i := range reqs {
		if errs[i] == nil {
			errs[i] = r.check(reqs[i].Key, reqs[i].N)
			if errs[i] != nil && r.observe != nil {
				r.observeItem(ctx, kind, &reqs[i], Decision{}, errs[i])
			}
		}
	}
	return r.batch(ctx, reqs, out, errs, send, kind)
}

// tried is the kind of a TryWaitEach item tried by a stage that shapes
// its items (internal/shaping): observed as a wait if it is granted or
// fails, and not at all if it is to wait, since its wait (StartWait) is
// observed then.
const tried EventKind = 0

// observeItem observes a batch's request req, answered with d and err,
// as an Event of kind.
func (r *Router) observeItem(ctx context.Context, kind EventKind, req *Request, d Decision, err error) {
	if kind == tried {
		if err == nil && !d.Allowed {
			return
		}
		kind = EventWait
	}
	r.observed(ctx, Event{Kind: kind, Key: req.Key, N: req.N, Decision: d, Err: err})
}
