package algorithms

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/chanlimit/chanlimit/internal/wire"
)

// SlidingWindowLog is the sliding_window_log rule: a request for n at now is
// allowed if the units allowed in the last Window, at instants t with
// now - Window < t <= now, plus n are at most Limit. Denied requests are not
// logged.
//
// It is the exact sliding window: no instant ever sees more than Limit
// allowed in the Window before it. The price is memory: a key keeps one
// entry per distinct instant it was allowed something in the last Window, up
// to Limit entries. A SlidingWindowLog is immutable and safe for concurrent
// use; the SlidingWindowLogState of a key is not.
type SlidingWindowLog struct {
	limit  int
	window time.Duration
}

// SlidingWindowLogState is the log of one key. The zero value is an empty
// log.
type SlidingWindowLogState struct {
	entries []logEntry // oldest first, at strictly increasing instants
	total   int        // sum of n over entries
}

// logEntry records the units allowed at one instant.
type logEntry struct {
	at time.Duration
	n  int
}

var (
	_ Machine[SlidingWindowLogState]    = (*SlidingWindowLog)(nil)
	_ Expiring[SlidingWindowLogState]   = (*SlidingWindowLog)(nil)
	_ StateCodec[SlidingWindowLogState] = (*SlidingWindowLog)(nil)
	_ Adopter[SlidingWindowLogState]    = (*SlidingWindowLog)(nil)
)

// NewSlidingWindowLog returns the rule for p, which must have Limit > 0,
// Window > 0 and no Burst.
func NewSlidingWindowLog(p Params) (*SlidingWindowLog, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := p.noBurst(SlidingWindowLogName); err != nil {
		return nil, err
	}
	return &SlidingWindowLog{limit: p.Limit, window: p.Window}, nil
}

// Capacity returns Limit.
func (l *SlidingWindowLog) Capacity() int { return l.limit }

// AllowN logs n units at now if the last Window holds room for them.
func (l *SlidingWindowLog) AllowN(s *SlidingWindowLogState, now time.Duration, n int, d *Decision) {
	l.decide(s, now, n, true, d)
}

// PeekN writes what AllowN would, and changes nothing.
func (l *SlidingWindowLog) PeekN(s *SlidingWindowLogState, now time.Duration, n int, d *Decision) {
	l.decide(s, now, n, false, d)
}

// decide decides n at now into d, and logs it if it allows and commit is
// set.
func (l *SlidingWindowLog) decide(s *SlidingWindowLogState, now time.Duration, n int, commit bool, d *Decision) {
	checkN(n, l.limit)
	ahead := time.Duration(0)
	if k := len(s.entries); k > 0 {
		now, ahead = catchUp(now, s.entries[k-1].at)
	}
	l.allow(s, now, n, commit, d)
	d.delay(ahead)
}

// allow decides n at now, which is no earlier than the newest entry.
func (l *SlidingWindowLog) allow(s *SlidingWindowLogState, now time.Duration, n int, commit bool, d *Decision) {
	first, expired := l.expired(s, now)
	live := s.total - expired
	if n > l.limit-live { // so live > 0: the newest entry is inside the window
		*d = Decision{
			Limit:      l.limit,
			Remaining:  l.limit - live,
			RetryAfter: l.retryAfter(s.entries[first:], now, live+n-l.limit),
			ResetAfter: l.window - since(now, s.entries[len(s.entries)-1].at),
		}
		return
	}
	if commit {
		s.entries, s.total = l.prune(s.entries, first), live+n
		if k := len(s.entries); k > 0 && s.entries[k-1].at == now {
			s.entries[k-1].n += n
		} else {
			s.entries = append(s.entries, logEntry{at: now, n: n})
		}
	}
	*d = Decision{Allowed: true, Limit: l.limit, Remaining: l.limit - live - n, ResetAfter: l.window}
}

