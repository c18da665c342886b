package chanlimit_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/model"
)

func TestRefundBadRequests(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second, MaxKeyBytes: 8})
	exhaust(t, r, "k", 3)
	for _, n := range []int{0, -1, math.MinInt} {
		require.ErrorIs(t, r.Refund(bg, "k", n), chanlimit.ErrInvalidCount, "n %d", n)
	}
	require.ErrorIs(t, r.Refund(bg, strings.Repeat("k", 9), 1), chanlimit.ErrKeyTooLong)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	require.ErrorIs(t, r.Refund(ctx, "k", 1), context.Canceled)
	assert.False(t, peekAt(t, r, "k", 1).Allowed, "the refused refunds gave nothing back")
	require.NoError(t, r.Close())
	require.ErrorIs(t, r.Refund(bg, "k", 1), chanlimit.ErrClosed)
}

// TestRefundEachPolicy: a refund goes to every policy of the key, each as
// its algorithm can, and never past a capacity.
func TestRefundEachPolicy(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "second", Algorithm: "token_bucket", Limit: 3, Window: time.Second},
		{Name: "minute", Algorithm: "fixed_window", Limit: 5, Window: time.Minute},
	}})
	exhaust(t, r, "k", 3)
	clk.Advance(500 * time.Millisecond) // the bucket has 1.5 tokens; the window counts 3
	require.NoError(t, r.Refund(bg, "k", 2))
	// The bucket has 3 (capped); the window counts 1: 4 fit the window,
	// 3 the bucket.
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 59500 * time.Millisecond, Policy: "second"}, peekAt(t, r, "k", 3))
	exhaust(t, r, "k", 3)
	clk.Advance(time.Second)
	d := allowN(t, r, "k", 2)
	assert.Equal(t, chanlimit.Decision{Limit: 5, Remaining: 1, RetryAfter: 58500 * time.Millisecond, ResetAfter: 58500 * time.Millisecond, Policy: "minute"}, d,
		"the window counts 4: 1 left")
	require.NoError(t, r.Refund(bg, "k", math.MaxInt))
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: time.Minute, Policy: "second"}, peekAt(t, r, "k", 3),
		"a refund of everything leaves an untouched key's room, no more")
}

// TestRefundLeavesAnUntouchedKeyUntouched: a refund makes no state, so an
// unknown key is neither held nor given more room.
func TestRefundLeavesAnUntouchedKeyUntouched(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
	require.NoError(t, r.Refund(bg, "nobody", 2))
	st, err := r.Stats(bg)
	require.NoError(t, err)
	assert.Zero(t, st.Keys)
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: time.Second, Policy: "default"}, allowN(t, r, "nobody", 3))
	assert.False(t, allowN(t, r, "nobody", 1).Allowed)
}

// TestRefundServesWaiters: waiters on the key are granted as soon as a
// refund lets them, with no time passing.
func TestRefundServesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Hour})
		exhaust(t, r, "k", 3)
		a := goWait(bg, r, "k", 2)
		b := goWait(bg, r, "k", 1)
		require.Equal(t, 2, waiting(t, r))
		require.NoError(t, r.Refund(bg, "k", 1))
		synctest.Wait()
		_, ok := answer(a)
		require.False(t, ok, "one unit back: the head needs two, and nobody passes it")
		require.NoError(t, r.Refund(bg, "k", 2))
		synctest.Wait()
		for i, ch := range []<-chan waited{a, b} {
			w, ok := answer(ch)
			require.True(t, ok, "waiter %d", i)
			require.NoError(t, w.err)
			assert.True(t, w.d.Allowed, "waiter %d", i)
		}
		assert.False(t, peekAt(t, r, "k", 1).Allowed, "the three units went to the waiters")
	})
}

// refundsPanic is a fixed window whose Refund panics.
type refundsPanic struct{ *algorithms.FixedWindow }

func (refundsPanic) Refund(*algorithms.FixedWindowState, time.Duration, int) { panic("refund") }

// TestRefundOfAPanickingAlgorithm: the refund fails with
// ErrAlgorithmPanic, its key is dropped, and the partition goes on.
func TestRefundOfAPanickingAlgorithm(t *testing.T) {
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) refundsPanic { return refundsPanic{fw} })
	r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 2, Window: time.Minute, Partitions: 1})
	exhaust(t, r, "k", 2)
	exhaust(t, r, "other", 1)
	require.ErrorIs(t, r.Refund(bg, "k", 1), chanlimit.ErrAlgorithmPanic)
	assert.True(t, allowN(t, r, "k", 2).Allowed, "the key the rule failed on is dropped")
	d := peekAt(t, r, "other", 2)
	assert.False(t, d.Allowed, "the other key is as it was: %+v", d)
	assert.Equal(t, 1, d.Remaining)
}

// TestRefundExactUnderRace: goroutines take single units and give some
// back at once, on a clock that does not move; once the key is spent,
// what was granted is its capacity plus what was given back, for every
// algorithm: no refund is lost and none counts twice.
func TestRefundExactUnderRace(t *testing.T) {
	for _, name := range model.Names() {
		t.Run(name, func(t *testing.T) {
			const capacity = 200
			r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: capacity, Window: time.Hour})
			var granted, refunded atomic.Int64
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := 0; ; i++ {
						d, err := r.AllowN(bg, "k", 1)
						if !assert.NoError(t, err) || !d.Allowed {
							return
						}
						granted.Add(1)
						if (i+g)%3 == 0 {
							if !assert.NoError(t, r.Refund(bg, "k", 1)) {
								return
							}
							refunded.Add(1)
						}
					}
				})
			}
			wg.Wait()
			require.Positive(t, refunded.Load())
			for allowN(t, r, "k", 1).Allowed {
				granted.Add(1) // what the last refunds gave back after a goroutine stopped
			}
			assert.Equal(t, capacity+refunded.Load(), granted.Load())
		})
	}
}
