package actor_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

// Each policy's quota, as AllowQuota writes it beside a decision, is what
// that policy alone says of the key: checked against the rules' own
// states, kept beside the partition, over random steps of a fake clock.
func TestAllowQuotaIsEachPolicyAlone(t *testing.T) {
	tb, err := algorithms.NewTokenBucket(algorithms.Params{Limit: 5, Window: time.Second})
	require.NoError(t, err)
	fw, err := algorithms.NewFixedWindow(algorithms.Params{Limit: 12, Window: time.Minute})
	require.NoError(t, err)
	set := keytable.NewSet([]keytable.Policy{
		{Name: "second", Algorithm: "token_bucket", Params: algorithms.Params{Limit: 5, Window: time.Second}, Rule: keytable.NewRule(tb)},
		{Name: "minute", Algorithm: "fixed_window", Params: algorithms.Params{Limit: 12, Window: time.Minute}, Rule: keytable.NewRule(fw)},
	})
	clk := clock.NewFake(epoch)
	p := start(set.NewTable(), clk, 4)
	defer stop(p)

	// The model: each rule's state of the key, taking what the partition
	// allowed.
	var second algorithms.TokenBucketState
	var minute algorithms.FixedWindowState
	rng := rand.New(rand.NewPCG(1, 2))
	var now time.Duration
	var q keytable.Quota
	for step := range 400 {
		wait := time.Duration(rng.IntN(400)) * time.Millisecond
		clk.Advance(wait)
		now += wait
		n := 1 + rng.IntN(5)
		d, err := p.AllowQuota(context.Background(), "k", n, &q)
		require.NoError(t, err, "step %d", step)
		var dt, df algorithms.Decision
		tb.PeekN(&second, now, n, &dt)
		fw.PeekN(&minute, now, n, &df)
		require.Equal(t, dt.Allowed && df.Allowed, d.Allowed, "step %d: allowed only if both allow", step)
		if d.Allowed {
			tb.AllowN(&second, now, n, &dt)
			fw.AllowN(&minute, now, n, &df)
		}
		require.Same(t, set, q.Set)
		want := []keytable.PolicyQuota{
			alone(0, tb, second, now),
			alone(1, fw, minute, now),
		}
		assert.Equal(t, want, q.Policies, "step %d at %v: AllowQuota(%d) = %+v", step, now, n, d)
	}
}

// alone returns what policy j, whose rule is m and whose state of the key
// is s, says of the key at now, worked out by brute force: the requests of
// one unit it allows one after another, and the wait until it allows one
// more than that, asked on copies of s.
func alone[S any](j int, m algorithms.Machine[S], s S, now time.Duration) keytable.PolicyQuota {
	q := keytable.PolicyQuota{Policy: j}
	for c, d := s, (algorithms.Decision{}); q.Remaining < m.Capacity(); q.Remaining++ {
		if m.AllowN(&c, now, 1, &d); !d.Allowed {
			break
		}
	}
	if q.Remaining < m.Capacity() {
		var d algorithms.Decision
		c := s
		m.PeekN(&c, now, q.Remaining+1, &d)
		q.More = d.RetryAfter
	}
	return q
}

// TestWaitQuotaWithALine: while callers wait on a key, its quota is the
// line's: every policy says 0 remaining, and the wait a request of one
// unit would have in line, for a grant with waiters behind it and for a
// denial alike; the last waiter's grant says what the key has again.
func TestWaitQuotaWithALine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb, err := algorithms.NewTokenBucket(algorithms.Params{Limit: 1, Window: time.Second})
		require.NoError(t, err)
		clk := clock.NewFake(epoch)
		p := start(keytable.NewRule(tb).NewTable(), clk, 4)
		defer stop(p)
		ctx := context.Background()
		var q keytable.Quota
		_, err = p.AllowQuota(ctx, "k", 1, &q)
		require.NoError(t, err)
		require.Equal(t, []keytable.PolicyQuota{{Remaining: 0, More: time.Second}}, q.Policies)

		qs := make([]keytable.Quota, 2)
		done := make(chan int, 2)
		for i := range qs {
			go func() {
				_, err := p.WaitQuota(ctx, "k", 1, &qs[i])
				assert.NoError(t, err)
				done <- i
			}()
			synctest.Wait()
		}
		d, err := p.AllowQuota(ctx, "k", 1, &q)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Equal(t, 3*time.Second, d.RetryAfter, "behind the two waiters")
		assert.Equal(t, []keytable.PolicyQuota{{Remaining: 0, More: 3 * time.Second}}, q.Policies, "the line's")

		clk.Advance(time.Second)
		synctest.Wait()
		require.Equal(t, 0, <-done)
		assert.Equal(t, []keytable.PolicyQuota{{Remaining: 0, More: 2 * time.Second}}, qs[0].Policies, "one waiter behind: a newcomer in 2s")
		clk.Advance(time.Second)
		synctest.Wait()
		require.Equal(t, 1, <-done)
		assert.Equal(t, []keytable.PolicyQuota{{Remaining: 0, More: time.Second}}, qs[1].Policies, "the last: the bucket's own")
	})
}
