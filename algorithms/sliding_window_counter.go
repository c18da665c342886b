package algorithms

import (
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/chanlimit/chanlimit/algorithms/internal/wide"
	"github.com/chanlimit/chanlimit/internal/wire"
)

// SlidingWindowCounter is the sliding_window_counter rule: the sliding
// window estimated from two fixed windows, in O(1) memory. A key's windows
// follow one another, each Window long, from its first request (and again
// from its first request after both its windows have emptied). At now,
// elapsed into the current window, a request for n is allowed if
//
//	floor(prev × (Window − 1ns − elapsed) / Window) + cur + n <= Limit
//
// where cur counts the units allowed in the current window and prev those
// of the window before it. The previous window is assumed to have been
// evenly spread over its Window nanoseconds, and counted for the
// Window − 1ns − elapsed of them that the sliding window (now − Window, now]
// still covers, in whole units. Rounding down is what lets steady traffic
// through at Limit per Window: rounded up, a window after a full one could
// never fill, and a Limit of 1 would pass one request per two Windows.
//
// The error against sliding_window_log, the exact sliding window: the units
// the previous window really put inside the sliding window lie between 0
// and prev, so the counter can count up to about prev × elapsed / Window
// fewer than the log (and let that many more through) when the previous
// window's traffic came at its end, or up to about prev × (Window −
// elapsed) / Window more (and refuse them) when it came at its start. A
// span of one Window can thus hold up to 2 × Limit allowed units, as with
// fixed_window, but only when traffic bunches at a window's edge; traffic
// spread evenly passes at Limit per Window, as with the log.
//
// Window must be at most half the largest Duration (about 146 years), since
// a key is untouched again only after two windows. now must not decrease for
// a given state (the router never lets it); a now behind the latest one
// grants nothing, but its waits are not exact. A SlidingWindowCounter is
// immutable and safe for concurrent use; the state of a key is not.
type SlidingWindowCounter struct {
	limit  int
	window time.Duration
}

// SlidingWindowCounterState is the two windows of one key. The zero value
// has both empty.
type SlidingWindowCounterState struct {
	start time.Duration // the current window's start; meaningful while prev or cur > 0
	prev  int           // units allowed in the window before it
	cur   int           // units allowed in the current window
}

var (
	_ Machine[SlidingWindowCounterState]    = (*SlidingWindowCounter)(nil)
	_ Expiring[SlidingWindowCounterState]   = (*SlidingWindowCounter)(nil)
	_ StateCodec[SlidingWindowCounterState] = (*SlidingWindowCounter)(nil)
	_ Adopter[SlidingWindowCounterState]    = (*SlidingWindowCounter)(nil)
)

// NewSlidingWindowCounter returns the rule for p, which must have Limit > 0,
// 0 < Window <= the largest Duration / 2, and no Burst.
func NewSlidingWindowCounter(p Params) (*SlidingWindowCounter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := p.noBurst(SlidingWindowCounterName); err != nil {
		return nil, err
	}
	if p.Window > math.MaxInt64/2 {
		return nil, invalid("Window", "sliding_window_counter needs 2 × Window to fit a time.Duration: at most %v (got %v)",
			time.Duration(math.MaxInt64/2), p.Window)
	}
	return &SlidingWindowCounter{limit: p.Limit, window: p.Window}, nil
}

// Capacity returns Limit.
func (c *SlidingWindowCounter) Capacity() int { return c.limit }

// AllowN counts n units into the current window if the estimate allows.
func (c *SlidingWindowCounter) AllowN(s *SlidingWindowCounterState, now time.Duration, n int, d *Decision) {
	c.decide(s, now, n, true, d)
}

// PeekN writes what AllowN would, and changes nothing.
func (c *SlidingWindowCounter) PeekN(s *SlidingWindowCounterState, now time.Duration, n int, d *Decision) {
	c.decide(s, now, n, false, d)
}

// Refund takes n units out of the window current at now, down to none;
// the previous window, which has ended, is left as it is.
func (c *SlidingWindowCounter) Refund(s *SlidingWindowCounterState, now time.Duration, n int) {
	checkN(n, c.limit)
	w, _ := c.roll(s, now)
	if w.cur == 0 {
		return // nothing counted in the current window
	}
	s.start, s.prev, s.cur = w.start, w.prev, w.cur-min(n, w.cur)
}

// ResetAfter returns the time until neither window weighs on.
func (c *SlidingWindowCounter) ResetAfter(s *SlidingWindowCounterState, now time.Duration) time.Duration {
	w, ahead := c.roll(s, now)
	elapsed := since(w.now, w.start)
	switch {
	case w.cur > 0:
		return extend(c.window-elapsed+c.window, ahead)
	case w.prev > 0:
		return extend(c.window-elapsed, ahead)
	}
	return 0
}

// AppendState saves the windows as they stand at now: the current one's
// start, relative to now, and both counts.
func (c *SlidingWindowCounter) AppendState(dst []byte, s *SlidingWindowCounterState, now time.Duration) []byte {
	w, _ := c.roll(s, now)
	dst = binary.AppendVarint(dst, int64(w.start-now))
	return binary.AppendUvarint(binary.AppendUvarint(dst, uint64(w.prev)), uint64(w.cur))
}

