package pipeline

import (
	"cmp"
	"context"
	"slices"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/internal/shaping"
)

// Throttle passes items on once their key's quota admits them (WaitN
// semantics): each item waits in line with its key's other callers until
// Weight(item) units on key(item) are granted, and comes out then, with
// the grant's Decision. Items of one key come out in the order they were
// read; an item waiting on a busy key never holds back those of other
// keys. An item that cannot be granted comes out at once with the error
// (ErrExceedsCapacity for a weight above its key's capacity,
// ErrKeyTooLong, ErrTooManyKeys, ErrTooManyWaiters, ErrClosed,
// ErrInvalidCount for a weight below 1, or one wrapping ErrPanic if its
// key or Weight function panicked on it).
//
// At most MaxPending items are held at once, counting every item read and
// not yet out: at the cap, Throttle stops reading in, so a busy key slows
// its producer down instead of growing a buffer (and, if it alone fills
// the cap, holds back the items of other keys behind it in in: the bound
// on memory comes first). The output has room for
// min(64, MaxPending) results, which are out: the items read and not yet
// received from the output are at most MaxPending plus that room. When ctx ends, Throttle
// stops reading in, and every item it holds comes out with ctx's error,
// or with its grant if that came first.
//
// Throttle decides the items that need not wait, a key's first at a time,
// in batches: one round trip to each partition for what it has read (as
// Police does), with WaitN's answer for each (granted at once, or a
// failure). An item that must wait waits in its key's line in the router
// (Router.StartWait), with no goroutine and no timer of its own: Throttle
// runs one goroutine, however many items wait. (With MaxPending above
// 1,024, a grant that comes while 1,024 others wait for the stage to take
// them is handed over by a goroutine made for it, since the router never
// waits on a stage: a goroutine per item for a moment, at most.)
func Throttle[T any](ctx context.Context, r *chanlimit.Router, in <-chan T, key func(T) string, opts Options[T]) <-chan Result[T] {
	most := cmp.Or(max(opts.MaxPending, 0), DefaultMaxPending)
	s := &shaper[T]{
		ctx:     ctx,
		tryCtx:  shaping.Context(ctx),
		r:       r,
		key:     key,
		opts:    opts,
		max:     most,
		out:     make(chan Result[T], min(maxOut, most)),
		rung:    make(chan *chanlimit.Ticket, min(most, maxRung)),
		waiting: make(map[*chanlimit.Ticket]T),
		lines:   make(map[string]*[]T),
	}
	go s.run(in)
	return s.out
}

// shaper is the state of one Throttle stage, owned by its run goroutine.
// The items of a key wait in its line, in the stage, while the key's first
// waits in the router's line for the key (its Ticket).
type shaper[T any] struct {
	ctx     context.Context
	tryCtx  context.Context // ctx, marked so that the router observes each item as one wait
	r       *chanlimit.Router
	key     func(T) string
	opts    Options[T]
	max     int
	out     chan Result[T]
	rung    chan *chanlimit.Ticket // the waiting items' Tickets, once answered
	waiting map[*chanlimit.Ticket]T

	lines   map[string]*[]T // per key with an item being decided (to try, or in the router's line): the items read after it, in order
	read    []T             // items read, to key (take)
	trying  []job[T]        // the first item of keys, to try at once
	ready   []Result[T]     // out next, in order
	pending int             // items read and not yet out

	// try's, kept from one batch to the next
	reqs []chanlimit.Request
	ds   []chanlimit.Decision
	errs []error
}

// maxRung is the most answered Tickets rung holds: room for every item
// held, at the default MaxPending.
const maxRung = DefaultMaxPending

// job is an item to try at once, or to wait for: n units on key.
type job[T any] struct {
	key  string
	item T
	n    int
}

func (s *shaper[T]) run(in <-chan T) {
	done := s.ctx.Done()
	for in != nil || s.pending > 0 {
		if len(s.trying) > 0 {
			s.try()
			s.flush()
			continue
		}
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
			s.read = append(s.read, item)
			in = s.readMore(in)
		case tk := <-s.rung:
			res := Result[T]{Item: s.waiting[tk]}
			delete(s.waiting, tk)
			res.Decision, res.Err = tk.Answer()
			s.ready = append(s.ready, res)
			s.next(tk.Key())
		case out <- next:
			s.ready[0] = Result[T]{}
			s.ready = s.ready[1:]
			s.pending--
		case <-done:
			done, in = nil, nil // stop reading; the lines give up as their heads come back
			for tk := range s.waiting {
				tk.Leave(s.ctx.Err()) // it comes back with the error, or its grant if that came first
			}
		}
	}
	close(s.out)
}

