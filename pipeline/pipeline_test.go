package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/pipeline"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// event is an item of the tests' streams: Units on Key, numbered.
type event struct {
	Key   string
	Seq   int
	Units int
}

func keyOf(e event) string { return e.Key }

var weighted = pipeline.Options[event]{Weight: func(e event) int { return e.Units }}

// newRouter returns a router on a fake clock, closed when the test ends.
func newRouter(t *testing.T, cfg chanlimit.Config) (*chanlimit.Router, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	cfg.Clock = clk
	r, err := chanlimit.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r, clk
}

// feed returns a channel that yields events, then is closed.
func feed(events ...event) <-chan event {
	in := make(chan event, len(events))
	for _, e := range events {
		in <- e
	}
	close(in)
	return in
}

// ready returns the results out has ready now, and whether it is closed.
func ready(out <-chan pipeline.Result[event]) (got []pipeline.Result[event], closed bool) {
	synctest.Wait()
	for {
		select {
		case res, ok := <-out:
			if !ok {
				return got, true
			}
			got = append(got, res)
			synctest.Wait() // the stage may have more once this one is out
		default:
			return got, false
		}
	}
}

// seqs returns the Seq of each result.
func seqs(rs []pipeline.Result[event]) []int {
	var s []int
	for _, r := range rs {
		s = append(s, r.Item.Seq)
	}
	return s
}

func TestThrottleShapesEachKeyInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		out := pipeline.Throttle(context.Background(), r, feed(
			event{"a", 1, 1}, event{"a", 2, 1}, event{"b", 3, 1}, event{"a", 4, 1}, event{"b", 5, 1},
		), keyOf, pipeline.Options[event]{})
		steps := []struct {
			at   time.Duration
			want []int // out by then, per key in order
		}{
			{0, []int{1, 3}},
			{time.Second - 1, nil},
			{time.Second, []int{2, 5}},
			{2 * time.Second, []int{4}},
		}
		var now time.Duration
		for i, s := range steps {
			clk.Advance(s.at - now)
			now = s.at
			got, closed := ready(out)
			assert.ElementsMatch(t, s.want, seqs(got), "step %d at %v", i, s.at)
			assert.Equal(t, i == len(steps)-1, closed, "step %d: closed once every item is out", i)
			for _, res := range got {
				require.NoError(t, res.Err)
				assert.True(t, res.Decision.Allowed)
			}
		}
	})
}

// TestThrottleWaitsWithNoGoroutinePerItem: 500 items waiting at once, on
// 500 keys, cost the stage no goroutine more than one waiting: they wait
// in their keys' lines in the router. Before, each had a worker goroutine.
func TestThrottleWaitsWithNoGoroutinePerItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Partitions: 2})
		const keys = 500
		in := make(chan event, 2*keys)
		out := pipeline.Throttle(context.Background(), r, in, keyOf, pipeline.Options[event]{})
		for i := range keys {
			in <- event{fmt.Sprint(i), i, 1} // granted
		}
		got, _ := ready(out)
		require.Len(t, got, keys)
		in <- event{"0", keys, 1}
		_, _ = ready(out)
		one := runtime.NumGoroutine()
		for i := 1; i < keys; i++ {
			in <- event{fmt.Sprint(i), keys + i, 1} // waits a second
		}
		got, _ = ready(out)
		assert.Empty(t, got)
		st, err := r.Stats(context.Background())
		require.NoError(t, err)
		assert.Equal(t, keys, st.Waiting)
		// NumGoroutine counts the process's, and another test's may end
		// meanwhile: a bound, far below a goroutine per item.
		assert.Less(t, runtime.NumGoroutine()-one, 5, "as many goroutines with 500 items waiting as with one")
		clk.Advance(time.Second)
		got, _ = ready(out)
		assert.Len(t, got, keys)
		close(in)
		_, closed := ready(out)
		assert.True(t, closed)
	})
}

func TestThrottleNeverHoldsBackOtherKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour})
		in := make(chan event)
		out := pipeline.Throttle(context.Background(), r, in, keyOf, pipeline.Options[event]{})
		in <- event{"busy", 0, 1} // granted
		in <- event{"busy", 1, 1} // waits an hour
		in <- event{"busy", 2, 1} // behind it
		got, _ := ready(out)
		assert.Equal(t, []int{0}, seqs(got))
		for i := 3; i < 10; i++ {
			in <- event{fmt.Sprint("free", i), i, 1}
			got, _ := ready(out)
			assert.Equal(t, []int{i}, seqs(got), "not held back by busy")
		}
		close(in)
		_, closed := ready(out)
		assert.False(t, closed, "two items still wait")
		r.Close()
		got, closed = ready(out)
		assert.True(t, closed)
		require.Len(t, got, 2)
		for _, res := range got {
			assert.ErrorIs(t, res.Err, chanlimit.ErrClosed)
		}
		assert.Equal(t, []int{1, 2}, seqs(got))
	})
}

func TestThrottleBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		in := make(chan event)
		var sent atomic.Int64
		go func() {
			defer close(in)
			for i := range 20 {
				in <- event{"k", i, 1}
				sent.Add(1)
			}
		}()
		out := pipeline.Throttle(context.Background(), r, in, keyOf, pipeline.Options[event]{MaxPending: 3})
		synctest.Wait()
		// The first is granted and out, in the output's room (3, as
		// MaxPending is); the next 3 are held, and in is read no further.
		assert.Equal(t, int64(4), sent.Load())
		var seq []int
		for len(seq) < 20 {
			got, _ := ready(out)
			seq = append(seq, seqs(got)...)
			assert.LessOrEqual(t, sent.Load()-int64(len(seq)), int64(3+3), "never more than MaxPending held, and the output's room")
			clk.Advance(time.Second)
		}
		for i := range seq {
			assert.Equal(t, i, seq[i])
		}
		_, closed := ready(out)
		assert.True(t, closed)
	})
}

func TestThrottleContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		in := make(chan event, 10)
		for i := range 4 {
			in <- event{"k", i, 1}
		}
		in <- event{"j", 4, 1}
		out := pipeline.Throttle(ctx, r, in, keyOf, pipeline.Options[event]{})
		got, _ := ready(out)
		assert.ElementsMatch(t, []int{0, 4}, seqs(got))
		clk.Advance(time.Second)
		got, _ = ready(out)
		assert.Equal(t, []int{1}, seqs(got))
		in <- event{"k", 5, 1} // read before ctx ends
		synctest.Wait()
		cancel()
		synctest.Wait()        // the stage has seen ctx end
		in <- event{"k", 6, 1} // never read
		got, closed := ready(out)
		assert.True(t, closed, "closed without in being closed")
		assert.Equal(t, []int{2, 3, 5}, seqs(got), "held items, in order")
		for _, res := range got {
			assert.ErrorIs(t, res.Err, context.Canceled)
		}
		assert.Len(t, in, 1, "the item sent after ctx ended stays in in")
	})
}

func TestThrottleErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second, MaxKeyBytes: 8})
		out := pipeline.Throttle(context.Background(), r, feed(
			event{"k", 0, 3}, event{"k", 1, 0}, event{strings.Repeat("x", 9), 2, 1}, event{"k", 3, 2},
		), keyOf, weighted)
		got, closed := ready(out)
		require.True(t, closed)
		require.Len(t, got, 4)
		want := map[int]error{0: chanlimit.ErrExceedsCapacity, 1: chanlimit.ErrInvalidCount, 2: chanlimit.ErrKeyTooLong, 3: nil}
		for _, res := range got {
			if want[res.Item.Seq] == nil {
				assert.NoError(t, res.Err)
				assert.True(t, res.Decision.Allowed)
				continue
			}
			assert.ErrorIs(t, res.Err, want[res.Item.Seq], "item %d", res.Item.Seq)
		}
	})
}

func TestPoliceDecidesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second, MaxKeyBytes: 8})
		out := pipeline.Police(context.Background(), r, feed(
			event{"a", 0, 2}, event{"b", 1, 1}, event{"a", 2, 2}, event{"a", 3, 1},
			event{"a", 4, 4}, event{strings.Repeat("x", 9), 5, 1}, event{"b", 6, 0}, event{"b", 7, 2},
		), keyOf, pipeline.Options[event]{Weight: weighted.Weight, MaxBatch: 5})
		got, closed := ready(out)
		require.True(t, closed)
		assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, seqs(got), "in input order")
		allowed := []bool{true, true, false, true, false, false, false, true}
		errs := []error{nil, nil, nil, nil, chanlimit.ErrExceedsCapacity, chanlimit.ErrKeyTooLong, chanlimit.ErrInvalidCount, nil}
		for i, res := range got {
			assert.Equal(t, allowed[i], res.Decision.Allowed, "item %d", i)
			if errs[i] == nil {
				assert.NoError(t, res.Err, "item %d", i)
			} else {
				assert.ErrorIs(t, res.Err, errs[i], "item %d", i)
			}
		}
		assert.Equal(t, time.Second/3+1, got[2].Decision.RetryAfter, "a denied item carries its wait, rounded up")
	})
}

// TestPoliceMatchesAllowNOneByOne: over random streams, Police decides
// each item exactly as AllowN would, one by one in input order, on a twin
// router; every item comes out once.
func TestPoliceMatchesAllowNOneByOne(t *testing.T) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			cfg := chanlimit.Config{Algorithm: chanlimit.RegisteredAlgorithms()[seed%6], Limit: 5, Window: time.Second, MaxKeys: 3, Partitions: 1} // one partition: the twin holds the same keys
			r, clk := newRouter(t, cfg)
			twin, twinClk := newRouter(t, cfg)
			in := make(chan event, 16) // a round's items, sent before any is read back
			out := pipeline.Police(context.Background(), r, in, keyOf, pipeline.Options[event]{Weight: weighted.Weight, MaxBatch: 1 + rng.IntN(8)})
			for round := range 20 {
				var sent []event
				for i := range 1 + rng.IntN(12) {
					e := event{fmt.Sprint("k", rng.IntN(8)), round*100 + i, 1 + rng.IntN(3)}
					sent = append(sent, e)
					in <- e
				}
				got, _ := ready(out)
				require.Equal(t, seqs(resultsOf(sent)), seqs(got), "round %d: each item once, in order", round)
				for i, e := range sent {
					d, err := twin.AllowN(context.Background(), e.Key, e.Units)
					assert.Equal(t, d, got[i].Decision, "round %d item %d", round, i)
					if err == nil {
						assert.NoError(t, got[i].Err)
					} else {
						assert.ErrorIs(t, got[i].Err, errorsRoot(err))
					}
				}
				step := time.Duration(rng.IntN(400)) * time.Millisecond
				clk.Advance(step)
				twinClk.Advance(step)
			}
			close(in)
			_, closed := ready(out)
			assert.True(t, closed)
		})
	}
}

