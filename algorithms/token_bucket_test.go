package algorithms

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTokenBucket(t *testing.T, p Params) *TokenBucket {
	t.Helper()
	tb, err := NewTokenBucket(p)
	require.NoError(t, err)
	return tb
}

// runBuckets plays steps on token_bucket and on gcra, which must decide
// alike.
func runBuckets(t *testing.T, p Params, steps []step) {
	t.Helper()
	t.Run(tokenBucket, func(t *testing.T) { run(t, newTokenBucket(t, p), steps) })
	t.Run(gcra, func(t *testing.T) {
		g, err := NewGCRA(p)
		require.NoError(t, err)
		run(t, g, steps)
	})
}

// TestTokenBucketThreePerSecond: a token every 333,333,333.3ns, a ratio no
// integer nanosecond interval can hold; RetryAfter and ResetAfter round the
// exact time up to the next nanosecond.
func TestTokenBucketThreePerSecond(t *testing.T) {
	runBuckets(t, Params{Limit: 3, Window: s}, []step{
		{at: 0, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 333333334 * ns}},
		{at: 0, n: 2, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 0, n: 1, want: Decision{Limit: 3, RetryAfter: 333333334 * ns, ResetAfter: s}},
		{at: 333333333 * ns, n: 1, want: Decision{Limit: 3, RetryAfter: 1 * ns, ResetAfter: 666666667 * ns}},
		{at: 333333334 * ns, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 1333333334 * ns, n: 3, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 1833333334 * ns, n: 2, want: Decision{Limit: 3, Remaining: 1, RetryAfter: 166666667 * ns, ResetAfter: 500 * ms}},
		{at: 1833333334 * ns, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 833333334 * ns}},
		{at: 5 * s, n: 4, err: errExceedsCapacity},
		{at: 5 * s, n: 0, err: errInvalidCount},
		{at: 5 * s, n: 3, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
	})
}

// TestTokenBucketSevenPerTenSecondsBurstTwo: Burst below Limit caps the
// bucket at 2 while the refill stays 7 per 10s.
func TestTokenBucketSevenPerTenSecondsBurstTwo(t *testing.T) {
	runBuckets(t, Params{Limit: 7, Window: 10 * s, Burst: 2}, []step{
		{at: 0, n: 2, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 2857142858 * ns}},
		{at: 0, n: 1, want: Decision{Limit: 7, RetryAfter: 1428571429 * ns, ResetAfter: 2857142858 * ns}},
		{at: 1428571429 * ns, n: 1, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 2857142857 * ns}},
		{at: time.Hour, n: 3, err: errExceedsCapacity},
		{at: time.Hour, n: 2, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 2857142858 * ns}},
	})
}

// TestTokenBucketBurstAboveLimit: a bucket of 10 refilled at 2 per second.
func TestTokenBucketBurstAboveLimit(t *testing.T) {
	runBuckets(t, Params{Limit: 2, Window: s, Burst: 10}, []step{
		{at: 0, n: 10, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 5 * s}},
		{at: s, n: 3, want: Decision{Limit: 2, Remaining: 2, RetryAfter: 500 * ms, ResetAfter: 4 * s}},
		{at: s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 5 * s}},
		{at: 6 * s, n: 10, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 5 * s}},
	})
}

// TestTokenBucketNEqualsCapacity: n equal to the burst passes on a full
// bucket only.
func TestTokenBucketNEqualsCapacity(t *testing.T) {
	runBuckets(t, Params{Limit: 5, Window: s}, []step{
		{at: 0, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: s}},
		{at: 999 * ms, n: 5, want: Decision{Limit: 5, Remaining: 4, RetryAfter: ms, ResetAfter: ms}},
		{at: s, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: s}},
	})
}

// TestTokenBucketTinyRate: one token per 1000 hours.
func TestTokenBucketTinyRate(t *testing.T) {
	runBuckets(t, Params{Limit: 1, Window: 1000 * time.Hour}, []step{
		{at: 0, n: 1, want: Decision{Allowed: true, Limit: 1, ResetAfter: 1000 * time.Hour}},
		{at: 999 * time.Hour, n: 1, want: Decision{Limit: 1, RetryAfter: time.Hour, ResetAfter: time.Hour}},
		{at: 1000 * time.Hour, n: 1, want: Decision{Allowed: true, Limit: 1, ResetAfter: 1000 * time.Hour}},
	})
}

