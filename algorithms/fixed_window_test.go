package algorithms

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newFixedWindow(t *testing.T, p Params) *FixedWindow {
	t.Helper()
	w, err := NewFixedWindow(p)
	require.NoError(t, err)
	return w
}

func TestFixedWindowThreePerSecond(t *testing.T) {
	run(t, newFixedWindow(t, Params{Limit: 3, Window: s}), []step{
		// The first request opens the window: [0.5s, 1.5s).
		{at: 500 * ms, n: 2, want: Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: s}},
		{at: 1200 * ms, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 300 * ms}},
		{at: 1300 * ms, n: 1, want: Decision{Limit: 3, RetryAfter: 200 * ms, ResetAfter: 200 * ms}},
		{at: 1500*ms - ns, n: 1, want: Decision{Limit: 3, RetryAfter: ns, ResetAfter: ns}},
		{at: 1500 * ms, n: 3, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 2500*ms - ns, n: 1, want: Decision{Limit: 3, RetryAfter: ns, ResetAfter: ns}},
		{at: 2500 * ms, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: s}},
		{at: 2500 * ms, n: 4, err: errExceedsCapacity},
		{at: 2500 * ms, n: 0, err: errInvalidCount},
	})
}

// TestFixedWindowBoundaryBurst: Limit at the end of one window and Limit at
// the start of the next are 2 × Limit within a nanosecond.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	run(t, newFixedWindow(t, Params{Limit: 3, Window: s}), []step{
		{at: 0, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: s}},
		{at: s - ns, n: 2, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: ns}},
		{at: s, n: 3, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
	})
}

func TestFixedWindowSevenPerTenSeconds(t *testing.T) {
	run(t, newFixedWindow(t, Params{Limit: 7, Window: 10 * s}), []step{
		{at: 0, n: 1, want: Decision{Allowed: true, Limit: 7, Remaining: 6, ResetAfter: 10 * s}},
		{at: 9 * s, n: 6, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: s}},
		{at: 9500 * ms, n: 1, want: Decision{Limit: 7, RetryAfter: 500 * ms, ResetAfter: 500 * ms}},
		{at: 10 * s, n: 7, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 10 * s}},
		{at: 10 * s, n: 8, err: errExceedsCapacity},
	})
}

// TestFixedWindowHugeWindow: 100 years and the largest Limit.
func TestFixedWindowHugeWindow(t *testing.T) {
	run(t, newFixedWindow(t, Params{Limit: math.MaxInt, Window: century}), []step{
		{at: 0, n: math.MaxInt, want: Decision{Allowed: true, Limit: math.MaxInt, Remaining: 0, ResetAfter: century}},
		{at: century - ns, n: 1, want: Decision{Limit: math.MaxInt, RetryAfter: ns, ResetAfter: ns}},
		{at: century, n: 1, want: Decision{Allowed: true, Limit: math.MaxInt, Remaining: math.MaxInt - 1, ResetAfter: century}},
		{at: 2*century - ns, n: math.MaxInt - 1, want: Decision{Allowed: true, Limit: math.MaxInt, Remaining: 0, ResetAfter: ns}},
	})
}

// TestFixedWindowEndOfTimeline: instants up to the largest Duration neither
// overflow nor wrap.
func TestFixedWindowEndOfTimeline(t *testing.T) {
	const end = time.Duration(math.MaxInt64)
	run(t, newFixedWindow(t, Params{Limit: 2, Window: s}), []step{
		{at: end - 3*s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
		{at: end - 2*s - ns, n: 1, want: Decision{Limit: 2, RetryAfter: ns, ResetAfter: ns}},
		{at: end - s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: s}},
	})
}

// TestFixedWindowJumpBackwards: a now before the window's start is read as
// the start.
func TestFixedWindowJumpBackwards(t *testing.T) {
	run(t, newFixedWindow(t, Params{Limit: 2, Window: s}), []step{
		{at: 10 * s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: s}},
		{at: 3 * s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 8 * s}},
		{at: 3 * s, n: 1, want: Decision{Limit: 2, RetryAfter: 8 * s, ResetAfter: 8 * s}},
		{at: 11 * s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
	})
}