func resultsOf(es []event) []pipeline.Result[event] {
	rs := make([]pipeline.Result[event], len(es))
	for i, e := range es {
		rs[i].Item = e
	}
	return rs
}

// errorsRoot returns the sentinel err wraps, of those Police may return.
func errorsRoot(err error) error {
	for _, s := range []error{chanlimit.ErrExceedsCapacity, chanlimit.ErrTooManyKeys, chanlimit.ErrKeyTooLong} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

func TestPoliceContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		in := make(chan event, 4)
		out := pipeline.Police(ctx, r, in, keyOf, pipeline.Options[event]{})
		in <- event{"k", 0, 1}
		in <- event{"k", 1, 1}
		got, _ := ready(out)
		require.Equal(t, []int{0, 1}, seqs(got))
		assert.True(t, got[0].Decision.Allowed)
		assert.False(t, got[1].Decision.Allowed)
		cancel()
		synctest.Wait() // the stage has seen ctx end
		in <- event{"k", 2, 1}
		got, closed := ready(out)
		assert.True(t, closed)
		assert.Empty(t, got, "nothing held when ctx ended: the item sent after is never read")
	})
}

// TestThrottleRandomStreams: over random streams of weighted items on a
// few keys, with the clock moving in random steps, every item comes out
// once, those of a key in the order they were sent, and each key is
// granted, by every instant, no more than its bucket allows (Burst plus
// Limit per Window since the start), and in the end everything.
func TestThrottleRandomStreams(t *testing.T) {
	for seed := range uint64(10) {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			const limit, burst = 4, 6 // per second
			r, clk := newRouter(t, chanlimit.Config{Limit: limit, Window: time.Second, Burst: burst})
			in := make(chan event)
			out := pipeline.Throttle(context.Background(), r, in, keyOf, pipeline.Options[event]{Weight: weighted.Weight, MaxPending: 1 + rng.IntN(12)})
			var sent []event
			go func() {
				defer close(in)
				for i := range 80 {
					e := event{fmt.Sprint("k", rng.IntN(4)), i, 1 + rng.IntN(3)}
					in <- e
					sent = append(sent, e) // read by the test only after in is closed
				}
			}()
			granted := map[string]int{}
			last := map[string]int{}
			var got int
			var now time.Duration
			for closed := false; !closed; {
				var rs []pipeline.Result[event]
				rs, closed = ready(out)
				for _, res := range rs {
					require.NoError(t, res.Err)
					require.True(t, res.Decision.Allowed)
					k := res.Item.Key
					if prev, ok := last[k]; ok {
						require.Less(t, prev, res.Item.Seq, "%s out of order", k)
					}
					last[k] = res.Item.Seq
					granted[k] += res.Item.Units
					require.LessOrEqual(t, granted[k], burst+int(int64(limit)*int64(now)/int64(time.Second)), "%s at %v", k, now)
					got++
				}
				step := time.Duration(rng.IntN(700)) * time.Millisecond
				clk.Advance(step)
				now += step
			}
			assert.Equal(t, 80, got, "each item once")
			units := 0
			for _, e := range sent {
				units += e.Units
			}
			total := 0
			for _, g := range granted {
				total += g
			}
			assert.Equal(t, units, total)
		})
	}
}

// TestThrottleLeakyBucketTurns: under leaky_bucket an item comes out at
// its turn, not when it is admitted to the queue.
func TestThrottleLeakyBucketTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Algorithm: "leaky_bucket", Limit: 1, Window: time.Second, Burst: 3})
		out := pipeline.Throttle(context.Background(), r, feed(
			event{"k", 0, 1}, event{"k", 1, 1}, event{"k", 2, 1}, event{"j", 3, 1}, event{"k", 4, 1},
		), keyOf, pipeline.Options[event]{})
		got, _ := ready(out)
		assert.ElementsMatch(t, []int{0, 3}, seqs(got), "the first of each key, at once")
		for _, want := range []int{1, 2, 4} {
			clk.Advance(time.Second - time.Nanosecond)
			got, _ = ready(out)
			assert.Empty(t, got, "1ns before %d's turn", want)
			clk.Advance(time.Nanosecond)
			got, _ = ready(out)
			require.Equal(t, []int{want}, seqs(got))
			assert.Zero(t, got[0].Decision.Delay)
		}
		_, closed := ready(out)
		assert.True(t, closed)
	})
}
