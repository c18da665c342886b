package algorithms

import "time"

// FixedWindow is the fixed_window rule: a window opens at a key's first
// request after its previous window ended and lasts Window; at most Limit
// units are allowed inside it.
//
// It is the cheapest rule, a count and a start per key, but windows are
// fixed: Limit units at the end of one window and Limit more at the start of
// the next put up to 2 × Limit inside one Window's span. A FixedWindow is
// immutable and safe for concurrent use; the FixedWindowState of a key is
// not.
type FixedWindow struct {
	limit  int
	window time.Duration
}

// FixedWindowState is the window of one key. The zero value has no window
// open.
type FixedWindowState struct {
	start time.Duration // when the window opened; meaningful while count > 0
	count int           // units allowed in the window
}

var _ Machine[FixedWindowState] = (*FixedWindow)(nil)

// NewFixedWindow returns the rule for p, which must have Limit > 0,
// Window > 0 and no Burst.
func NewFixedWindow(p Params) (*FixedWindow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := p.noBurst("fixed_window"); err != nil {
		return nil, err
	}
	return &FixedWindow{limit: p.Limit, window: p.Window}, nil
}

// Capacity returns Limit.
func (w *FixedWindow) Capacity() int { return w.limit }

// AllowN counts n units into the window open at now, opening one if none is.
func (w *FixedWindow) AllowN(s *FixedWindowState, now time.Duration, n int) (Decision, error) {
	return w.decide(s, now, n, true)
}

// PeekN returns what AllowN would, and changes nothing.
func (w *FixedWindow) PeekN(s *FixedWindowState, now time.Duration, n int) (Decision, error) {
	return w.decide(s, now, n, false)
}

// decide decides n at now, and counts it if it allows and commit is set.
func (w *FixedWindow) decide(s *FixedWindowState, now time.Duration, n int, commit bool) (Decision, error) {
	if err := CheckCount(n, w.limit); err != nil {
		return Decision{}, err
	}
	ahead := time.Duration(0)
	if s.count > 0 {
		now, ahead = catchUp(now, s.start)
	}
	return w.allow(s, now, n, commit).delayedBy(ahead), nil
}

// allow decides n at now, which is no earlier than an open window's start.
func (w *FixedWindow) allow(s *FixedWindowState, now time.Duration, n int, commit bool) Decision {
	start, count := now, 0
	if s.count > 0 && since(now, s.start) < w.window {
		start, count = s.start, s.count
	}
	left := w.window - since(now, start)
	if n > w.limit-count { // so the window is open: a new one holds any n <= Limit
		return Decision{
			Limit:      w.limit,
			Remaining:  w.limit - count,
			RetryAfter: left,
			ResetAfter: left,
		}
	}
	if commit {
		s.start, s.count = start, count+n
	}
	return Decision{
		Allowed:    true,
		Limit:      w.limit,
		Remaining:  w.limit - count - n,
		ResetAfter: left,
	}
}

// Refund takes the n units allowed at now out of the window.
func (w *FixedWindow) Refund(s *FixedWindowState, now time.Duration, n int) {
	s.count -= min(n, s.count)
}
