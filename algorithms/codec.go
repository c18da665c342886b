package algorithms

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/chanlimit/chanlimit/algorithms/internal/wide"
	"github.com/chanlimit/chanlimit/internal/wire"
)

// What each built-in algorithm saves of a key, and when its state is
// untouched. Every time is saved relative to the now of the snapshot, and
// checked on the way back in, with every count, against the bounds the
// rule keeps (a bucket never more than empty, a window never over Limit),
// so a loaded state can refuse what the rule would allow but never allow
// more than Limit in a window, and keeps every computation in range.

var (
	_ Expiring[TokenBucketState]            = (*TokenBucket)(nil)
	_ Expiring[GCRAState]                   = (*GCRA)(nil)
	_ Expiring[GCRAState]                   = (*LeakyBucket)(nil)
	_ Expiring[FixedWindowState]            = (*FixedWindow)(nil)
	_ Expiring[SlidingWindowLogState]       = (*SlidingWindowLog)(nil)
	_ Expiring[SlidingWindowCounterState]   = (*SlidingWindowCounter)(nil)
	_ StateCodec[TokenBucketState]          = (*TokenBucket)(nil)
	_ StateCodec[GCRAState]                 = (*GCRA)(nil)
	_ StateCodec[GCRAState]                 = (*LeakyBucket)(nil)
	_ StateCodec[FixedWindowState]          = (*FixedWindow)(nil)
	_ StateCodec[SlidingWindowLogState]     = (*SlidingWindowLog)(nil)
	_ StateCodec[SlidingWindowCounterState] = (*SlidingWindowCounter)(nil)
)

// The buckets save the units used at now, 128 bits as two uvarints.

func appendUsed(dst []byte, used wide.Uint128) []byte {
	hi, lo := used.Parts()
	return binary.AppendUvarint(binary.AppendUvarint(dst, hi), lo)
}

// parseUsed returns the units used that src holds, less what age refilled.
func (b *bucket) parseUsed(src []byte, age time.Duration) (wide.Uint128, error) {
	r := stateReader{wire.Reader{Src: src}}
	hi, lo := r.Uvarint(), r.Uvarint()
	if err := r.done(); err != nil {
		return wide.Uint128{}, err
	}
	used := wide.Make(hi, lo)
	if b.full.Less(used) {
		return wide.Uint128{}, errors.New("more units used than the bucket holds")
	}
	return used.SubFloor(wide.Mul(uint64(max(age, 0)), b.perNs)), nil
}

// usedAt returns the units s has used at now, and how far now is behind
// the state's latest instant.
func (tb *TokenBucket) usedAt(s *TokenBucketState, now time.Duration) (wide.Uint128, time.Duration) {
	at, ahead := catchUp(now, s.last)
	return s.used.SubFloor(wide.Mul(uint64(since(at, s.last)), tb.perNs)), ahead
}

// ResetAfter returns the time until the bucket is full.
func (tb *TokenBucket) ResetAfter(s *TokenBucketState, now time.Duration) time.Duration {
	used, ahead := tb.usedAt(s, now)
	return extend(tb.refillTime(used), ahead)
}

// AppendState saves the units used at now.
func (tb *TokenBucket) AppendState(dst []byte, s *TokenBucketState, now time.Duration) []byte {
	used, _ := tb.usedAt(s, now)
	return appendUsed(dst, used)
}

// ParseState loads the units used, less what age refilled, as of now.
func (tb *TokenBucket) ParseState(src []byte, s *TokenBucketState, now, age time.Duration) error {
	used, err := tb.parseUsed(src, age)
	if err != nil {
		return err
	}
	s.used, s.last = used, now
	return nil
}

// ResetAfter returns the time until the bucket is full.
func (g *GCRA) ResetAfter(s *GCRAState, now time.Duration) time.Duration {
	at, ahead := catchUp(now, 0)
	return extend(g.refillTime(g.usedAt(s, uint64(at))), ahead)
}

// AppendState saves the units used at now, as the token bucket does.
func (g *GCRA) AppendState(dst []byte, s *GCRAState, now time.Duration) []byte {
	return appendUsed(dst, g.usedAt(s, uint64(max(now, 0))))
}

// ParseState loads the units used, less what age refilled, as of now.
func (g *GCRA) ParseState(src []byte, s *GCRAState, now, age time.Duration) error {
	used, err := g.parseUsed(src, age)
	if err != nil {
		return err
	}
	g.setTAT(s, uint64(max(now, 0)), used)
	return nil
}

// ResetAfter returns the time until the queue is empty.
func (l *LeakyBucket) ResetAfter(s *GCRAState, now time.Duration) time.Duration {
	return l.gcra.ResetAfter(s, now)
}

// AppendState saves the units queued at now.
func (l *LeakyBucket) AppendState(dst []byte, s *GCRAState, now time.Duration) []byte {
	return l.gcra.AppendState(dst, s, now)
}

// ParseState loads the units queued, less what age drained, as of now.
func (l *LeakyBucket) ParseState(src []byte, s *GCRAState, now, age time.Duration) error {
	return l.gcra.ParseState(src, s, now, age)
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

// AppendState saves when the window opened and its count.
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

// ResetAfter returns the time until the newest entry leaves the window.
func (l *SlidingWindowLog) ResetAfter(s *SlidingWindowLogState, now time.Duration) time.Duration {
	k := len(s.entries)
	if k == 0 {
		return 0
	}
	newest := s.entries[k-1].at
	at, ahead := catchUp(now, newest)
	if age := since(at, newest); age < l.window {
		return extend(l.window-age, ahead)
	}
	return 0
}

// AppendState saves the entries still inside the window, oldest first.
func (l *SlidingWindowLog) AppendState(dst []byte, s *SlidingWindowLogState, now time.Duration) []byte {
	first, _ := l.expired(s, now)
	live := s.entries[first:]
	dst = binary.AppendUvarint(dst, uint64(len(live)))
	for _, e := range live {
		dst = binary.AppendUvarint(binary.AppendVarint(dst, int64(e.at-now)), uint64(e.n))
	}
	return dst
}

// ParseState loads the entries that age has not moved out of the window.
func (l *SlidingWindowLog) ParseState(src []byte, s *SlidingWindowLogState, now, age time.Duration) error {
	r := stateReader{wire.Reader{Src: src}}
	k := r.count("entries", 0, l.limit)
	var (
		entries []logEntry
		total   int
		last    int64
	)
	for i := 0; i < k && r.Err == nil; i++ {
		rel := r.past("entry")
		n := r.count("entry units", 1, l.limit)
		switch {
		case r.Err != nil:
		case i > 0 && rel <= last:
			r.Fail(errors.New("entries out of order"))
		case n > l.limit-total:
			r.Fail(errors.New("entries hold more units than Limit"))
		}
		last, total = rel, total+n
		if back, live := rebase(rel, age, l.window); live && r.Err == nil {
			entries = append(entries, logEntry{at: now - back, n: n})
		}
	}
	if err := r.done(); err != nil {
		return err
	}
	*s = SlidingWindowLogState{entries: entries}
	for _, e := range entries {
		s.total += e.n
	}
	return nil
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

// AppendState saves the windows as they stand at now.
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
