package algorithms

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// token_bucket's step tables run on gcra too (runBuckets); these are gcra's
// own.

func newGCRA(t *testing.T, p Params) *GCRA {
	t.Helper()
	g, err := NewGCRA(p)
	require.NoError(t, err)
	return g
}

// TestGCRAJumpBackwards: gcra keeps no instant of its last call, so a now
// behind it reads the bucket as it stood at that now: it grants nothing, and
// the waits count from the caller's now.
func TestGCRAJumpBackwards(t *testing.T) {
	run(t, newGCRA(t, Params{Limit: 2, Window: s}), []step{
		{at: 10 * s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
		// TAT is 11s: seen from 5s the bucket misses 12 tokens.
		{at: 5 * s, n: 1, want: Decision{Limit: 2, RetryAfter: 5*s + 500*ms, ResetAfter: 6 * s}},
		{at: 10*s + 500*ms, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
		{at: 12 * s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * ms}},
		// TAT is 12.5s: seen from 11s the bucket misses 3 tokens.
		{at: 11 * s, n: 1, want: Decision{Limit: 2, RetryAfter: s, ResetAfter: 1500 * ms}},
	})
}

// TestGCRAEndOfTimeline: near the largest Duration the TAT passes it, and
// must neither overflow nor wrap. (No replay probes here: they would have to
// go past the end of the timeline.)
func TestGCRAEndOfTimeline(t *testing.T) {
	const end = time.Duration(math.MaxInt64)
	g := newGCRA(t, Params{Limit: 1, Window: 10 * time.Hour, Burst: 3})
	var st GCRAState
	steps := []step{
		{at: end - 10*time.Hour, n: 3, want: Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 30 * time.Hour}},
		// The TAT is 20 hours past the largest Duration.
		{at: end - 10*time.Hour, n: 1, want: Decision{Limit: 1, RetryAfter: 10 * time.Hour, ResetAfter: 30 * time.Hour}},
		{at: end, n: 2, want: Decision{Limit: 1, Remaining: 1, RetryAfter: 10 * time.Hour, ResetAfter: 20 * time.Hour}},
		{at: end, n: 1, want: Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 30 * time.Hour}},
	}
	for i, c := range steps {
		d, err := ask(g, &st, c.at, c.n)
		require.NoError(t, err)
		require.Equal(t, c.want, d, "step %d: AllowN(t+%v, %d)", i, c.at, c.n)
	}
}

// TestGCRANegativeNow: a now before the origin is read as the origin, and
// the waits count from the caller's now.
func TestGCRANegativeNow(t *testing.T) {
	run(t, newGCRA(t, Params{Limit: 1, Window: s}), []step{
		{at: -5 * s, n: 1, want: Decision{Allowed: true, Limit: 1, ResetAfter: 6 * s}},
		{at: -5 * s, n: 1, want: Decision{Limit: 1, RetryAfter: 6 * s, ResetAfter: 6 * s}},
	})
	run(t, newLeakyBucket(t, Params{Limit: 1, Window: s, Burst: 2}), []step{
		{at: -5 * s, n: 1, want: Decision{Allowed: true, Limit: 1, Remaining: 1, ResetAfter: 6 * s, Delay: 5 * s}},
		{at: -5 * s, n: 1, want: Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 7 * s, Delay: 6 * s}},
	})
}
