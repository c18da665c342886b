package model

import (
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// fixed is the model of fixed_window: a window of window opens at the
// first admission after the previous window ended, and admits at most
// limit units.
type fixed struct {
	history
	limit  int
	window time.Duration
	start  time.Duration // of the latest window opened
	opened bool          // whether any window was
}

func (m *fixed) Capacity() int { return m.limit }

// open reports whether a window is open at now: one that has not ended
// and holds units (one that a Refund emptied is none).
func (m *fixed) open(now time.Duration) bool {
	return m.opened && now-m.start < m.window && m.countFrom(m.start) > 0
}

// countFrom returns the units admitted in the window that opens at start.
func (m *fixed) countFrom(start time.Duration) int {
	count := 0
	for _, a := range m.list {
		if a.At >= start && a.At < start+m.window {
			count += a.N
		}
	}
	return count
}

func (m *fixed) AllowN(now time.Duration, n int) (algorithms.Decision, error) {
	if err := checkCount(n, m.limit); err != nil {
		return algorithms.Decision{}, err
	}
	start := m.start
	if !m.open(now) {
		start = now // a new window would open here: it holds any n <= limit
	}
	if !fit(m.countFrom(start), n, m.limit) {
		end := start + m.window - now
		return algorithms.Decision{Limit: m.limit, Remaining: m.Remaining(now), RetryAfter: end, ResetAfter: m.ResetAfter(now)}, nil
	}
	m.start, m.opened = start, true
	m.admit(now, 0, n)
	return algorithms.Decision{Allowed: true, Limit: m.limit, Remaining: m.Remaining(now), ResetAfter: m.ResetAfter(now)}, nil
}

// Refund takes n units out of the window open at now, newest first.
func (m *fixed) Refund(now time.Duration, n int) {
	if !m.open(now) {
		return
	}
	m.takeBack(n, func(at time.Duration) bool { return at >= m.start && at < m.start+m.window })
}

func (m *fixed) PeekN(now time.Duration, n int) (algorithms.Decision, error) {
	c := *m
	c.history = m.copied()
	return c.AllowN(now, n)
}

// Remaining returns limit less the units of the window open at now, or
// limit if none is.
func (m *fixed) Remaining(now time.Duration) int {
	if !m.open(now) {
		return m.limit
	}
	return m.limit - m.countFrom(m.start)
}

// ResetAfter returns the time until the window open at now ends, or 0 if
// none is.
func (m *fixed) ResetAfter(now time.Duration) time.Duration {
	if !m.open(now) {
		return 0
	}
	return m.start + m.window - now
}
