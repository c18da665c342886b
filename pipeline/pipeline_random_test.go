package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/pipeline"
)

// allowedErrs are the errors a stage may pass an item on with.
var allowedErrs = []error{
	chanlimit.ErrExceedsCapacity, chanlimit.ErrKeyTooLong, chanlimit.ErrTooManyKeys, chanlimit.ErrClosed,
	chanlimit.ErrInvalidCount, chanlimit.ErrTooManyWaiters, context.Canceled, context.DeadlineExceeded,
}

func knownErr(err error) bool {
	for _, e := range allowedErrs {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// checkStage checks a stage's results against what was read: each once,
// per key in order, a nil error only with a grant (Throttle) or a
// decision (Police), every error one of the documented ones.
func checkStage(t *testing.T, name string, throttle bool, read []event, got []pipeline.Result[event]) {
	t.Helper()
	require.Len(t, got, len(read), "%s: each item read comes out once", name)
	seen := map[int]bool{}
	last := map[string]int{}
	for _, res := range got {
		e := res.Item
		require.False(t, seen[e.Seq], "%s: %d twice", name, e.Seq)
		seen[e.Seq] = true
		if throttle {
			if p, ok := last[e.Key]; ok {
				require.Less(t, p, e.Seq, "%s: key %q out of order", name, e.Key)
			}
			last[e.Key] = e.Seq
		}
		if res.Err == nil {
			require.Positive(t, res.Decision.Limit, "%s: %d out with no error and no decision", name, e.Seq)
			if throttle {
				require.True(t, res.Decision.Allowed, "%s: %d out with no error and no grant", name, e.Seq)
				require.Zero(t, res.Decision.Delay, "%s: %d out before its turn", name, e.Seq)
			}
		} else {
			require.True(t, knownErr(res.Err), "%s: %d: unexpected error %v", name, e.Seq, res.Err)
			require.False(t, res.Decision.Allowed, "%s: %d: an error with a grant", name, e.Seq)
		}
	}
	for _, e := range read {
		require.True(t, seen[e.Seq], "%s: %d read, never out", name, e.Seq)
	}
}

// TestRandomMixed: random configs (algorithms, several policies,
// MaxWaiters, MaxKeys, long keys), two Throttles and a Police on one
// router, outside WaitN callers on the same keys, SetOverride mid-stream,
// random clock steps, and a random end: ctx cancelled, router closed, or
// in closed.
func TestRandomMixed(t *testing.T) {
	algs := []string{"token_bucket", "gcra", "leaky_bucket", "sliding_window_log", "fixed_window", "sliding_window_counter"}
	for seed := range uint64(60) {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			pols := []chanlimit.Policy{{Name: "a", Algorithm: algs[rng.IntN(6)], Limit: 2 + rng.IntN(4), Window: time.Second, Burst: 0}}
			if rng.IntN(2) == 0 {
				pols = append(pols, chanlimit.Policy{Name: "b", Algorithm: algs[rng.IntN(6)], Limit: 3 + rng.IntN(6), Window: 3 * time.Second})
			}
			cfg := chanlimit.Config{Policies: pols, MaxWaiters: rng.IntN(3), MaxKeyBytes: 8, Partitions: 1 + rng.IntN(3)}
			if rng.IntN(3) == 0 {
				cfg.MaxKeys = 3 + rng.IntN(3)
			}
			r, clk := newRouter(t, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			key := func(i int) string {
				if rng.IntN(40) == 0 {
					return "much-too-long-key"
				}
				return fmt.Sprint("k", rng.IntN(6))
			}
			type stage struct {
				name     string
				throttle bool
				in       chan event
				out      <-chan pipeline.Result[event]
				read     []event // sent and read (all sent, minus what is left in in)
				sent     []event
				got      []pipeline.Result[event]
			}
			var stages []*stage
			for s := range 3 {
				st := &stage{name: fmt.Sprint("stage", s), throttle: s < 2, in: make(chan event, 200)}
				opts := pipeline.Options[event]{Weight: weighted.Weight, MaxPending: rng.IntN(5), MaxBatch: rng.IntN(4)}
				if st.throttle {
					st.out = pipeline.Throttle(ctx, r, st.in, keyOf, opts)
				} else {
					st.out = pipeline.Police(ctx, r, st.in, keyOf, opts)
				}
				stages = append(stages, st)
			}
			outside, outsideCancel := context.WithCancel(context.Background())
			defer outsideCancel()
			for i := range 4 {
				go r.WaitN(outside, fmt.Sprint("k", i), 1+rng.IntN(2))
			}
			end := rng.IntN(3)
			seq := 0
			for round := range 30 {
				for _, st := range stages {
					for range rng.IntN(4) {
						e := event{key(seq), seq, rng.IntN(12) / 2} // 0: invalid; up to 5: maybe above capacity
						seq++
						st.sent = append(st.sent, e)
						st.in <- e
					}
					got, _ := ready(st.out)
					st.got = append(st.got, got...)
				}
				if round == 10 {
					r.SetOverride(context.Background(), "k1", chanlimit.Policy{Name: "a", Algorithm: "token_bucket", Limit: 1, Window: time.Second})
				}
				if round == 20 {
					go r.WaitN(outside, "k2", 1)
				}
				clk.Advance(time.Duration(rng.IntN(600)) * time.Millisecond)
			}
			switch end {
			case 0:
				cancel()
			case 1:
				r.Close()
				synctest.Wait()
				for _, st := range stages {
					close(st.in)
				}
			case 2:
				for _, st := range stages {
					close(st.in)
				}
				clk.Advance(time.Hour) // everything granted
				for range 20 {
					clk.Advance(time.Hour)
					synctest.Wait()
				}
			}
			// Drain each stage, moving the clock whenever it has nothing
			// ready: a stage may be waiting for a grant to come due, and
			// then no result comes until the clock moves.
			for _, st := range stages {
				for {
					got, closed := ready(st.out)
					st.got = append(st.got, got...)
					if closed {
						break
					}
					clk.Advance(time.Minute)
				}
			}
			outsideCancel()
			for _, st := range stages {
				st.read = st.sent[:len(st.sent)-len(st.in)]
				checkStage(t, fmt.Sprintf("seed %d end %d %s", seed, end, st.name), st.throttle, st.read, st.got)
			}
		})
	}
}

// TestThrottleFrozenExact: frozen clock, several Throttles and outside
// waiters on the same keys; after every stage ends, what each key lost is
// exactly what came out granted, under each algorithm whose Remaining
// tells it (capacity 6).
func TestThrottleFrozenExact(t *testing.T) {
	for _, alg := range []string{"token_bucket", "gcra", "sliding_window_log", "fixed_window"} {
		for seed := range uint64(10) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 5))
				const capacity = 6
				r, _ := newRouter(t, chanlimit.Config{Algorithm: alg, Limit: capacity, Window: time.Hour, MaxWaiters: rng.IntN(3), Partitions: 2})
				ctx, cancel := context.WithCancel(context.Background())
				granted := map[string]int{}
				var outs []<-chan pipeline.Result[event]
				for s := range 3 {
					in := make(chan event, 64)
					for i := range 30 {
						in <- event{fmt.Sprint("k", rng.IntN(3)), s*100 + i, rng.IntN(9)} // 0 and 7, 8 fail
					}
					close(in)
					outs = append(outs, pipeline.Throttle(ctx, r, in, keyOf, pipeline.Options[event]{Weight: weighted.Weight, MaxPending: rng.IntN(6)}))
				}
				type wres struct {
					key string
					n   int
					err error
				}
				wc := make(chan wres, 10)
				for i := range 6 {
					k, n := fmt.Sprint("k", i%3), 1+rng.IntN(3)
					go func() { _, err := r.WaitN(ctx, k, n); wc <- wres{k, n, err} }()
				}
				synctest.Wait()
				all := readThenCancel(outs, cancel)
				for range 6 {
					w := <-wc
					if w.err == nil {
						granted[w.key] += w.n
					}
				}
				for _, res := range all {
					if res.Err == nil {
						require.True(t, res.Decision.Allowed)
						granted[res.Item.Key] += res.Item.Units
					}
				}
				for k := range 3 {
					key := fmt.Sprint("k", k)
					require.LessOrEqual(t, granted[key], capacity, "%s %s", alg, key)
					d, err := r.Peek(context.Background(), key, 1)
					require.NoError(t, err)
					left := d.Remaining
					if d.Allowed {
						left++
					}
					assert.Equal(t, capacity-granted[key], left, "%s %s: what is gone is what came out granted", alg, key)
				}
				st, err := r.Stats(context.Background())
				require.NoError(t, err)
				n := 0
				for _, res := range all {
					if res.Err == nil {
						n++
					}
				}
				assert.LessOrEqual(t, uint64(n), st.Allowed)
				assert.Zero(t, st.Denied, "no deadline: nothing denied (a try left to wait is no denial)")
			})
		}
	}
}