// Adopt takes over the log that from, another *SlidingWindowLog, kept in s:
// the entries from's Window still holds at now, read under this Window from
// now on. Those this Window no longer holds either are dropped too, as they
// would be at the next request. If the entries left hold more than this
// Limit, the oldest units go, the oldest entry left perhaps only in part,
// until they hold Limit. Any other from leaves s an empty log, the zero
// state. A now before the newest entry is read as that entry's instant.
//
// The entries are changed in place and moved to a new array the way prune
// moves them, so that a log that shrank does not keep a large one.
func (l *SlidingWindowLog) Adopt(s *SlidingWindowLogState, from Machine[SlidingWindowLogState], now time.Duration) {
	f, ok := from.(*SlidingWindowLog)
	if !ok || f == nil {
		*s = SlidingWindowLogState{}
		return
	}
	if k := len(s.entries); k > 0 {
		now, _ = catchUp(now, s.entries[k-1].at)
	}
	// Entries leave either window oldest first: the later index is the
	// first entry both hold.
	first, expired := f.expired(s, now)
	if i, units := l.expired(s, now); i > first {
		first, expired = i, units
	}
	total := s.total - expired
	for excess := total - l.limit; excess > 0; first++ {
		e := &s.entries[first]
		if e.n > excess {
			e.n -= excess
			break
		}
		excess -= e.n
	}
	s.entries, s.total = l.prune(s.entries, first), min(total, l.limit)
}

// Refund removes the n newest units still in the window at now, newest
// entry first; units that have left the window are left as they are. Right
// after an AllowN they are the units it logged, in the newest entry, at now
// or, if now was behind, at that entry's instant.
func (l *SlidingWindowLog) Refund(s *SlidingWindowLogState, now time.Duration, n int) {
	checkN(n, l.limit)
	k := len(s.entries)
	if k == 0 {
		return
	}
	now, _ = catchUp(now, s.entries[k-1].at)
	for ; k > 0 && n > 0 && since(now, s.entries[k-1].at) < l.window; k-- {
		e := &s.entries[k-1]
		take := min(n, e.n)
		e.n -= take
		s.total -= take
		n -= take
		if e.n > 0 {
			break
		}
		s.entries[k-1] = logEntry{}
		s.entries = s.entries[:k-1]
	}
}

// expired returns the index of the first entry still inside the window
// ending at now, and the units logged before it.
func (l *SlidingWindowLog) expired(s *SlidingWindowLogState, now time.Duration) (first, units int) {
	for first < len(s.entries) && since(now, s.entries[first].at) >= l.window {
		units += s.entries[first].n
		first++
	}
	return first, units
}

// reuseEntries is the largest array an emptied log keeps for its next
// entries, so that a key that is idle now and then allocates nothing.
const reuseEntries = 8

// prune drops the first entries. Once more are dropped than kept, the live
// ones move to a new array, so a key whose log shrank does not hold on to the
// array of its busier past; each entry is copied at most once per entry
// dropped, so the cost stays O(1) per request on average.
func (l *SlidingWindowLog) prune(entries []logEntry, first int) []logEntry {
	switch live := entries[first:]; {
	case first == 0:
		return entries
	case len(live) == 0 && cap(entries) <= reuseEntries:
		return entries[:0] // small: kept for the key's next entries
	case len(live) == 0:
		return nil
	case first >= len(live):
		return append([]logEntry(nil), live...)
	default:
		return live
	}
}

// retryAfter returns how long until enough of the live entries leave the
// window that excess more units fit: an entry at t leaves at t + Window.
func (l *SlidingWindowLog) retryAfter(live []logEntry, now time.Duration, excess int) time.Duration {
	for _, e := range live {
		excess -= e.n
		if excess <= 0 {
			return l.window - since(now, e.at)
		}
	}
	return 0 // not reached: the live entries hold more than excess units
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

// AppendState saves the entries still inside the window, oldest first,
// each at its time relative to now.
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
