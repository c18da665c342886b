package algorithms

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSlidingWindowLog(t *testing.T, p Params) *SlidingWindowLog {
	t.Helper()
	l, err := NewSlidingWindowLog(p)
	require.NoError(t, err)
	return l
}

func TestSlidingWindowLogThreePerSecond(t *testing.T) {
	run(t, newSlidingWindowLog(t, Params{Limit: 3, Window: s}), []step{
		{at: 0, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: s}},
		{at: 100 * ms, n: 2, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 200 * ms, n: 1, want: Decision{Limit: 3, RetryAfter: 800 * ms, ResetAfter: 900 * ms}},
		{at: s - ns, n: 1, want: Decision{Limit: 3, RetryAfter: ns, ResetAfter: 100*ms + ns}},
		// The request at 0 leaves the window at exactly 1s: the window is
		// the half-open (now - Window, now].
		{at: s, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: s, n: 1, want: Decision{Limit: 3, RetryAfter: 100 * ms, ResetAfter: s}},
		{at: 1100 * ms, n: 2, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		// Three units must leave: the one at 1s and the two at 1.1s.
		{at: 1500 * ms, n: 3, want: Decision{Limit: 3, RetryAfter: 600 * ms, ResetAfter: 600 * ms}},
		{at: 5 * s, n: 3, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 5 * s, n: 4, err: errExceedsCapacity},
		{at: 5 * s, n: -1, err: errInvalidCount},
	})
}

func TestSlidingWindowLogSevenPerTenSeconds(t *testing.T) {
	run(t, newSlidingWindowLog(t, Params{Limit: 7, Window: 10 * s}), []step{
		{at: 0, n: 7, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 10 * s}},
		{at: 3 * s, n: 1, want: Decision{Limit: 7, RetryAfter: 7 * s, ResetAfter: 7 * s}},
		{at: 10*s - ns, n: 1, want: Decision{Limit: 7, RetryAfter: ns, ResetAfter: ns}},
		{at: 10 * s, n: 7, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 10 * s}},
		{at: 10 * s, n: 8, err: errExceedsCapacity},
	})
}

// TestSlidingWindowLogSameInstantShareAnEntry: requests at one instant
// merge into one entry, so a frozen clock costs one entry, not Limit.
func TestSlidingWindowLogSameInstantShareAnEntry(t *testing.T) {
	l := newSlidingWindowLog(t, Params{Limit: 1000, Window: s})
	var st SlidingWindowLogState
	for range 1000 {
		d, err := ask(l, &st, 7*ms, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	assert.Len(t, st.entries, 1)
	assert.Equal(t, 1000, st.total)
}

// TestSlidingWindowLogMemoryFollowsTheWindow: the log holds only entries
// still inside the window, and gives back the array of a longer past.
func TestSlidingWindowLogMemoryFollowsTheWindow(t *testing.T) {
	l := newSlidingWindowLog(t, Params{Limit: 10000, Window: s})
	var st SlidingWindowLogState
	for i := range 10000 {
		_, err := ask(l, &st, time.Duration(i)*50*time.Microsecond, 1)
		require.NoError(t, err)
	}
	require.Len(t, st.entries, 10000)
	for i := range 100 {
		_, err := ask(l, &st, 10*s+time.Duration(i)*10*ms, 1)
		require.NoError(t, err)
	}
	assert.Len(t, st.entries, 100)
	assert.LessOrEqual(t, cap(st.entries), 256, "the old array is released once the live entries move out of it")
}

func TestSlidingWindowLogNEqualsCapacity(t *testing.T) {
	run(t, newSlidingWindowLog(t, Params{Limit: 5, Window: s}), []step{
		{at: 0, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: s}},
		{at: 500 * ms, n: 5, want: Decision{Limit: 5, RetryAfter: 500 * ms, ResetAfter: 500 * ms}},
		{at: s, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: s}},
	})
}

// TestSlidingWindowLogHugeWindow: 100 years and the largest Limit.
func TestSlidingWindowLogHugeWindow(t *testing.T) {
	run(t, newSlidingWindowLog(t, Params{Limit: math.MaxInt, Window: century}), []step{
		{at: 0, n: math.MaxInt - 1, want: Decision{Allowed: true, Limit: math.MaxInt, Remaining: 1, ResetAfter: century}},
		{at: century - ns, n: 2, want: Decision{Limit: math.MaxInt, Remaining: 1, RetryAfter: ns, ResetAfter: ns}},
		{at: century, n: math.MaxInt, want: Decision{Allowed: true, Limit: math.MaxInt, Remaining: 0, ResetAfter: century}},
		{at: century + century/2, n: 1, want: Decision{Limit: math.MaxInt, RetryAfter: century / 2, ResetAfter: century / 2}},
		{at: 2*century - ns, n: 1, want: Decision{Limit: math.MaxInt, RetryAfter: ns, ResetAfter: ns}},
	})
}

// TestSlidingWindowLogEndOfTimeline: instants up to the largest Duration
// neither overflow nor wrap.
func TestSlidingWindowLogEndOfTimeline(t *testing.T) {
	const end = time.Duration(math.MaxInt64)
	run(t, newSlidingWindowLog(t, Params{Limit: 2, Window: s}), []step{
		{at: end - 3*s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
		{at: end - 2*s - ns, n: 1, want: Decision{Limit: 2, RetryAfter: ns, ResetAfter: ns}},
		{at: end - s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: s}},
		{at: end - s, n: 2, want: Decision{Limit: 2, Remaining: 1, RetryAfter: s, ResetAfter: s}},
	})
}

// TestSlidingWindowLogJumpBackwards: a now before the newest entry is read
// as that entry's instant.
func TestSlidingWindowLogJumpBackwards(t *testing.T) {
	run(t, newSlidingWindowLog(t, Params{Limit: 2, Window: s}), []step{
		{at: 10 * s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: s}},
		{at: 4 * s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 7 * s}},
		{at: 4 * s, n: 1, want: Decision{Limit: 2, RetryAfter: 7 * s, ResetAfter: 7 * s}},
		{at: 11 * s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
	})
}

// TestSlidingWindowLogRefundWhileBehind: units logged at the newest entry's
// instant because now was behind it are refunded from that entry.
func TestSlidingWindowLogRefundWhileBehind(t *testing.T) {
	l := newSlidingWindowLog(t, Params{Limit: 2, Window: s})
	var st SlidingWindowLogState
	d, _ := ask(l, &st, 10*s, 1)
	require.True(t, d.Allowed)
	d, _ = ask(l, &st, 4*s, 1)
	require.True(t, d.Allowed, "logged at 10s")
	l.Refund(&st, 4*s, 1)
	assert.Equal(t, 1, st.total)
	d, _ = ask(l, &st, 10*s, 1)
	assert.True(t, d.Allowed, "the refunded unit is back")
}
