package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/pipeline"
)

// --- a rule that can be held inside AllowN, to open the window between a
// partition taking a request and answering it.

// gateRule is a plain counter: capacity units, never refilled. While
// gate is set, AllowN waits on it (after telling entered).
type gateRule struct{ limit int }

type gateState struct{ used int }

var (
	gateMu      sync.Mutex
	gate        chan struct{} // set by a test; nil: AllowN does not wait
	gateEntered chan struct{}
)

func (g gateRule) Capacity() int { return g.limit }
func (g gateRule) AllowN(s *gateState, now time.Duration, n int, d *chanlimit.Decision) {
	gateMu.Lock()
	c, e := gate, gateEntered
	gateMu.Unlock()
	if c != nil {
		e <- struct{}{}
		<-c
	}
	g.PeekN(s, now, n, d)
	if d.Allowed {
		s.used += n
	}
}
func (g gateRule) PeekN(s *gateState, now time.Duration, n int, d *chanlimit.Decision) {
	ok := s.used+n <= g.limit
	rem := g.limit - s.used
	if ok {
		rem -= n
	}
	*d = chanlimit.Decision{Allowed: ok, Limit: g.limit, Remaining: rem}
	if s.used > 0 || ok {
		d.ResetAfter = 1000 * time.Hour
	}
	if !ok {
		d.RetryAfter = time.Hour
	}
}
func (g gateRule) Refund(s *gateState, now time.Duration, n int) { s.used -= n }

// ResetAfter: a state with units used stays (tests run on a frozen clock).
func (g gateRule) ResetAfter(s *gateState, now time.Duration) time.Duration {
	if s.used > 0 {
		return 1000 * time.Hour
	}
	return 0
}

func init() {
	if err := chanlimit.Register[gateState]("test_gate", func(p algorithms.Params) (gateRule, error) {
		return gateRule{p.Limit}, nil
	}); err != nil {
		panic(err)
	}
}

func setGate(c, e chan struct{}) {
	gateMu.Lock()
	gate, gateEntered = c, e
	gateMu.Unlock()
}

// abandonWhileDeciding runs a stage on an test_gate router with capacity
// 5, holds the partition inside the rule while ctx is cancelled, then
// lets it answer. It returns the results and what Peek says remains.
func abandonWhileDeciding(t *testing.T, stage func(ctx context.Context, r *chanlimit.Router, in <-chan event) <-chan pipeline.Result[event]) ([]pipeline.Result[event], chanlimit.Decision, chanlimit.Stats) {
	var got []pipeline.Result[event]
	var rem chanlimit.Decision
	var st chanlimit.Stats
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Algorithm: "test_gate", Limit: 5, Window: time.Second, Partitions: 1})
		c, e := make(chan struct{}), make(chan struct{})
		setGate(c, e)
		defer setGate(nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		out := stage(ctx, r, feed(event{"k", 0, 3}))
		<-e // the partition is deciding the item
		cancel()
		synctest.Wait() // the stage has given up on the answer
		setGate(nil, nil)
		close(c)
		var closed bool
		got, closed = ready(out)
		require.True(t, closed)
		var err error
		rem, err = r.Peek(context.Background(), "k", 1)
		require.NoError(t, err)
		st, err = r.Stats(context.Background())
		require.NoError(t, err)
	})
	return got, rem, st
}

// TestThrottleAbandonedTryKeepsQuota: a try batch whose caller gave up
// (ctx ended) while the partition decided it keeps its grants: the item
// comes out with ctx's error but its 3 units are gone for good.
// deliver (actor/partition.go) gives back opBatch and opAllow, not opTry.
func TestThrottleAbandonedTryKeepsQuota(t *testing.T) {
	got, rem, st := abandonWhileDeciding(t, func(ctx context.Context, r *chanlimit.Router, in <-chan event) <-chan pipeline.Result[event] {
		return pipeline.Throttle(ctx, r, in, keyOf, weighted)
	})
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0].Err, context.Canceled)
	assert.Equal(t, 4, rem.Remaining, "the item came out with an error: it must have taken nothing (5 left, 4 after a peek of 1)")
	assert.Zero(t, st.Allowed)
}