// ParseState loads the windows, which the next request rolls on by age.
func (c *SlidingWindowCounter) ParseState(src []byte, s *SlidingWindowCounterState, now, age time.Duration) error {
	r := stateReader{wire.Reader{Src: src}}
	rel := r.past("window start")
	prev := r.count("previous count", 0, c.limit)
	cur := r.count("current count", 0, c.limit)
	if err := r.done(); err != nil {
		return err
	}
	if rel <= -int64(c.window) {
		return errors.New("current window already over")
	}
	back, weighs := rebase(rel, age, 2*c.window)
	if !weighs || prev+cur == 0 {
		*s = SlidingWindowCounterState{}
		return nil
	}
	*s = SlidingWindowCounterState{start: now - back, prev: prev, cur: cur}
	return nil
}

// Adopt takes over the windows that from, another *SlidingWindowCounter,
// kept in s: rolled on to now under from's Window, the current window
// keeps its start and both counts, each capped at this Limit, and from now
// on they are read under this Window and rolled on by it, at once if this
// Window has already ended the current window. Once both counts are 0, and
// for any other from, s has both windows empty: the zero state. A now
// before the current window's start is read as the start.
func (c *SlidingWindowCounter) Adopt(s *SlidingWindowCounterState, from Machine[SlidingWindowCounterState], now time.Duration) {
	f, ok := from.(*SlidingWindowCounter)
	if !ok || f == nil {
		*s = SlidingWindowCounterState{}
		return
	}
	w, _ := f.roll(s, now)
	*s = SlidingWindowCounterState{start: w.start, prev: min(w.prev, c.limit), cur: min(w.cur, c.limit)}
	if w, _ = c.roll(s, now); w.prev == 0 && w.cur == 0 {
		*s = SlidingWindowCounterState{}
		return
	}
	*s = SlidingWindowCounterState{start: w.start, prev: w.prev, cur: w.cur}
}

// decide decides n at now into d, and counts it if it allows and commit is
// set. A now before the current window's start is read as the start.
func (c *SlidingWindowCounter) decide(s *SlidingWindowCounterState, now time.Duration, n int, commit bool, d *Decision) {
	checkN(n, c.limit)
	w, ahead := c.roll(s, now)
	elapsed := since(w.now, w.start)
	cur := w.cur
	fits := c.limit - w.cur - c.weigh(w.prev, elapsed) // units that fit now
	*d = Decision{Limit: c.limit}
	if n > fits {
		d.Remaining = max(fits, 0) // below 0 only for a now behind the latest
		d.RetryAfter = c.retryAfter(w.prev, w.cur, elapsed, n)
	} else {
		d.Allowed = true
		d.Remaining = fits - n
		cur += n
		if commit {
			s.start, s.prev, s.cur = w.start, w.prev, cur
		}
	}
	switch {
	case cur > 0: // cur weighs on through the next window
		d.ResetAfter = c.window - elapsed + c.window
	case w.prev > 0:
		d.ResetAfter = c.window - elapsed
	}
	d.delay(ahead)
}

// windows is a key's state brought forward to now.
type windows struct {
	now, start time.Duration
	prev, cur  int
}

// roll brings s forward to now, without changing s: a window that has ended
// becomes the previous one, and once both are empty the next window starts
// at now. It returns how far it read now ahead of the caller's.
func (c *SlidingWindowCounter) roll(s *SlidingWindowCounterState, now time.Duration) (windows, time.Duration) {
	w := windows{now: now, start: s.start, prev: s.prev, cur: s.cur}
	var ahead time.Duration
	if w.prev > 0 || w.cur > 0 {
		w.now, ahead = catchUp(now, s.start)
		switch elapsed := since(w.now, w.start); {
		case elapsed < c.window:
		case elapsed-c.window < c.window:
			w.start += c.window
			w.prev, w.cur = w.cur, 0
		default:
			w.prev, w.cur = 0, 0
		}
	}
	if w.prev == 0 && w.cur == 0 {
		w.start = w.now
	}
	return w, ahead
}

// weigh returns floor(prev × (Window − 1ns − elapsed) / Window): the whole
// units of the previous window counted at elapsed into the current one.
func (c *SlidingWindowCounter) weigh(prev int, elapsed time.Duration) int {
	q, _ := wide.Mul(uint64(prev), uint64(c.window-1-elapsed)).Div(uint64(c.window))
	return int(q) // at most prev
}

// retryAfter returns the wait, from elapsed into the current window, until
// n units fit. What fits only grows with time, within a window (the
// previous one weighs less and less) and across its end (cur then weighs as
// the previous window, by a unit less than in full), so the first instant
// that fits is exact.
func (c *SlidingWindowCounter) retryAfter(prev, cur int, elapsed time.Duration, n int) time.Duration {
	if room := c.limit - cur - n; room >= 0 {
		return c.firstFit(prev, room) - elapsed
	}
	return c.window - elapsed + c.firstFit(cur, c.limit-n)
}

// firstFit returns the first elapsed in a window at which weigh(prev,
// elapsed) <= room, for room >= 0. weigh <= room exactly when
// prev × (Window − 1 − elapsed) < (room + 1) × Window, that is from
// Window − ceil((room + 1) × Window / prev) on: always before the window's
// end.
func (c *SlidingWindowCounter) firstFit(prev, room int) time.Duration {
	if prev <= room {
		return 0 // weigh never exceeds prev
	}
	k, _ := wide.Mul(uint64(room)+1, uint64(c.window)).DivCeil(uint64(prev)) // in [1, Window]: room < prev
	return c.window - time.Duration(k)
}