// TestThrottleCancelWhileOutputFull: the reader stops reading; ctx
// ends; then the reader reads everything: every read item comes out once.
func TestThrottleCancelWhileOutputFull(t *testing.T) {
	for _, mp := range []int{1, 2, 3, 70, 200} {
		synctest.Test(t, func(t *testing.T) {
			r, clk := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
			ctx, cancel := context.WithCancel(context.Background())
			in := make(chan event, 300)
			for i := range 300 {
				in <- event{fmt.Sprint("k", i%4), i, 1 + i%7}
			}
			out := pipeline.Throttle(ctx, r, in, keyOf, pipeline.Options[event]{Weight: weighted.Weight, MaxPending: mp})
			synctest.Wait()
			clk.Advance(300 * time.Millisecond)
			synctest.Wait()
			cancel()
			var got []pipeline.Result[event]
			for res := range out {
				got = append(got, res)
			}
			read := make([]event, 0, 300)
			for i := range 300 - len(in) {
				read = append(read, event{fmt.Sprint("k", i%4), i, 1 + i%7})
			}
			checkStage(t, fmt.Sprint("MaxPending ", mp), true, read, got)
			assert.LessOrEqual(t, len(read), mp+min(64, mp), "read at most MaxPending plus the output's room")
		})
	}
}