// TestPoliceAbandonedBatchGivesBack is the control: AllowBatch's
// grants are given back in the same situation.
func TestPoliceAbandonedBatchGivesBack(t *testing.T) {
	got, rem, _ := abandonWhileDeciding(t, func(ctx context.Context, r *chanlimit.Router, in <-chan event) <-chan pipeline.Result[event] {
		return pipeline.Police(ctx, r, in, keyOf, weighted)
	})
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0].Err, context.Canceled)
	assert.Equal(t, 4, rem.Remaining)
}

// TestThrottleJoinsOutsideLine: a key with a WaitN caller already in
// line (another stage, an HTTP handler with MaxWait...) — the tried item
// is left undecided by tryEach (zero Decision, no error), and Throttle
// takes the zero Limit for "ctx ended", passing on the item with a nil
// error and no grant.
func TestThrottleJoinsOutsideLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		require.True(t, r.Allow("k"))            // the bucket is empty
		go r.WaitN(context.Background(), "k", 1) // in line, granted at 1s
		synctest.Wait()
		out := pipeline.Throttle(context.Background(), r, feed(event{"k", 0, 1}), keyOf, pipeline.Options[event]{})
		got, _ := ready(out)
		for _, res := range got {
			assert.Fail(t, "out before its grant", "%+v", res)
		}
		clk.Advance(time.Second)
		got2, _ := ready(out)
		assert.Empty(t, got2, "the outside waiter is granted at 1s, the item at 2s")
		clk.Advance(time.Second)
		got3, closed := ready(out)
		assert.True(t, closed)
		got = append(append(got, got2...), got3...)
		require.Len(t, got, 1)
		assert.NoError(t, got[0].Err)
		assert.True(t, got[0].Decision.Allowed)
	})
}

// TestThrottleOutsideLineWrongError: same, with another item of the
// batch refused: the lined item gets that other item's error.
func TestThrottleOutsideLineWrongError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		require.True(t, r.Allow("k"))
		go r.WaitN(context.Background(), "k", 1)
		synctest.Wait()
		in := make(chan event, 2)
		in <- event{"big", 0, 5} // ErrExceedsCapacity
		in <- event{"k", 1, 1}
		close(in)
		out := pipeline.Throttle(context.Background(), r, in, keyOf, weighted)
		synctest.Wait() // tried while the outside waiter is in line
		clk.Advance(2 * time.Second)
		var got []pipeline.Result[event]
		for res := range out {
			got = append(got, res)
			clk.Advance(time.Second)
		}
		require.Len(t, got, 2)
		for _, res := range got {
			if res.Item.Seq == 1 {
				assert.NoError(t, res.Err, "item on k must be granted, not get big's error")
				assert.True(t, res.Decision.Allowed)
			}
		}
	})
}

// TestPoliceRefusedCountedOnce: an item a partition refuses
// (ErrTooManyKeys) in an AllowBatch is asked again alone, and counted in
// Stats.Refused twice.
func TestPoliceRefusedCountedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Second, MaxKeys: 1, Partitions: 1})
		out := pipeline.Police(context.Background(), r, feed(event{"a", 0, 1}, event{"b", 1, 1}), keyOf, pipeline.Options[event]{})
		got, closed := ready(out)
		require.True(t, closed)
		require.Len(t, got, 2)
		assert.ErrorIs(t, got[1].Err, chanlimit.ErrTooManyKeys)
		st, err := r.Stats(context.Background())
		require.NoError(t, err)
		assert.Equal(t, uint64(1), st.Allowed)
		assert.Equal(t, uint64(1), st.Refused, "one item refused once")
	})
}