// TestTokenBucketHugeRate: a billion tokens per nanosecond, the largest int
// as the burst: the units overflow 64 bits and must not wrap.
func TestTokenBucketHugeRate(t *testing.T) {
	runBuckets(t, Params{Limit: 1e9, Window: ns, Burst: math.MaxInt}, []step{
		{at: 0, n: math.MaxInt, want: Decision{Allowed: true, Limit: 1e9, Remaining: 0, ResetAfter: 9223372037 * ns}},
		{at: 0, n: 1e9, want: Decision{Limit: 1e9, RetryAfter: ns, ResetAfter: 9223372037 * ns}},
		{at: ns, n: 1e9, want: Decision{Allowed: true, Limit: 1e9, Remaining: 0, ResetAfter: 9223372037 * ns}},
		{at: 10 * s, n: math.MaxInt, want: Decision{Allowed: true, Limit: 1e9, Remaining: 0, ResetAfter: 9223372037 * ns}},
	})
}

// TestTokenBucketLimitMaxInt: the largest Limit over a 100-year window; the
// units are Limit × Window, about 2^124.
func TestTokenBucketLimitMaxInt(t *testing.T) {
	runBuckets(t, Params{Limit: math.MaxInt, Window: century}, []step{
		{at: 0, n: math.MaxInt, want: Decision{Allowed: true, Limit: math.MaxInt, Remaining: 0, ResetAfter: century}},
		{at: century / 2, n: math.MaxInt, want: Decision{Limit: math.MaxInt, Remaining: math.MaxInt / 2, RetryAfter: century / 2, ResetAfter: century / 2}},
		{at: century / 2, n: math.MaxInt / 2, want: Decision{Allowed: true, Limit: math.MaxInt, Remaining: 0, ResetAfter: century}},
	})
}

func TestTokenBucketBurstTooLarge(t *testing.T) {
	// 1 per 100 years with a burst of 3 takes 300 years to refill: no
	// Duration holds its ResetAfter.
	_, err := NewTokenBucket(Params{Limit: 1, Window: 100 * 365 * 24 * time.Hour, Burst: 3})
	require.ErrorIs(t, err, ErrInvalidParams)
	assert.Contains(t, err.Error(), "Burst")

	_, err = NewTokenBucket(Params{Limit: 1, Window: 100 * 365 * 24 * time.Hour, Burst: 2})
	assert.NoError(t, err, "200 years still fit")
}

// TestTokenBucketJumpBackwards: a now before the last refill is read as the
// last refill: it neither refills nor unrefills, and the waits count from
// the caller's now.
func TestTokenBucketJumpBackwards(t *testing.T) {
	run(t, newTokenBucket(t, Params{Limit: 2, Window: s}), []step{
		{at: 10 * s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
		{at: 5 * s, n: 1, want: Decision{Limit: 2, RetryAfter: 5*s + 500*ms, ResetAfter: 6 * s}},
		{at: 10*s + 500*ms, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
		{at: 12 * s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * ms}},
		{at: 11 * s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 2 * s}},
	})
}

// TestTokenBucketRefundThenJumpBackwards: a bucket refilled by a Refund
// still remembers when it was last touched, so a now behind that is read as
// that instant and grants nothing twice.
func TestTokenBucketRefundThenJumpBackwards(t *testing.T) {
	tb := newTokenBucket(t, Params{Limit: 1, Window: s})
	var st TokenBucketState
	d, _ := ask(tb, &st, 10*s, 1)
	require.True(t, d.Allowed)
	tb.Refund(&st, 10*s, 1)
	d, _ = ask(tb, &st, 5*s, 1)
	require.True(t, d.Allowed, "the refunded token is there")
	assert.Equal(t, 6*s, d.ResetAfter, "read at 10s: full again at 11s, 6s after the caller's 5s")
	d, _ = ask(tb, &st, 10*s, 1)
	assert.False(t, d.Allowed, "one token per second: the one at 5s (read as 10s) took it")
}
