package algorithms

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSlidingWindowCounter(t *testing.T, p Params) *SlidingWindowCounter {
	t.Helper()
	c, err := NewSlidingWindowCounter(p)
	require.NoError(t, err)
	return c
}

func TestSlidingWindowCounterFourPerSecond(t *testing.T) {
	run(t, newSlidingWindowCounter(t, Params{Limit: 4, Window: s}), []step{
		// The first request opens the key's windows: [0, 1s), [1s, 2s), ...
		{at: 0, n: 4, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * s}},
		{at: 500 * ms, n: 1, want: Decision{Limit: 4, RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
		// At 1s the sliding window (0, 1s] covers all of [0, 1s) but its
		// first nanosecond: 4 × (1s − 1ns)/1s counts 3 whole units.
		{at: s, n: 1, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * s}},
		{at: s, n: 1, want: Decision{Limit: 4, RetryAfter: 250 * ms, ResetAfter: 2 * s}},
		{at: 1250 * ms, n: 1, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1750 * ms}},
		{at: 1500 * ms, n: 1, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1500 * ms}},
		// [1s, 2s) holds 3; at 1.75s the 4 of [0, 1s) count 0.999… → 0.
		{at: 1750 * ms, n: 2, want: Decision{Limit: 4, Remaining: 1, RetryAfter: 250 * ms, ResetAfter: 1250 * ms}},
		{at: 1750*ms + ns, n: 2, want: Decision{Limit: 4, Remaining: 1, RetryAfter: 250*ms - ns, ResetAfter: 1250*ms - ns}},
		// Both windows empty by 3s: new windows open at 5s.
		{at: 5 * s, n: 4, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * s}},
		{at: 5 * s, n: 5, err: errExceedsCapacity},
		{at: 5 * s, n: 0, err: errInvalidCount},
	})
}

func TestSlidingWindowCounterSevenPerTenSeconds(t *testing.T) {
	run(t, newSlidingWindowCounter(t, Params{Limit: 7, Window: 10 * s}), []step{
		{at: 0, n: 7, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 20 * s}},
		{at: 10 * s, n: 1, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 20 * s}},
		// The 7 must count 5 or less: 7 × (10s − 1ns − e)/10s < 6 from
		// e = 10s − ceil(60s/7) = 1.428571428s on.
		{at: 10 * s, n: 1, want: Decision{Limit: 7, RetryAfter: 1428571428 * ns, ResetAfter: 20 * s}},
		{at: 10*s + ns, n: 1, want: Decision{Limit: 7, RetryAfter: 1428571427 * ns, ResetAfter: 20*s - ns}},
		{at: 11428571428 * ns, n: 1, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 18571428572 * ns}},
	})
}

// TestSlidingWindowCounterPeriodicTraffic: requests exactly a Window/Limit
// apart all pass, as with the log, however they fall on window edges.
func TestSlidingWindowCounterPeriodicTraffic(t *testing.T) {
	for _, limit := range []int{1, 2, 3, 10} {
		c := newSlidingWindowCounter(t, Params{Limit: limit, Window: s})
		var st SlidingWindowCounterState
		for i := range 20 * limit {
			d, err := ask(c, &st, time.Duration(i)*s/time.Duration(limit), 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "Limit %d, request %d", limit, i)
		}
	}
}

// TestSlidingWindowCounterAdmitsMoreAtWindowEdges: traffic at the end of a
// window is counted as if spread over it, so the counter lets through more
// than the log would: here 15 in (0.5s, 1.5s] for a Limit of 10, within the
// bound of prev × elapsed/Window + 1 = 6 over.
func TestSlidingWindowCounterAdmitsMoreAtWindowEdges(t *testing.T) {
	c := newSlidingWindowCounter(t, Params{Limit: 10, Window: s})
	var st SlidingWindowCounterState
	for _, r := range []step{{at: 0, n: 1}, {at: 999 * ms, n: 9}} {
		d, _ := ask(c, &st, r.at, r.n)
		require.True(t, d.Allowed)
	}
	d, _ := ask(c, &st, 1500*ms, 6)
	assert.True(t, d.Allowed, "the 10 of [0, 1s) count floor(10 × (0.5s − 1ns)/1s) = 4: 6 fit, though (0.5s, 1.5s] holds 9 already")
	d, _ = ask(c, &st, 1500*ms, 1)
	assert.False(t, d.Allowed)
}

