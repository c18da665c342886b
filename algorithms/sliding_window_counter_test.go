package algorithms

import (
	"math"
	"math/big"
	"math/rand/v2"
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
		// At 1.25s the 4 of [0, 1s) weigh 4 × 0.75 = 3: one fits.
		{at: 500 * ms, n: 1, want: Decision{Limit: 4, RetryAfter: 750 * ms, ResetAfter: 1500 * ms}},
		{at: 1250 * ms, n: 1, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1750 * ms}},
		// At 1.5s they weigh 2, plus the 1 at 1.25s: one more fits.
		{at: 1500 * ms, n: 1, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1500 * ms}},
		// Two fit only at 2s, when [1s, 2s) holds 2 and weighs them in full.
		{at: 1750 * ms, n: 2, want: Decision{Limit: 4, Remaining: 1, RetryAfter: 250 * ms, ResetAfter: 1250 * ms}},
		// Both windows empty by 3s: new windows open at 5s.
		{at: 5 * s, n: 4, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * s}},
		{at: 5 * s, n: 5, err: ErrExceedsCapacity},
		{at: 5 * s, n: 0, err: ErrInvalidCount},
	})
}

func TestSlidingWindowCounterSevenPerTenSeconds(t *testing.T) {
	run(t, newSlidingWindowCounter(t, Params{Limit: 7, Window: 10 * s}), []step{
		{at: 0, n: 7, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 20 * s}},
		// 7 × (10s − e)/10s must fall to 6 or less: e >= 10/7 s, rounded up.
		{at: 10 * s, n: 1, want: Decision{Limit: 7, RetryAfter: 1428571429 * ns, ResetAfter: 10 * s}},
		{at: 11428571429 * ns, n: 1, want: Decision{Allowed: true, Limit: 7, Remaining: 0, ResetAfter: 18571428571 * ns}},
	})
}

// TestSlidingWindowCounterAdmitsMoreAtWindowEdges: traffic at the end of a
// window is weighed as if spread over it, so the counter lets through more
// than the log would: here 14 in (0.5s, 1.5s] for a Limit of 10, within the
// bound of prev × elapsed/Window = 5 over.
func TestSlidingWindowCounterAdmitsMoreAtWindowEdges(t *testing.T) {
	c := newSlidingWindowCounter(t, Params{Limit: 10, Window: s})
	var st SlidingWindowCounterState
	for _, r := range []step{{at: 0, n: 1}, {at: 999 * ms, n: 9}} {
		d, _ := c.AllowN(&st, r.at, r.n)
		require.True(t, d.Allowed)
	}
	d, _ := c.AllowN(&st, 1500*ms, 5)
	assert.True(t, d.Allowed, "10 × 0.5 weighs 5: 5 fit, though the last second holds 9 already")
	d, _ = c.AllowN(&st, 1500*ms, 1)
	assert.False(t, d.Allowed)
}

// TestSlidingWindowCounterRefusesMoreAtWindowStarts: traffic at the start of
// a window still weighs after it has left the sliding window, so the counter
// refuses what the log would allow: here 5, the bound prev × (Window −
// elapsed)/Window.
func TestSlidingWindowCounterRefusesMoreAtWindowStarts(t *testing.T) {
	c := newSlidingWindowCounter(t, Params{Limit: 10, Window: s})
	var st SlidingWindowCounterState
	d, _ := c.AllowN(&st, 0, 10)
	require.True(t, d.Allowed)
	d, _ = c.AllowN(&st, 1500*ms, 6)
	assert.False(t, d.Allowed, "the log would allow 10: nothing in (0.5s, 1.5s]")
	assert.Equal(t, 5, d.Remaining)
}

func TestSlidingWindowCounterNEqualsCapacity(t *testing.T) {
	run(t, newSlidingWindowCounter(t, Params{Limit: 5, Window: s}), []step{
		{at: 0, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 2 * s}},
		{at: s, n: 5, want: Decision{Limit: 5, RetryAfter: s, ResetAfter: s}},
		{at: 2 * s, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 2 * s}},
	})
}