// TestThrottleTwoStagesShareKeys: two Throttle stages on one router
// and the same keys, frozen clock: every item out once, in order per
// stage and key, never an item with a nil error that was not granted,
// and in all exactly the bucket's capacity granted per key.
func TestThrottleTwoStagesShareKeys(t *testing.T) {
	for seed := range 10 {
		synctest.Test(t, func(t *testing.T) {
			const burst = 5
			r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour, Burst: burst})
			ctx, cancel := context.WithCancel(context.Background())
			var outs []<-chan pipeline.Result[event]
			var ins []chan event
			for s := range 2 {
				in := make(chan event, 40)
				ins = append(ins, in)
				for i := range 40 {
					in <- event{fmt.Sprint("k", (i+seed+s)%3), s*1000 + i, 1 + (i*7+seed)%2}
				}
				close(in)
				outs = append(outs, pipeline.Throttle(ctx, r, in, keyOf, pipeline.Options[event]{Weight: weighted.Weight, MaxPending: 1 + (seed+s)%5}))
			}
			all := readThenCancel(outs, cancel)
			require.Len(t, all, 80-len(ins[0])-len(ins[1]), "each item read comes out")
			seen := map[int]bool{}
			granted := map[string]int{}
			for _, res := range all {
				require.False(t, seen[res.Item.Seq], "dup %d", res.Item.Seq)
				seen[res.Item.Seq] = true
				if res.Err == nil {
					assert.True(t, res.Decision.Allowed, "item %d out with no error and no grant: %+v", res.Item.Seq, res.Decision)
					if res.Decision.Allowed {
						granted[res.Item.Key] += res.Item.Units
					}
				} else {
					assert.ErrorIs(t, res.Err, context.Canceled)
				}
			}
			for k, g := range granted {
				assert.LessOrEqual(t, g, burst, k)
				d, err := r.Peek(context.Background(), k, 1)
				require.NoError(t, err)
				left := d.Remaining
				if d.Allowed {
					left++
				}
				assert.Equal(t, burst-g, left, "%s: what is gone is what came out granted", k)
			}
		})
	}
}

// TestThrottleStressCancel: real goroutines, frozen fake clock,
// several stages per router cancelled at random points; quota exactness
// (what is gone from each key is exactly what came out granted).
func TestThrottleStressCancel(t *testing.T) {
	for round := range 30 {
		r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour, Burst: 50, Partitions: 2})
		var wg sync.WaitGroup
		var mu sync.Mutex
		granted := map[string]int{}
		var bad atomic.Int64
		for s := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				in := make(chan event)
				out := pipeline.Throttle(ctx, r, in, keyOf, pipeline.Options[event]{Weight: weighted.Weight, MaxPending: 1 + s})
				go func() {
					defer close(in)
					for i := range 200 {
						if i == 20+round*5+s {
							cancel()
						}
						sent := false
						for try := 0; try < 50 && !sent; try++ {
							select {
							case in <- event{fmt.Sprint("k", i%5), i, 1 + i%3}:
								sent = true
							case <-ctx.Done():
								return
							default:
								runtime.Gosched()
							}
						}
						if !sent { // the stage is full of waiters: end it here
							cancel()
							return
						}
					}
				}()
				for res := range out {
					if res.Err == nil {
						if !res.Decision.Allowed {
							bad.Add(1)
						}
						mu.Lock()
						granted[res.Item.Key] += res.Item.Units
						mu.Unlock()
					}
				}
				cancel()
			}()
		}
		wg.Wait()
		require.Zero(t, bad.Load())
		for k := range 5 {
			key := fmt.Sprint("k", k)
			d, err := r.Peek(context.Background(), key, 1)
			require.NoError(t, err)
			left := d.Remaining
			if d.Allowed {
				left++
			}
			if !assert.Equal(t, 50-granted[key], left, "round %d %s", round, key) {
				return
			}
		}
		r.Close()
	}
}