// TestSlidingWindowCounterRefusesMoreAtWindowStarts: traffic at the start of
// a window still counts after it has left the sliding window, so the
// counter refuses what the log would allow: here 4, within the bound of
// prev × (Window − elapsed)/Window = 5.
func TestSlidingWindowCounterRefusesMoreAtWindowStarts(t *testing.T) {
	c := newSlidingWindowCounter(t, Params{Limit: 10, Window: s})
	var st SlidingWindowCounterState
	d, _ := ask(c, &st, 0, 10)
	require.True(t, d.Allowed)
	d, _ = ask(c, &st, 1500*ms, 7)
	assert.False(t, d.Allowed, "the log would allow 10: nothing in (0.5s, 1.5s]")
	assert.Equal(t, 6, d.Remaining)
}

func TestSlidingWindowCounterNEqualsCapacity(t *testing.T) {
	run(t, newSlidingWindowCounter(t, Params{Limit: 5, Window: s}), []step{
		{at: 0, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 2 * s}},
		{at: s, n: 5, want: Decision{Limit: 5, Remaining: 1, RetryAfter: 800 * ms, ResetAfter: s}},
		{at: 1800 * ms, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 1200 * ms}},
	})
}

// TestSlidingWindowCounterHugeWindow: a century and the largest Limit: the
// weighing products pass 64 bits.
func TestSlidingWindowCounterHugeWindow(t *testing.T) {
	p := Params{Limit: math.MaxInt, Window: century}
	steps := []step{
		{at: 0, n: math.MaxInt, want: Decision{Allowed: true, Limit: math.MaxInt, Remaining: 0, ResetAfter: 2 * century}},
		// Half a century into the next window the MaxInt units count
		// floor(MaxInt × (c/2 − 1ns)/c) = MaxInt/2 − 3: one more than fits
		// waits a nanosecond.
		{at: century + century/2, n: math.MaxInt/2 + 5, want: Decision{Limit: math.MaxInt, Remaining: math.MaxInt/2 + 4,
			RetryAfter: 1, ResetAfter: century / 2}},
	}
	run(t, newSlidingWindowCounter(t, p), steps)

	// Allowed a nanosecond later; no replay probes for this one, since
	// its ResetAfter (1.5 centuries) reaches past the largest Duration.
	c := newSlidingWindowCounter(t, p)
	st := replay(c, steps)
	d, err := ask(c, st, century+century/2+1, math.MaxInt/2+5)
	require.NoError(t, err)
	assert.Equal(t, Decision{Allowed: true, Limit: math.MaxInt, Remaining: 2, ResetAfter: century + century/2 - 1}, d)
}

func TestSlidingWindowCounterWindowTooLong(t *testing.T) {
	_, err := NewSlidingWindowCounter(Params{Limit: 1, Window: math.MaxInt64/2 + 1})
	require.ErrorIs(t, err, ErrInvalidParams)
	assert.Contains(t, err.Error(), "Window")
	_, err = NewSlidingWindowCounter(Params{Limit: 1, Window: math.MaxInt64 / 2})
	assert.NoError(t, err)
}

// TestSlidingWindowCounterJumpBackwards: a now before the current window's
// start is read as the start.
func TestSlidingWindowCounterJumpBackwards(t *testing.T) {
	run(t, newSlidingWindowCounter(t, Params{Limit: 2, Window: s}), []step{
		{at: 10 * s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 2 * s}},
		{at: 4 * s, n: 1, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 8 * s}},
		// Read as 10s: [10s, 11s) is full; the next window takes one at
		// its start, where the two count floor(2 × (1s − 1ns)/1s) = 1.
		{at: 4 * s, n: 1, want: Decision{Limit: 2, RetryAfter: 7 * s, ResetAfter: 8 * s}},
		{at: 12 * s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 2 * s}},
	})
}
