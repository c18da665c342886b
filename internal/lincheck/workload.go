package lincheck

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// Target is a router as a Workload calls it: *chanlimit.Router.
type Target interface {
	AllowN(ctx context.Context, key string, n int) (chanlimit.Decision, error)
	Peek(ctx context.Context, key string, n int) (chanlimit.Decision, error)
	Refund(ctx context.Context, key string, n int) error
	Reset(ctx context.Context, key string) error
	WaitN(ctx context.Context, key string, n int) (chanlimit.Decision, error)
	AllowEach(ctx context.Context, reqs []chanlimit.Request, out []chanlimit.Decision, errs []error) error
	Hold(ctx context.Context, key string, d time.Duration) error
}

// Workload is calls of many goroutines on routers that share a fake
// clock, which one more goroutine moves meanwhile: AllowN, Peek, Refund,
// Reset, WaitN, batches (AllowEach) and, if asked, Hold on a few keys,
// some of whose callers leave (their ctx ends) while they wait for the
// answer.
type Workload struct {
	Routers []Target
	// Waiters are the routers whose callers call WaitN (nil: all). With
	// a Store a line is its router's own (the others' requests do not
	// queue behind it), so a router whose callers wait should be asked
	// nothing that its line refuses: AllowN, Peek or a batch.
	Waiters  []int
	Clock    *clock.Fake
	Origin   time.Time // the routers' timeline starts here
	Keys     []string
	Capacity int // the largest n asked
	Clients  int // goroutines per router
	Ops      int // calls per goroutine
	// The clock moves by up to Step at a time, in whole Quantums (a
	// Store's times are whole microseconds).
	Step, Quantum time.Duration
	Leave         float64 // the share of calls whose ctx ends while they run
	// Pace is the most calls made between two moves of the clock, when
	// some caller does not wait (at least 4): the fewer moves a call
	// spans, the fewer instants it may have been decided at, and the
	// less the checker searches.
	Pace  int
	Store bool
	Seed  uint64

	// Hold is the share of calls that are Holds (0, the zero value:
	// none), each for up to HoldFor (0: 4 Steps), in whole Quantums; one
	// in eight for 0 or less, which changes nothing. In memory only: the
	// model does not state a Store's holds yet (StoreHold), and Run fails
	// a Workload with a Store that asks for them.
	Hold    float64
	HoldFor time.Duration

	// History records the calls: nil for a new one. (A Store wrapped by
	// its ObserveStore needs it before the routers are made.)
	History *History

	done    *atomic.Int64 // calls made
	waiting *atomic.Int64 // callers in WaitN
}

// stallMoves is how many times the clock moves, every caller waiting and
// none released, before Run calls it a stall: a waiter is released once
// the clock reaches its turn.
const stallMoves = 200

// catchUp bounds the yields the clock waits for the partitions after a
// move.
const catchUp = 100_000

// Run runs w and returns its history. A call's error other than its
// ctx's or ErrStoreUnavailable fails t.
func (w Workload) Run(t testing.TB) *History {
	t.Helper()
	h := w.History
	if h == nil {
		h = NewHistory(w.Clock, w.Origin, w.Store)
	}
	w.done, w.waiting = new(atomic.Int64), new(atomic.Int64)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var running atomic.Int64
	var wg, helpers sync.WaitGroup
	errs := make(chan error, len(w.Routers)*w.Clients)
	for r := range w.Routers {
		for c := range w.Clients {
			cl := h.Client()
			rng := rand.New(rand.NewPCG(w.Seed, uint64(r*1000+c)))
			running.Add(1)
			wg.Go(func() {
				defer running.Add(-1)
				if err := w.client(ctx, h, cl, r, rng, &helpers); err != nil {
					errs <- err
					stop()
				}
			})
		}
	}
	// The clock moves once the callers have made a few calls since it
	// last moved, or once every caller still running waits (WaitN), so
	// that time passes at about the pace of the calls, whatever the
	// scheduler does. After a move while every caller waits, it lets the
	// partitions catch up (a caller returns, or a line's timer is set
	// again) before it moves on: a partition the scheduler has not run
	// yet has not seen its timer fire.
	cl := h.Client()
	rng := rand.New(rand.NewPCG(w.Seed, 1<<40))
	limit := w.Ops * w.Clients * len(w.Routers) // moves, at most, before the callers still waiting are let go
	stalled := 0                                // moves since a caller returned, every caller waiting
	for moves, last := 0, int64(0); running.Load() > 0; {
		step := w.Step
		all := w.waiting.Load() >= running.Load()
		if d := w.done.Load(); all {
			step *= 4 // every caller waits: time comes to them sooner
			if d != last {
				stalled, last = 0, d
			} else if stalled++; stalled == stallMoves {
				t.Errorf("lincheck: the clock moved %d times, to %v, every caller waiting, and none was released", stallMoves, w.Clock.Since(w.Origin))
			}
		} else if d-last < 1+rng.Int64N(int64(max(w.Pace, 4))) {
			runtime.Gosched()
			continue
		} else {
			last = d
		}
		if moves++; moves == limit {
			stop()
		}
		cl.Advance(time.Duration(1+rng.Int64N(int64(step/w.Quantum))) * w.Quantum)
		for i := 0; all && i < catchUp && w.done.Load() == last && w.Clock.Waiters() == 0; i++ {
			runtime.Gosched()
		}
	}
	wg.Wait()
	helpers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return h
}