// flush sends on the ready items the output has room for.
func (s *shaper[T]) flush() {
	for len(s.ready) > 0 {
		select {
		case s.out <- s.ready[0]:
			s.ready[0] = Result[T]{}
			s.ready = s.ready[1:]
			s.pending--
		default:
			return
		}
	}
}

// maxTry is the most items try decides in one batch.
const maxTry = 64

// readMore takes the items ready in in, within MaxPending and a batch to
// try, and returns in, or nil once it is closed. It keys them (take) a
// run at a time, read (with the item read before it, if any) up to what a
// batch to try has room for.
func (s *shaper[T]) readMore(in <-chan T) <-chan T {
	for {
		for s.pending < s.max && len(s.trying)+len(s.read) < maxTry {
			select {
			case item, ok := <-in:
				if !ok {
					s.take()
					return nil
				}
				s.pending++
				s.read = append(s.read, item)
			default:
				s.take()
				return in
			}
		}
		s.take()
		if s.pending >= s.max || len(s.trying) >= maxTry {
			return in
		}
	}
}

// take puts each item read in its key's line, or, if the key has no item
// being decided, among those to try; an item whose key function panicked
// is ready at once, with its error. The key function runs on the items
// under one guard (sweep).
func (s *shaper[T]) take() {
	sweep(keying[T]{s}, len(s.read))
	clear(s.read)
	s.read = s.read[:0]
}

// keying is take's sweep.
type keying[T any] struct{ s *shaper[T] }

func (k keying[T]) step(i int) {
	s := k.s
	item := s.read[i]
	key := s.key(item)
	if line, ok := s.lines[key]; ok {
		*line = append(*line, item)
		return
	}
	s.lines[key] = new([]T)
	s.trying = append(s.trying, job[T]{key: key, item: item})
}

func (k keying[T]) panicked(i int, v any) {
	k.s.ready = append(k.s.ready, Result[T]{Item: k.s.read[i], Err: panicError(errKeyPanicked, v)})
}

// try decides the items to try with one round trip per partition: those
// granted, or failed, are ready, and their keys' next items are to try;
// the others wait in their keys' lines in the router (work).
func (s *shaper[T]) try() {
	trying := s.trying
	s.reqs, s.errs = s.reqs[:0], s.errs[:0]
	sweep(weighing[T]{s}, len(trying))
	s.ds = slices.Grow(s.ds[:0], len(trying))[:len(trying)]
	err := s.r.TryWaitEach(s.tryCtx, s.reqs, s.ds, s.errs)
	s.trying = s.trying[len(trying):len(trying)] // next adds the keys' next items after these
	for i, j := range trying {
		res := Result[T]{Item: j.item, Decision: s.ds[i], Err: s.errs[i]}
		switch {
		case res.Err == nil && res.Decision == (chanlimit.Decision{}) && err != nil: // not decided: ctx ended or the router closed first
			res.Err = err
		case res.Err == nil && !res.Decision.Allowed: // to wait (or, never decided, for WaitN to decide)
			s.work(job[T]{key: j.key, item: j.item, n: j.n})
			continue
		}
		s.ready = append(s.ready, res)
		s.next(j.key)
	}
	clear(trying)
	clear(s.reqs)
	s.trying = append(trying[:0], s.trying...)
}

// weighing is try's sweep: each item's units, and its request, with the
// error of a weight below 1 or of a Weight that panicked (which
// TryWaitEach passes by).
type weighing[T any] struct{ s *shaper[T] }

func (w weighing[T]) step(i int) {
	s := w.s
	j := &s.trying[i]
	var err error
	j.n, err = s.opts.weigh(j.item)
	s.reqs, s.errs = append(s.reqs, chanlimit.Request{Key: j.key, N: max(j.n, 1)}), append(s.errs, err)
}

func (w weighing[T]) panicked(i int, v any) {
	s := w.s
	j := &s.trying[i]
	j.n = 0
	s.reqs, s.errs = append(s.reqs, chanlimit.Request{Key: j.key, N: 1}), append(s.errs, panicError(errWeightPanicked, v))
}

// next puts the next item of key's line among those to try, or closes the line.
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
	s.trying = append(s.trying, job[T]{key: k, item: item})
}

// work puts j in its key's line in the router, to come back on rung once
// granted or failed; a request that fails before it is in line is ready
// at once.
func (s *shaper[T]) work(j job[T]) {
	tk, err := s.r.StartWait(s.ctx, j.key, j.n, s.rung)
	if err != nil {
		s.ready = append(s.ready, Result[T]{Item: j.item, Err: err})
		s.next(j.key)
		return
	}
	s.waiting[tk] = j.item
}
