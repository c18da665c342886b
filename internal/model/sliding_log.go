package model

import (
	"math"
	"sort"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// slidingLog is the model of sliding_window_log: a request for n at now is
// allowed if the units admitted at instants in (now - window, now], plus
// n, are at most limit.
type slidingLog struct {
	history
	limit  int
	window time.Duration
}

func (m *slidingLog) Capacity() int { return m.limit }

func (m *slidingLog) AllowN(now time.Duration, n int) (algorithms.Decision, error) {
	if err := checkCount(n, m.limit); err != nil {
		return algorithms.Decision{}, err
	}
	if !fit(UnitsIn(m.list, now-m.window, now), n, m.limit) {
		// The count drops only when an admission leaves the window, at
		// its instant + window: try those instants in order.
		var leaves []time.Duration
		for _, a := range m.list {
			if a.At+m.window > now {
				leaves = append(leaves, a.At+m.window-now)
			}
		}
		sort.Slice(leaves, func(i, j int) bool { return leaves[i] < leaves[j] })
		retry := time.Duration(-1)
		for _, w := range leaves {
			if fit(UnitsIn(m.list, now+w-m.window, now+w), n, m.limit) {
				retry = w
				break
			}
		}
		return algorithms.Decision{Limit: m.limit, Remaining: m.Remaining(now), RetryAfter: retry, ResetAfter: m.ResetAfter(now)}, nil
	}
	m.admit(now, 0, n)
	return algorithms.Decision{Allowed: true, Limit: m.limit, Remaining: m.Remaining(now), ResetAfter: m.ResetAfter(now)}, nil
}

// Refund takes n units out of those admitted in (now - window, now],
// newest first.
func (m *slidingLog) Refund(now time.Duration, n int) {
	m.takeBack(n, func(at time.Duration) bool { return at > now-m.window && at <= now })
}

func (m *slidingLog) PeekN(now time.Duration, n int) (algorithms.Decision, error) {
	c := *m
	c.history = m.copied()
	return c.AllowN(now, n)
}

// Remaining returns limit less the units admitted in (now - window, now].
func (m *slidingLog) Remaining(now time.Duration) int {
	return m.limit - UnitsIn(m.list, now-m.window, now)
}

// ResetAfter returns the time until the newest admission leaves the
// window, at its instant + window.
func (m *slidingLog) ResetAfter(now time.Duration) time.Duration {
	newest := time.Duration(math.MinInt64)
	for _, a := range m.list {
		newest = max(newest, a.At)
	}
	if len(m.list) == 0 || newest+m.window <= now {
		return 0
	}
	return newest + m.window - now
}
