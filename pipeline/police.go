package pipeline

import (
	"cmp"
	"context"
	"slices"

	"github.com/chanlimit/chanlimit"
)

// Police decides each item at once and passes it on with its decision,
// allowed or not: it reads the items that are ready, up to MaxBatch, and
// decides them with one Router.AllowBatch, so that a busy stream pays the
// channel round trip to a partition once per batch, not once per item.
// Items come out in the order they were read, a denied one with Allowed
// false (and its RetryAfter); an item that could not be decided comes out
// with the error (ErrExceedsCapacity for a weight above its key's
// capacity, ErrKeyTooLong, ErrTooManyKeys, ErrClosed, or ErrInvalidCount
// for a weight below 1). When ctx ends, Police stops reading in, and the
// items of the batch it holds come out with their decisions or ctx's
// error.
//
// An item whose key or Weight function panics comes out alone with an
// error wrapping ErrPanic; the others are decided as usual.
//
// Police runs one goroutine. Its output has room for min(64, MaxBatch)
// results; its batch grows with the items read, up to MaxBatch, so a large
// MaxBatch costs memory only when that many items are ready at once.
func Police[T any](ctx context.Context, r *chanlimit.Router, in <-chan T, key func(T) string, opts Options[T]) <-chan Result[T] {
	size := cmp.Or(max(opts.MaxBatch, 0), DefaultMaxBatch)
	p := &policer[T]{
		ctx:  ctx,
		r:    r,
		key:  key,
		opts: opts,
		max:  size,
		out:  make(chan Result[T], min(maxOut, size)),
	}
	go p.run(in)
	return p.out
}

// policer is the state of one Police stage, owned by its goroutine; its
// slices are kept from one batch to the next.
type policer[T any] struct {
	ctx  context.Context
	r    *chanlimit.Router
	key  func(T) string
	opts Options[T]
	max  int
	out  chan Result[T]

	results []Result[T]          // the batch's items, in order, with their answers
	at      []int                // the index in results of each request
	ds      []chanlimit.Decision // the answers
	errs    []error              // and the errors
	reqs    []chanlimit.Request  // the requests of the items with a valid weight and key
	culprit error                // the error of the caller's function that step runs, should it panic
}

func (p *policer[T]) run(in <-chan T) {
	defer close(p.out)
	for in != nil && p.ctx.Err() == nil {
		var item T
		var ok bool
		select {
		case item, ok = <-in:
		case <-p.ctx.Done():
			return
		}
		if !ok {
			return
		}
		p.add(item)
	ready: // what else is ready, up to a batch
		for len(p.results) < p.max {
			select {
			case item, ok := <-in:
				if !ok {
					in = nil
					break ready
				}
				p.add(item)
			default:
				break ready
			}
		}
		p.decide()
		for i := range p.results {
			p.out <- p.results[i]
		}
		clear(p.results)
		p.results = p.results[:0]
	}
}

// add adds item to the batch; decide works out its request.
func (p *policer[T]) add(item T) {
	p.results = append(p.results, Result[T]{Item: item})
}

// step works out the request of the batch's item i (for sweep): its
// units and its key, added to reqs; or the error of a Weight below 1.
func (p *policer[T]) step(i int) {
	res := &p.results[i]
	p.culprit = errWeightPanicked
	n, err := p.opts.weigh(res.Item)
	if err != nil {
		res.Err = err
		return
	}
	p.culprit = errKeyPanicked
	k := p.key(res.Item)
	p.reqs = append(p.reqs, chanlimit.Request{Key: k, N: n})
	p.at = append(p.at, i)
}

// panicked fails item i, on which the function step was running
// panicked with v.
func (p *policer[T]) panicked(i int, v any) {
	p.results[i].Err = panicError(p.culprit, v)
}

// decide works out the batch's requests, calling the key and Weight
// functions on every item under one guard (sweep), decides them with one
// round trip per partition (AllowEach: AllowBatch with each request's own
// error), and writes each answer into its item's Result.
func (p *policer[T]) decide() {
	sweep(p, len(p.results))
	if len(p.reqs) == 0 {
		return
	}
	n := len(p.reqs)
	p.ds = slices.Grow(p.ds[:0], n)[:n]
	p.errs = slices.Grow(p.errs[:0], n)[:n]
	clear(p.errs)
	err := p.r.AllowEach(p.ctx, p.reqs, p.ds, p.errs)
	for k := range p.reqs {
		res := &p.results[p.at[k]]
		res.Decision, res.Err = p.ds[k], p.errs[k]
		if res.Err == nil && res.Decision == (chanlimit.Decision{}) { // not decided: ctx ended or the router closed first
			res.Err = err
		}
	}
	clear(p.reqs)
	p.reqs, p.at = p.reqs[:0], p.at[:0]
}
