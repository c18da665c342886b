package algorithms

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newLeakyBucket(t *testing.T, p Params) *LeakyBucket {
	t.Helper()
	l, err := NewLeakyBucket(p)
	require.NoError(t, err)
	return l
}

// TestLeakyBucketThreePerSecond: a queue of 3 draining 3 per second. Each
// admitted request is told when its turn comes: a unit every 333,333,333.3ns,
// rounded up to the nanosecond.
func TestLeakyBucketThreePerSecond(t *testing.T) {
	run(t, newLeakyBucket(t, Params{Limit: 3, Window: s}), []step{
		{at: 0, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 333333334 * ns}},
		{at: 0, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 666666667 * ns, Delay: 333333334 * ns}},
		{at: 0, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s, Delay: 666666667 * ns}},
		{at: 0, n: 1, want: Decision{Limit: 3, RetryAfter: 333333334 * ns, ResetAfter: s}},
		// Half the queue has drained: the next unit's turn is in 500ms, at
		// 1s, right after the third's.
		{at: 500 * ms, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 833333334 * ns, Delay: 500 * ms}},
		{at: 5 * s, n: 3, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 5 * s, n: 4, err: errExceedsCapacity},
	})
}

// TestLeakyBucketShapesABurst: ten requests arriving together leave a
// Window/Limit apart.
func TestLeakyBucketShapesABurst(t *testing.T) {
	l := newLeakyBucket(t, Params{Limit: 10, Window: s})
	var st GCRAState
	for i := range 10 {
		d, err := ask(l, &st, 0, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, time.Duration(i)*100*ms, d.Delay, "request %d", i)
	}
	d, err := ask(l, &st, 0, 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the queue of 10 is full")
	assert.Equal(t, 100*ms, d.RetryAfter)
}

// TestLeakyBucketMultiUnitTurn: a request of n units takes n turns: the
// request after it waits for all of them.
func TestLeakyBucketMultiUnitTurn(t *testing.T) {
	run(t, newLeakyBucket(t, Params{Limit: 4, Window: s, Burst: 8}), []step{
		{at: 0, n: 5, want: Decision{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 1250 * ms}},
		{at: 0, n: 1, want: Decision{Allowed: true, Limit: 4, Remaining: 2, ResetAfter: 1500 * ms, Delay: 1250 * ms}},
		{at: s, n: 4, want: Decision{Allowed: true, Limit: 4, Remaining: 2, ResetAfter: 1500 * ms, Delay: 500 * ms}},
	})
}
