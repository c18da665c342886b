package chanlimit_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// A function run by Do (Stats, PoliciesOf, SetOverride...) costs the same
// whatever the number of waiting callers: nothing re-decides a line whose
// key did not change (DESIGN, protocol property 8). Cost is counted here
// in calls into the rule, which a test can count exactly.

// decisions counts the AllowN and PeekN calls of every countingBucket.
var decisions atomic.Int64

// countingBucket is a token bucket that counts its decisions.
type countingBucket struct{ *algorithms.TokenBucket }

func (c countingBucket) AllowN(s *algorithms.TokenBucketState, now time.Duration, n int, d *algorithms.Decision) {
	decisions.Add(1)
	c.TokenBucket.AllowN(s, now, n, d)
}

func (c countingBucket) PeekN(s *algorithms.TokenBucketState, now time.Duration, n int, d *algorithms.Decision) {
	decisions.Add(1)
	c.TokenBucket.PeekN(s, now, n, d)
}

// Adopt takes over the bucket of another countingBucket as that of a
// *TokenBucket, so that a key keeps its state when its policies change.
func (c countingBucket) Adopt(s *algorithms.TokenBucketState, from algorithms.Machine[algorithms.TokenBucketState], now time.Duration) {
	if f, ok := from.(countingBucket); ok {
		from = f.TokenBucket
	}
	c.TokenBucket.Adopt(s, from, now)
}

// decisionsOf returns the calls into the rule that f makes, counting
// those the partition makes once f has its answer, until it rests.
func decisionsOf(f func()) int64 {
	before := decisions.Load()
	f()
	synctest.Wait()
	return decisions.Load() - before
}

func TestDoReDecidesOnlyTheLinesItChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const waiters = 1000
		ctx := context.Background()
		alg := registerBucketAs(t, func(tb *algorithms.TokenBucket) countingBucket { return countingBucket{tb} })
		r, _ := newRouter(t, chanlimit.Config{Algorithm: alg, Limit: 1, Window: time.Hour, Partitions: 1})
		chans := make([]<-chan waited, waiters)
		for i := range chans {
			key := fmt.Sprint("k", i)
			exhaust(t, r, key, 1)
			chans[i] = goWait(ctx, r, key, 1)
		}
		require.Equal(t, waiters, waiting(t, r))
		// An override on a key nobody waits on: PoliciesOf asks the
		// partition from then on.
		require.NoError(t, r.SetOverride(ctx, "vip", chanlimit.Policy{Algorithm: alg, Limit: 5, Window: time.Hour}))

		steps := []struct {
			give string
			do   func() error
			want int64 // calls into the rule, at most
		}{
			{"Stats", func() error { _, err := r.Stats(ctx); return err }, 0},
			{"PoliciesOf", func() error { _, err := r.PoliciesOf(ctx, "k7"); return err }, 0},
			{"Policies", func() error { r.Policies(); return nil }, 0},
			{"SetOverride of a key without waiters", func() error {
				return r.SetOverride(ctx, "vip", chanlimit.Policy{Algorithm: alg, Limit: 6, Window: time.Hour})
			}, 0},
			{"ClearOverride of a key without waiters", func() error { return r.ClearOverride(ctx, "vip") }, 0},
			// The head of k3's line is asked again: a few calls, not one a line.
			{"SetOverride of a key with waiters", func() error {
				return r.SetOverride(ctx, "k3", chanlimit.Policy{Algorithm: alg, Limit: 1, Window: 2 * time.Hour})
			}, 4},
		}
		for i, s := range steps {
			var err error
			got := decisionsOf(func() { err = s.do() })
			require.NoError(t, err, "step %d: %s", i, s.give)
			assert.LessOrEqual(t, got, s.want, "step %d: %s with %d callers waiting", i, s.give, waiters)
		}
		for i, ch := range chans {
			_, done := answer(ch)
			require.False(t, done, "waiter %d: nothing has granted it", i)
		}

		// A change of every key's policies re-decides every line: under
		// a new policy, which every key starts untouched, every waiter is
		// granted at once.
		require.NoError(t, r.SetPolicies(ctx, chanlimit.Policy{Name: "new", Algorithm: alg, Limit: 1, Window: time.Hour}))
		synctest.Wait()
		for i, ch := range chans {
			if i == 3 {
				continue // under its override
			}
			w, done := answer(ch)
			require.True(t, done, "waiter %d: the new policy has its token", i)
			require.NoError(t, w.err)
		}
	})
}