// client makes w.Ops calls on router r, recording them in cl.
func (w Workload) client(ctx context.Context, h *History, cl *Client, r int, rng *rand.Rand, helpers *sync.WaitGroup) error {
	tg := w.Routers[r]
	waits := w.Waiters == nil || slices.Contains(w.Waiters, r)
	for range w.Ops {
		if ctx.Err() != nil {
			return nil
		}
		key := w.Keys[rng.IntN(len(w.Keys))]
		n := 1 + rng.IntN(w.Capacity)
		cctx, cancel := context.WithCancel(ctx)
		if rng.Float64() < w.Leave {
			yields := rng.IntN(8)
			helpers.Go(func() {
				for range yields {
					runtime.Gosched()
				}
				cancel()
			})
		}
		var err error
		hold := w.Hold > 0 && rng.Float64() < w.Hold // no draw without: the other calls' draws stay as they were
		pick := rng.IntN(100)
		if waits && w.Store && w.Waiters != nil {
			// A router whose callers wait, with a Store: nothing its
			// line would refuse (see Waiters).
			switch {
			case pick < 70:
				pick = 0 // wait
			case pick < 90:
				pick = 72 // refund
			default:
				pick = 92 // reset
			}
		}
		switch {
		case hold:
			err = w.hold(cctx, cl, r, key, rng)
		case waits && pick < 25:
			err = w.wait(cctx, h, cl, r, key, n)
		case pick < 45:
			err = w.allow(cctx, h, cl, r, key, n, Allow)
		case pick < 60:
			err = w.allow(cctx, h, cl, r, key, n, Peek)
		case pick < 72:
			err = w.batch(cctx, h, cl, r, rng)
		case pick < 92:
			call := cl.Begin()
			err = tg.Refund(cctx, key, n)
			err = note(cl, call, Input{Kind: Refund, Key: key, N: n, Router: r}, Output{}, err)
		default:
			call := cl.Begin()
			err = tg.Reset(cctx, key)
			err = note(cl, call, Input{Kind: Reset, Key: key, Router: r}, Output{}, err)
		}
		cancel()
		w.done.Add(1)
		if err != nil {
			return err
		}
	}
	return nil
}

// note ends call with out, its outcome told by err, and returns err if
// no outcome tells it.
func note(cl *Client, call Call, in Input, out Output, err error) error {
	return noteAll(cl, call, []Input{in}, []Output{out}, []error{err})
}

// noteAll ends call as the operations ins, with outs, each's outcome
// told by its error, all with the call's span; it returns the first error
// that tells no outcome, recording nothing then.
func noteAll(cl *Client, call Call, ins []Input, outs []Output, errs []error) error {
	for i, err := range errs {
		o, ok := outcome(err)
		if !ok {
			return err
		}
		outs[i].Outcome, outs[i].Err = o, err
		if o != Answered {
			outs[i].D, outs[i].Ds = chanlimit.Decision{}, nil
		}
	}
	cl.EndAll(call, ins, outs)
	return nil
}

// outcome returns the outcome err tells, and false for an error that
// tells none (a defect, or a workload's mistake).
func outcome(err error) (Outcome, bool) {
	switch {
	case err == nil:
		return Answered, true
	case errors.Is(err, chanlimit.ErrStoreUnavailable): // first: it may wrap a trip's ended ctx
		return Unknown, true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Left, true
	}
	return 0, false
}

func (w Workload) allow(ctx context.Context, h *History, cl *Client, r int, key string, n int, kind Kind) error {
	in := Input{Kind: kind, Key: key, N: n, Router: r}
	if kind == Allow {
		in.ID = h.ID()
	}
	call := cl.Begin()
	var d chanlimit.Decision
	var err error
	if kind == Allow {
		d, err = w.Routers[r].AllowN(ctx, key, n)
	} else {
		d, err = w.Routers[r].Peek(ctx, key, n)
	}
	return note(cl, call, in, Output{D: d}, err)
}

