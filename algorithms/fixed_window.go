package algorithms

import (
	"encoding/binary"
	"time"

	"github.com/chanlimit/chanlimit/internal/wire"
)

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

var (
	_ Machine[FixedWindowState]    = (*FixedWindow)(nil)
	_ Expiring[FixedWindowState]   = (*FixedWindow)(nil)
	_ StateCodec[FixedWindowState] = (*FixedWindow)(nil)
	_ Adopter[FixedWindowState]    = (*FixedWindow)(nil)
)

// NewFixedWindow returns the rule for p, which must have Limit > 0,
// Window > 0 and no Burst.
func NewFixedWindow(p Params) (*FixedWindow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := p.noBurst(FixedWindowName); err != nil {
		return nil, err
	}
	return &FixedWindow{limit: p.Limit, window: p.Window}, nil
}

// Capacity returns Limit.
func (w *FixedWindow) Capacity() int { return w.limit }

// AllowN counts n units into the window open at now, opening one if none is.
func (w *FixedWindow) AllowN(s *FixedWindowState, now time.Duration, n int, d *Decision) {
	w.decide(s, now, n, true, d)
}

// PeekN writes what AllowN would, and changes nothing.
func (w *FixedWindow) PeekN(s *FixedWindowState, now time.Duration, n int, d *Decision) {
	w.decide(s, now, n, false, d)
}

// Refund takes n units out of the window open at now, down to none; a
// window that has ended is left as it is. A window left with no units is
// no window: the next request opens one, as on an untouched key.
func (w *FixedWindow) Refund(s *FixedWindowState, now time.Duration, n int) {
	checkN(n, w.limit)
	if w.ResetAfter(s, now) == 0 {
		return // no window open at now
	}
	s.count -= min(n, s.count)
}

// ResetAfter returns the time until the open window ends, 0 if none is.
func (w *FixedWindow) ResetAfter(s *FixedWindowState, now time.Duration) time.Duration {
	if s.count == 0 {
		return 0
	}
	at, ahead := catchUp(now, s.start)
	if open := since(at, s.start); open < w.window {
		return extend(w.window-open, ahead)
	}
	return 0
}

// AppendState saves when the window opened, relative to now, and its
// count; a window no longer open is saved as none.
func (w *FixedWindow) AppendState(dst []byte, s *FixedWindowState, now time.Duration) []byte {
	if w.ResetAfter(s, now) == 0 {
		return binary.AppendUvarint(binary.AppendVarint(dst, 0), 0)
	}
	return binary.AppendUvarint(binary.AppendVarint(dst, int64(s.start-now)), uint64(s.count))
}

// ParseState loads a window, closed if age has ended it.
func (w *FixedWindow) ParseState(src []byte, s *FixedWindowState, now, age time.Duration) error {
	r := stateReader{wire.Reader{Src: src}}
	rel := r.past("window start")
	count := r.count("count", 0, w.limit)
	if err := r.done(); err != nil {
		return err
	}
	back, open := rebase(rel, age, w.window)
	if !open || count == 0 {
		*s = FixedWindowState{}
		return nil
	}
	*s = FixedWindowState{start: now - back, count: count}
	return nil
}

// Adopt takes over the window that from, another *FixedWindow, kept in s:
// if one is open under from at now, it keeps its start and its count,
// capped at this Limit, and from now on lasts this Window from its start,
// so that it may already have ended (s is then no window). Otherwise, and
// for any other from, s has no window open: the zero state. A now before
// the window's start is read as the start.
func (w *FixedWindow) Adopt(s *FixedWindowState, from Machine[FixedWindowState], now time.Duration) {
	f, ok := from.(*FixedWindow)
	if !ok || f == nil || f.ResetAfter(s, now) == 0 {
		*s = FixedWindowState{}
		return
	}
	s.count = min(s.count, w.limit)
	if w.ResetAfter(s, now) == 0 { // ended under this Window
		*s = FixedWindowState{}
	}
}

// decide decides n at now into d, and counts it if it allows and commit
// is set.
func (w *FixedWindow) decide(s *FixedWindowState, now time.Duration, n int, commit bool, d *Decision) {
	checkN(n, w.limit)
	ahead := time.Duration(0)
	if s.count > 0 {
		now, ahead = catchUp(now, s.start)
	}
	w.allow(s, now, n, commit, d)
	d.delay(ahead)
}

// allow decides n at now, which is no earlier than an open window's start.
func (w *FixedWindow) allow(s *FixedWindowState, now time.Duration, n int, commit bool, d *Decision) {
	start, count := now, 0
	if s.count > 0 && since(now, s.start) < w.window {
		start, count = s.start, s.count
	}
	left := w.window - since(now, start)
	if n > w.limit-count { // so the window is open: a new one holds any n <= Limit
		*d = Decision{Limit: w.limit, Remaining: w.limit - count, RetryAfter: left, ResetAfter: left}
		return
	}
	if commit {
		s.start, s.count = start, count+n
	}
	*d = Decision{Allowed: true, Limit: w.limit, Remaining: w.limit - count - n, ResetAfter: left}
}
