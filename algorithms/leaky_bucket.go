package algorithms

import (
	"github.com/chanlimit/chanlimit/algorithms/internal/wide"
	"math"
	"time"
)

// LeakyBucket is the leaky_bucket rule: each key has a queue of Burst units
// (Limit if Burst is 0) that drains at Limit units per Window. A request for
// n is admitted if its units fit in the queue, and its Decision.Delay is the
// time until the units queued ahead of it have drained: its turn. Work that
// starts when its Delay is up leaves evenly spaced, however bunched it
// arrived: a request of n units starts n × Window/Limit after the one before
// it (its own units start together).
//
// It shapes, where TokenBucket polices: both admit the same requests (a
// queue of Burst draining at Limit per Window is a bucket of Burst refilling
// at that rate), but the leaky bucket tells each admitted request when to go
// instead of letting a burst through at once. Its state is a GCRAState: the
// instant the queue will have drained. A LeakyBucket is immutable and safe
// for concurrent use; the state of a key is not.
type LeakyBucket struct{ gcra GCRA }

var (
	_ Machine[GCRAState]    = (*LeakyBucket)(nil)
	_ Expiring[GCRAState]   = (*LeakyBucket)(nil)
	_ StateCodec[GCRAState] = (*LeakyBucket)(nil)
	_ Adopter[GCRAState]    = (*LeakyBucket)(nil)
)

// NewLeakyBucket returns the rule for p, on the terms of NewTokenBucket.
func NewLeakyBucket(p Params) (*LeakyBucket, error) {
	b, err := newBucket(p)
	if err != nil {
		return nil, err
	}
	return &LeakyBucket{GCRA{b}}, nil
}

// Capacity returns Burst: the queue's size.
func (l *LeakyBucket) Capacity() int { return l.gcra.burst }

// AllowN queues n units at now if they fit, and says when their turn comes.
func (l *LeakyBucket) AllowN(s *GCRAState, now time.Duration, n int, d *Decision) {
	l.decide(s, now, n, true, d)
}

// PeekN writes what AllowN would, and changes nothing.
func (l *LeakyBucket) PeekN(s *GCRAState, now time.Duration, n int, d *Decision) {
	l.decide(s, now, n, false, d)
}

// Refund takes n units out of the queue at now, down to empty: later
// admissions wait less.
func (l *LeakyBucket) Refund(s *GCRAState, now time.Duration, n int) { l.gcra.Refund(s, now, n) }

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

// Adopt takes over the queue that from, another *LeakyBucket, kept in s.
// The work already admitted keeps its turn: the queue drains at the
// instant it would have under from (rounded up to this queue's fraction
// of a nanosecond), so the next request admitted starts after it, and the
// room left is this Burst less that much work at this Limit per Window. A
// queue holding more work than this Burst is capped at it: the next
// request then waits a full queue's time, less than the work ahead of it.
// A now before 0 is read as 0. Any other from, a *GCRA too, leaves s an
// empty queue, the zero state.
//
// It keeps the queue where TokenBucket.Adopt keeps the tokens: a shaper's
// state is the work it has scheduled, a policer's the room it has left.
func (l *LeakyBucket) Adopt(s *GCRAState, from Machine[GCRAState], now time.Duration) {
	f, ok := from.(*LeakyBucket)
	if !ok || f == nil {
		*s = GCRAState{}
		return
	}
	t := uint64(max(now, 0))
	if s.tat < t { // drained: TAT = tat + frac/perNs < tat + 1 <= t
		*s = GCRAState{}
		return
	}
	g := &l.gcra
	frac, _ := wide.Mul(s.frac, g.perNs).DivCeil(f.gcra.perNs) // <= perNs: frac < from's perNs
	queued := wide.Mul(s.tat-t, g.perNs).Add(wide.From(frac))
	if g.full.Less(queued) {
		queued = g.full
	}
	g.setTAT(s, t, queued)
}

func (l *LeakyBucket) decide(s *GCRAState, now time.Duration, n int, commit bool, d *Decision) {
	queued := l.gcra.decide(s, now, n, commit, d)
	if d.Allowed {
		_, ahead := catchUp(now, 0) // a now before 0 is read as 0: its turn is that much later
		d.Delay = min(l.gcra.refillTime(queued), math.MaxInt64-ahead) + ahead
	}
}
