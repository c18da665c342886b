package chanlimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// TestWaitNExactWithCancellations races WaitN, AllowN and AllowBatch on
// one key, from many goroutines, with calls cancelled at random moments,
// on a frozen clock: what they are granted, plus what is left on the key
// once they are done, is exactly the key's capacity. Then, twice the
// Window later, exactly the capacity again.
func TestWaitNExactWithCancellations(t *testing.T) {
	for _, algorithm := range registered {
		t.Run(algorithm, func(t *testing.T) {
			const capacity = 40
			clk := clock.NewFake(epoch)
			r, err := chanlimit.New(chanlimit.Config{Algorithm: algorithm, Limit: capacity, Window: time.Second, Clock: clk, Partitions: 2, MailboxSize: 4})
			require.NoError(t, err)
			defer r.Close()
			for round := range 3 {
				granted := raceOnOneKey(t, r, uint64(round))
				assert.Equal(t, capacity, granted+drain(t, r, "k"), "round %d", round)
				assert.Zero(t, waiting(t, r), "round %d", round)
				clk.Advance(2 * time.Second)
			}
		})
	}
}

// raceOnOneKey runs a mix of calls on key k from many goroutines, and
// returns the units they were granted.
func raceOnOneKey(t *testing.T, r *chanlimit.Router, seed uint64) int {
	var granted, queued atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for range 30 {
				op := rng.IntN(4)
				ctx, cancel := context.WithCancel(context.Background())
				if op < 2 || rng.IntN(2) == 0 {
					// Cancelled a moment later: before, during or after
					// its answer. A WaitN always is, since on a frozen
					// clock one in line waits for ever.
					spins := rng.IntN(64)
					go func() {
						for range spins {
							runtime.Gosched()
						}
						cancel()
					}()
				}
				n := 1 + rng.IntN(3)
				switch op {
				case 0, 1:
					if _, err := r.WaitN(ctx, "k", n); err == nil {
						granted.Add(int64(n))
					} else if errors.Is(err, context.Canceled) {
						queued.Add(1)
					}
				case 2:
					if d, err := r.AllowN(ctx, "k", n); err == nil && d.Allowed {
						granted.Add(int64(n))
					}
				default:
					reqs := []chanlimit.Request{{Key: "k", N: n}, {Key: "other", N: 1}, {Key: "k", N: 1}}
					out := make([]chanlimit.Decision, len(reqs))
					// An error leaves undecided parts zero; decided ones stand.
					_ = r.AllowBatch(ctx, reqs, out)
					for i, d := range out {
						if d.Allowed && reqs[i].Key == "k" {
							granted.Add(int64(reqs[i].N))
						}
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
	require.Positive(t, queued.Load(), "some WaitN were cancelled")
	return int(granted.Load())
}

// drain takes what is left on key, a unit at a time, and returns it.
func drain(t *testing.T, r *chanlimit.Router, key string) int {
	t.Helper()
	for left := 0; ; left++ {
		d, err := r.AllowN(context.Background(), key, 1)
		require.NoError(t, err)
		if !d.Allowed {
			return left
		}
	}
}
