package keytable

import (
	"math"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// timed is the state a table keeps for a Machine that cannot tell when a
// state is untouched: the state, and the deadline of its latest grant.
type timed[S any] struct {
	s        S
	deadline time.Duration
}

// granted is the Expiring Machine over timed states that a table uses for
// a Machine that is not Expiring: a state is untouched from the deadline
// of its latest grant on, so a Refund leaves the deadline where it was
// (late, never early).
type granted[S any] struct{ m algorithms.Machine[S] }

// Capacity is the machine's.
func (g granted[S]) Capacity() int { return g.m.Capacity() }

// AllowN decides on the state, and a grant moves the deadline to its
// ResetAfter.
func (g granted[S]) AllowN(s *timed[S], now time.Duration, n int, d *algorithms.Decision) {
	g.m.AllowN(&s.s, now, n, d)
	if d.Allowed {
		s.deadline = after(now, d.ResetAfter)
	}
}

// PeekN is the machine's.
func (g granted[S]) PeekN(s *timed[S], now time.Duration, n int, d *algorithms.Decision) {
	g.m.PeekN(&s.s, now, n, d)
}

// Refund is the machine's, and leaves the deadline.
func (g granted[S]) Refund(s *timed[S], now time.Duration, n int) { g.m.Refund(&s.s, now, n) }

// ResetAfter returns the time until the deadline; the largest Duration,
// which stands for a deadline past the end of the timeline, never comes.
func (g granted[S]) ResetAfter(s *timed[S], now time.Duration) time.Duration {
	if s.deadline == math.MaxInt64 {
		return math.MaxInt64
	}
	return max(s.deadline-now, 0)
}

// Adopt has the machine adopt the state, if it is an Adopter, and moves
// the deadline no earlier than it was, nor than the ResetAfter the state
// gives a request of one unit now: late, never early.
func (g granted[S]) Adopt(s *timed[S], from algorithms.Machine[timed[S]], now time.Duration) {
	if f, ok := from.(granted[S]); ok {
		if a, ok := g.m.(adopter[S]); ok {
			a.Adopt(&s.s, f.m, now)
		}
	}
	var d algorithms.Decision
	g.m.PeekN(&s.s, now, 1, &d)
	s.deadline = max(s.deadline, after(now, d.ResetAfter))
}