// wait calls WaitN: in memory, a Join and its Done; with a Store, a Wait.
func (w Workload) wait(ctx context.Context, h *History, cl *Client, r int, key string, n int) error {
	id := h.ID()
	call := cl.Begin()
	w.waiting.Add(1)
	d, err := w.Routers[r].WaitN(ctx, key, n)
	w.waiting.Add(-1)
	if w.Store {
		return note(cl, call, Input{Kind: Wait, Key: key, N: n, ID: id, Router: r}, Output{D: d}, err)
	}
	ins := []Input{{Kind: Join, Key: key, N: n, ID: id, Router: r}, {Kind: Done, Key: key, N: n, ID: id, Router: r}}
	return noteAll(cl, call, ins, []Output{{D: d}, {D: d}}, []error{err, err}) // the Join knows what its Done returned: see wait
}

// hold calls Hold on key, for up to w.HoldFor, or for nothing (0 or
// less) one time in eight.
func (w Workload) hold(ctx context.Context, cl *Client, r int, key string, rng *rand.Rand) error {
	most := w.HoldFor
	if most <= 0 {
		most = 4 * w.Step
	}
	d := time.Duration(1+rng.Int64N(int64(most/w.Quantum))) * w.Quantum
	if rng.IntN(8) == 0 {
		d = -time.Duration(rng.IntN(2)) * w.Quantum
	}
	call := cl.Begin()
	err := w.Routers[r].Hold(ctx, key, d)
	return note(cl, call, Input{Kind: Hold, Key: key, For: d, Router: r}, Output{}, err)
}

// batch calls AllowEach on up to four requests: each key's items are
// one operation in memory (a partition decides them in one message) and
// each item one through a Store (its items may go in several calls).
func (w Workload) batch(ctx context.Context, h *History, cl *Client, r int, rng *rand.Rand) error {
	reqs := make([]chanlimit.Request, 1+rng.IntN(4))
	for i := range reqs {
		reqs[i] = chanlimit.Request{Key: w.Keys[rng.IntN(len(w.Keys))], N: 1 + rng.IntN(w.Capacity)}
	}
	out := make([]chanlimit.Decision, len(reqs))
	errs := make([]error, len(reqs))
	call := cl.Begin()
	err := w.Routers[r].AllowEach(ctx, reqs, out, errs)
	if _, ok := outcome(err); !ok {
		return err
	}
	var ins []Input
	var outs []Output
	var es []error
	if w.Store {
		for i, req := range reqs {
			e := errs[i]
			if e == nil && out[i] == (chanlimit.Decision{}) {
				e = err // not decided: its caller left
			}
			ins = append(ins, Input{Kind: Allow, Key: req.Key, N: req.N, ID: h.ID(), Router: r})
			outs, es = append(outs, Output{D: out[i]}), append(es, e)
		}
		return noteAll(cl, call, ins, outs, es)
	}
	var keys []string
	for _, req := range reqs {
		if !slices.Contains(keys, req.Key) {
			keys = append(keys, req.Key)
		}
	}
	for _, key := range keys {
		in := Input{Kind: Batch, Key: key, Router: r}
		var o Output
		var e error
		for i, req := range reqs {
			if req.Key != key {
				continue
			}
			in.Ns = append(in.Ns, req.N)
			o.Ds = append(o.Ds, out[i])
			if errs[i] != nil {
				e = errs[i]
			}
		}
		if e == nil && o.Ds[0] == (chanlimit.Decision{}) {
			e = err // its partition's part was not decided: its caller left
		}
		ins, outs, es = append(ins, in), append(outs, o), append(es, e)
	}
	return noteAll(cl, call, ins, outs, es)
}

// PolicySets are the sets of policies the linearizability checks run
// under, by name: each algorithm alone, and several with a dry-run one.
func PolicySets() map[string][]chanlimit.Policy {
	sets := map[string][]chanlimit.Policy{}
	for _, alg := range []string{"token_bucket", "gcra", "leaky_bucket"} {
		sets[alg] = []chanlimit.Policy{{Name: "p", Algorithm: alg, Limit: 10, Window: time.Second, Burst: 5}}
	}
	for _, alg := range []string{"sliding_window_log", "sliding_window_counter", "fixed_window"} {
		sets[alg] = []chanlimit.Policy{{Name: "p", Algorithm: alg, Limit: 5, Window: 500 * time.Millisecond}}
	}
	sets["several"] = []chanlimit.Policy{
		{Name: "second", Algorithm: "token_bucket", Limit: 10, Window: time.Second, Burst: 5},
		{Name: "window", Algorithm: "sliding_window_counter", Limit: 8, Window: 2 * time.Second},
		{Name: "planned", Algorithm: "fixed_window", Limit: 4, Window: time.Second, DryRun: true},
	}
	return sets
}
