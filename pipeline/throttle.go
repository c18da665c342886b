package pipeline

import (
	"cmp"
	"context"
	"sync"

	"github.com/chanlimit/chanlimit"
)

// Throttle passes items on once their key's quota admits them (WaitN
// semantics): each item waits in line with its key's other callers until
// Weight(item) units on key(item) are granted, and comes out then, with
// the grant's Decision. Items of one key come out in the order they were
// read; an item waiting on a busy key never holds back those of other
// keys. An item that cannot be granted comes out at once with the error
// (ErrExceedsCapacity for a weight above its key's capacity,
// ErrKeyTooLong, ErrTooManyKeys, ErrTooManyWaiters, ErrClosed, or
// ErrInvalidCount for a weight below 1).
//
// At most MaxPending items are held at once, counting every item read and
// not yet out: at the cap, Throttle stops reading in, so a busy key slows
// its producer down instead of growing a buffer. When ctx ends, Throttle
// stops reading in, and every item it holds comes out with ctx's error,
// or with its grant if that came first.
//
// Throttle runs one goroutine, and one more per item waiting at once
// (MaxPending at most), each kept for the next item until the stage ends.
func Throttle[T any](ctx context.Context, r *chanlimit.Router, in <-chan T, key func(T) string, opts Options[T]) <-chan Result[T] {
	s := &shaper[T]{
		ctx:      ctx,
		r:        r,
		key:      key,
		opts:     opts,
		max:      cmp.Or(max(opts.MaxPending, 0), DefaultMaxPending),
		out:      make(chan Result[T]),
		jobs:     make(chan job[T]),
		finished: make(chan finished[T]),
		lines:    make(map[string]*[]T),
	}
	go s.run(in)
	return s.out
}

// shaper is the state of one Throttle stage, owned by its run goroutine.
// The items of a key wait in its line, in the stage, while the key's first
// is with a worker, which waits for its grant (WaitN) and hands it back.
type shaper[T any] struct {
	ctx      context.Context
	r        *chanlimit.Router
	key      func(T) string
	opts     Options[T]
	max      int
	out      chan Result[T]
	jobs     chan job[T]      // to the workers with nothing to do
	finished chan finished[T] // from the workers
	workers  sync.WaitGroup

	lines   map[string]*[]T // per key with an item at a worker: the items read after it, in order
	ready   []Result[T]     // out next, in order
	pending int             // items read and not yet out
	working int             // items at a worker
}

// job is an item for a worker to wait for.
type job[T any] struct {
	key  string
	item T
}

// finished is a worker's item, granted or failed.
type finished[T any] struct {
	key string
	res Result[T]
}

func (s *shaper[T]) run(in <-chan T) {
	done := s.ctx.Done()
	for in != nil || s.pending > 0 {
		read := in
		if s.pending >= s.max || s.ctx.Err() != nil {
			read = nil
		}
		var out chan<- Result[T]
		var next Result[T]
		if len(s.ready) > 0 {
			out, next = s.out, s.ready[0]
		}
		select {
		case item, ok := <-read:
			if !ok {
				in = nil
				continue
			}
			s.pending++
			s.take(item)
		case f := <-s.finished:
			s.working--
			s.ready = append(s.ready, f.res)
			s.next(f.key)
		case out <- next:
			s.ready[0] = Result[T]{}
			s.ready = s.ready[1:]
			s.pending--
		case <-done:
			done, in = nil, nil // stop reading; the lines give up as their heads come back
		}
	}
	close(s.jobs)
	s.workers.Wait()
	close(s.out)
}

// take puts an item just read in its key's line, or, if the key has no
// item at a worker, gives it to one.
func (s *shaper[T]) take(item T) {
	k := s.key(item)
	if line, ok := s.lines[k]; ok {
		*line = append(*line, item)
		return
	}
	s.lines[k] = new([]T)
	s.work(k, item)
}

// next gives the next item of key's line to a worker, or closes the line.
// Once ctx has ended, the items of the line come out after its head, in
// order, with ctx's error.
func (s *shaper[T]) next(k string) {
	line := s.lines[k]
	if err := s.ctx.Err(); err != nil {
		for _, item := range *line {
			s.ready = append(s.ready, Result[T]{Item: item, Err: err})
		}
		*line = (*line)[:0]
	}
	if len(*line) == 0 {
		delete(s.lines, k)
		return
	}
	item := (*line)[0]
	var zero T
	(*line)[0] = zero
	*line = (*line)[1:]
	s.work(k, item)
}

// work hands item to a worker with nothing to do, or starts one.
func (s *shaper[T]) work(k string, item T) {
	s.working++
	j := job[T]{k, item}
	select {
	case s.jobs <- j:
	default:
		s.workers.Add(1)
		go s.worker(j)
	}
}

// worker waits for its item's grant and hands it back, then for the next
// item, until the stage ends.
func (s *shaper[T]) worker(j job[T]) {
	defer s.workers.Done()
	for ok := true; ok; j, ok = <-s.jobs {
		res := Result[T]{Item: j.item}
		var n int
		if n, res.Err = s.opts.weight(j.item); res.Err == nil {
			res.Decision, res.Err = s.r.WaitN(s.ctx, j.key, n)
		}
		s.finished <- finished[T]{j.key, res}
	}
}
