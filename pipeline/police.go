package pipeline

import (
	"cmp"
	"context"
	"errors"
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
// Police runs one goroutine. Its output has room for a batch.
func Police[T any](ctx context.Context, r *chanlimit.Router, in <-chan T, key func(T) string, opts Options[T]) <-chan Result[T] {
	size := cmp.Or(max(opts.MaxBatch, 0), DefaultMaxBatch)
	p := &policer[T]{
		ctx:  ctx,
		r:    r,
		key:  key,
		opts: opts,
		max:  size,
		out:  make(chan Result[T], size), // a batch goes out without a hand-off per item
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
	reqs    []chanlimit.Request  // the requests of those with a valid weight
	at      []int                // the index in results of each request
	ds      []chanlimit.Decision // AllowBatch's answers
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

// add adds item to the batch: as a request, if its weight is valid, and
// otherwise with its error.
func (p *policer[T]) add(item T) {
	n, err := p.opts.weight(item)
	p.results = append(p.results, Result[T]{Item: item, Err: err})
	if err == nil {
		p.reqs = append(p.reqs, chanlimit.Request{Key: p.key(item), N: n})
		p.at = append(p.at, len(p.results)-1)
	}
}

// decide decides the batch's requests with one AllowBatch, and writes each
// answer into its item's Result.
func (p *policer[T]) decide() {
	if len(p.reqs) == 0 {
		return
	}
	p.ds = slices.Grow(p.ds[:0], len(p.reqs))[:len(p.reqs)]
	err := p.r.AllowBatch(p.ctx, p.reqs, p.ds)
	switch {
	case errors.Is(err, chanlimit.ErrInvalidCount) || errors.Is(err, chanlimit.ErrKeyTooLong):
		// A request the router checks before it sends any (a key too
		// long) fails the whole batch: decide each on its own.
		for k, req := range p.reqs {
			res := &p.results[p.at[k]]
			res.Decision, res.Err = p.r.AllowN(p.ctx, req.Key, req.N)
		}
	default:
		for k, d := range p.ds {
			res := &p.results[p.at[k]]
			switch {
			case d.Limit > 0: // decided
				res.Decision = d
			case err != nil && (errors.Is(err, p.ctx.Err()) || errors.Is(err, chanlimit.ErrClosed)):
				res.Err = err // not decided: ctx ended or the router closed first
			default:
				// Refused by its partition (AllowBatch says only why
				// the first was): ask it alone for its own error. It
				// took nothing, so asking again decides it once.
				res.Decision, res.Err = p.r.AllowN(p.ctx, p.reqs[k].Key, p.reqs[k].N)
			}
		}
	}
	clear(p.reqs)
	p.reqs, p.at = p.reqs[:0], p.at[:0]
}