// TestSlidingWindowCounterHugeWindow: a century and the largest Limit: the
// weighing products pass 64 bits.
func TestSlidingWindowCounterHugeWindow(t *testing.T) {
	p := Params{Limit: math.MaxInt, Window: century}
	steps := []step{
		{at: 0, n: math.MaxInt, want: Decision{Allowed: true, Limit: math.MaxInt, Remaining: 0, ResetAfter: 2 * century}},
		// Half a century into the next window the MaxInt units weigh
		// ceil(MaxInt / 2): MaxInt/2 fit, one more a nanosecond later.
		{at: century + century/2, n: math.MaxInt/2 + 1, want: Decision{Limit: math.MaxInt, Remaining: math.MaxInt / 2,
			RetryAfter: 1, ResetAfter: century / 2}},
	}
	run(t, newSlidingWindowCounter(t, p), steps)

	// Allowed a nanosecond later; no replay probes for this one, since
	// its ResetAfter (1.5 centuries) reaches past the largest Duration.
	c := newSlidingWindowCounter(t, p)
	st := replay(c, steps)
	d, err := c.AllowN(st, century+century/2+1, math.MaxInt/2+1)
	require.NoError(t, err)
	assert.Equal(t, Decision{Allowed: true, Limit: math.MaxInt, Remaining: 2, ResetAfter: century + century/2 - 1}, d)
}

func TestSlidingWindowCounterWindowTooLong(t *testing.T) {
	_, err := NewSlidingWindowCounter(Params{Limit: 1, Window: math.MaxInt64/2 + 1})
	require.ErrorIs(t, err, ErrInvalidConfig)
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
		// Read as 10s: both units weigh from [10s, 11s) into the next
		// window, where one fits at 11.5s.
		{at: 4 * s, n: 1, want: Decision{Limit: 2, RetryAfter: 7*s + 500*ms, ResetAfter: 8 * s}},
		{at: 12 * s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 2 * s}},
	})
}

// TestSlidingWindowCounterWithinItsBound checks the documented bound on
// random schedules: no span of one Window holds 2 × Limit allowed units
// (play checks that), and at every decision the estimate is within the
// previous window's count of the true count.
func TestSlidingWindowCounterWithinItsBound(t *testing.T) {
	for i := range schedules(t, 300) {
		rng := rand.New(rand.NewPCG(uint64(i), 5))
		p := Params{Limit: 1 + rng.IntN(20), Window: s}
		c := newSlidingWindowCounter(t, p)
		m := &counterModel{n: p.Limit, t: p.Window}
		var st SlidingWindowCounterState
		now := time.Duration(0)
		for j, call := range randomCalls(rng, p, p.Limit, 80) {
			now += min(call.dt, 10*s)
			if call.n < 1 || call.n > p.Limit {
				continue
			}
			if elapsed, prev, cur, ok := m.at(now); ok {
				// The estimate against the true count: what the log sees.
				est := new(big.Rat).Mul(rat(int64(prev)), new(big.Rat).SetFrac64(int64(p.Window-elapsed), int64(p.Window)))
				est.Add(est, rat(int64(cur)))
				diff := est.Sub(est, rat(int64(m.unitsIn(now-p.Window, now))))
				// −prev × elapsed/Window <= diff <= prev × (Window − elapsed)/Window
				lower := new(big.Rat).SetFrac64(-int64(prev)*int64(elapsed), int64(p.Window))
				upper := new(big.Rat).SetFrac64(int64(prev)*int64(p.Window-elapsed), int64(p.Window))
				if diff.Cmp(lower) < 0 || diff.Cmp(upper) > 0 {
					t.Fatalf("schedule %d, call %d at %v: estimate − true count = %v, outside [%v, %v]", i, j, now, diff, lower, upper)
				}
			}
			want, _ := m.allowN(now, call.n)
			got, _ := c.AllowN(&st, now, call.n)
			require.Equal(t, want, got, "schedule %d, call %d", i, j)
		}
		require.NoError(t, checkWindowInvariant(NameSlidingWindowCounter, p, m.admitted()), "schedule %d", i)
	}
}