// TestPoliceRouterClosesMidStream / MaxBatch 1.
func TestPoliceRouterClosesMidStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
		in := make(chan event, 20)
		out := pipeline.Police(context.Background(), r, in, keyOf, pipeline.Options[event]{MaxBatch: 1})
		var sent []event
		for i := range 10 {
			e := event{fmt.Sprint("k", i%2), i, 1}
			sent = append(sent, e)
			in <- e
			if i == 5 {
				synctest.Wait()
				r.Close()
			}
		}
		close(in)
		var got []pipeline.Result[event]
		for res := range out {
			got = append(got, res)
		}
		checkStage(t, "police", false, sent, got)
		assert.ErrorIs(t, got[9].Err, chanlimit.ErrClosed)
	})
}

// TestThrottleDeadline: a ctx deadline the grant cannot meet: the item
// comes out at once with DeadlineExceeded, the next of its key goes on.
func TestThrottleDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Burst: 3})
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		out := pipeline.Throttle(ctx, r, feed(event{"k", 0, 3}, event{"k", 1, 3}, event{"k", 2, 1}, event{"j", 3, 1}), keyOf, weighted)
		got, _ := ready(out)
		require.ElementsMatch(t, []int{0, 1, 3}, seqs(got))
		for _, res := range got {
			if res.Item.Seq == 1 {
				assert.ErrorIs(t, res.Err, context.DeadlineExceeded)
			} else {
				assert.NoError(t, res.Err)
			}
		}
		clk.Advance(time.Second)
		got, closed := ready(out)
		assert.Equal(t, []int{2}, seqs(got))
		assert.True(t, closed)
		st, _ := r.Stats(context.Background())
		assert.Equal(t, uint64(3), st.Allowed)
		assert.Equal(t, uint64(1), st.Denied)
	})
}

// readThenCancel reads what the stages have ready, then ends their ctx
// with cancel and reads each to its close, and returns every result.
func readThenCancel(outs []<-chan pipeline.Result[event], cancel context.CancelFunc) []pipeline.Result[event] {
	var all []pipeline.Result[event]
	for _, out := range outs {
		got, _ := ready(out)
		all = append(all, got...)
	}
	cancel()
	for _, out := range outs {
		for res := range out {
			all = append(all, res)
		}
	}
	return all
}
