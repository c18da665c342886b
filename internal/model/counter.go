package model

import (
	"math/big"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// Counter is the model of sliding_window_counter: windows of Window from
// an anchor, the instant of the first admission while both the current and
// the previous window are empty; their units are counted from the
// admissions. A request for n at now fits if the previous window's units,
// as if spread evenly over its Window nanoseconds, counted for the
// nanoseconds still inside the sliding window (now - Window, now], in
// whole units rounded down, plus the current window's units, plus n, are
// at most Limit.
//
// Waits are found by binary search over that plain predicate, which only
// turns from false to true as time passes.
type Counter struct {
	history
	limit    int
	window   time.Duration
	anchor   time.Duration
	anchored bool
}

// Capacity returns Limit.
func (m *Counter) Capacity() int { return m.limit }

// Windows returns the windows at now: how far now is into the current
// one, and the units admitted in the previous and in the current one. ok
// is false when both are empty: the key is untouched.
func (m *Counter) Windows(now time.Duration) (elapsed time.Duration, prev, cur int, ok bool) {
	if !m.anchored {
		return 0, 0, 0, false
	}
	k := (now - m.anchor) / m.window
	start := m.anchor + k*m.window
	for _, a := range m.list {
		switch {
		case a.At >= start && a.At < start+m.window:
			cur += a.N
		case a.At >= start-m.window && a.At < start:
			prev += a.N
		}
	}
	return now - start, prev, cur, prev > 0 || cur > 0
}

// fits reports whether n units fit at now: the previous window's units,
// counted for the Window - 1 - elapsed nanoseconds of it inside the
// sliding window, rounded down, plus cur plus n, at most Limit.
func (m *Counter) fits(now time.Duration, n int) bool {
	elapsed, prev, cur, ok := m.Windows(now)
	if !ok {
		return true
	}
	covered := int64(m.window - 1 - elapsed)
	weighed := new(big.Rat).Mul(rat(int64(prev)), new(big.Rat).SetFrac64(covered, int64(m.window)))
	est := new(big.Int).Quo(weighed.Num(), weighed.Denom()) // floor: both are >= 0
	est.Add(est, big.NewInt(int64(cur)))
	est.Add(est, big.NewInt(int64(n)))
	return est.Cmp(big.NewInt(int64(m.limit))) <= 0
}

// touched reports whether the key is touched at now.
func (m *Counter) touched(now time.Duration) bool {
	_, _, _, ok := m.Windows(now)
	return ok
}

// AllowN decides n units at now.
func (m *Counter) AllowN(now time.Duration, n int) (algorithms.Decision, error) {
	if err := checkCount(n, m.limit); err != nil {
		return algorithms.Decision{}, err
	}
	d := algorithms.Decision{Limit: m.limit}
	if m.fits(now, n) {
		if !m.touched(now) {
			m.anchor, m.anchored = now, true
		}
		m.admit(now, 0, n)
		d.Allowed = true
	} else {
		d.RetryAfter = firstWait(now, 2*m.window, func(t time.Duration) bool { return m.fits(t, n) })
	}
	d.Remaining = m.Remaining(now)
	d.ResetAfter = m.ResetAfter(now)
	return d, nil
}

// Refund takes n units out of the current window at now, newest first;
// the previous window is not touched.
func (m *Counter) Refund(now time.Duration, n int) {
	elapsed, _, cur, _ := m.Windows(now)
	if cur == 0 {
		return
	}
	start := now - elapsed
	m.takeBack(n, func(at time.Duration) bool { return at >= start && at < start+m.window })
}

// PeekN returns what AllowN would, and changes nothing.
func (m *Counter) PeekN(now time.Duration, n int) (algorithms.Decision, error) {
	c := *m
	c.history = m.copied()
	return c.AllowN(now, n)
}

// Remaining returns the most units that fit at now.
func (m *Counter) Remaining(now time.Duration) int {
	lo, hi := 0, m.limit // fits(lo) or lo == 0
	for lo < hi {
		mid := lo + (hi-lo)/2 + 1
		if m.fits(now, mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// ResetAfter returns the time until both windows are empty, or 0 if they
// are at now.
func (m *Counter) ResetAfter(now time.Duration) time.Duration {
	if !m.touched(now) {
		return 0
	}
	return firstWait(now, 2*m.window, func(t time.Duration) bool { return !m.touched(t) })
}
