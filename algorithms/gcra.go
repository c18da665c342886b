package algorithms

import (
	"time"

	"github.com/chanlimit/chanlimit/algorithms/internal/wide"
)

// GCRA is the gcra rule, the generic cell rate algorithm: the same decisions
// as a TokenBucket with the same Params, kept as one timestamp per key, the
// theoretical arrival time (TAT): the instant at which the key's bucket is
// full again. At now the bucket misses (TAT - now) × Limit / Window tokens,
// or none once TAT has passed; a request that fits moves TAT on by
// n × Window / Limit from max(TAT, now).
//
// The TAT is exact to a fraction of a nanosecond, so gcra drifts no more
// than token_bucket does. The decisions are token_bucket's for any now that
// does not decrease, which is all the router ever passes. The state keeps no
// instant of its last call, so a now behind it reads the bucket as it stood
// at now: that grants nothing token_bucket would not, but may refuse what
// token_bucket (which reads such a now as its last instant) allows. A now
// before 0 is read as 0. A GCRA is immutable and safe for concurrent use;
// the GCRAState of a key is not.
type GCRA struct{ bucket }

// GCRAState is the TAT of one key. The zero value is a full bucket.
type GCRAState struct {
	tat  uint64 // whole nanoseconds; may pass the largest Duration
	frac uint64 // plus frac/(Limit/g) of a nanosecond
}

var (
	_ Machine[GCRAState]    = (*GCRA)(nil)
	_ Expiring[GCRAState]   = (*GCRA)(nil)
	_ StateCodec[GCRAState] = (*GCRA)(nil)
	_ Adopter[GCRAState]    = (*GCRA)(nil)
)

// NewGCRA returns the rule for p, on the terms of NewTokenBucket.
func NewGCRA(p Params) (*GCRA, error) {
	b, err := newBucket(p)
	if err != nil {
		return nil, err
	}
	return &GCRA{b}, nil
}

// Capacity returns Burst.
func (g *GCRA) Capacity() int { return g.burst }

// AllowN takes n tokens at now if there are at least n.
func (g *GCRA) AllowN(s *GCRAState, now time.Duration, n int, d *Decision) {
	g.decide(s, now, n, true, d)
}

// PeekN writes what AllowN would, and changes nothing.
func (g *GCRA) PeekN(s *GCRAState, now time.Duration, n int, d *Decision) {
	g.decide(s, now, n, false, d)
}

// Refund puts n tokens back at now, up to the bucket's capacity: TAT
// moves back by n × Window / Limit, but not before now.
func (g *GCRA) Refund(s *GCRAState, now time.Duration, n int) {
	checkN(n, g.burst)
	t := uint64(max(now, 0))
	g.setTAT(s, t, g.usedAt(s, t).SubFloor(wide.Mul(uint64(n), g.perToken)))
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

// Adopt takes over the bucket that from, another *GCRA, kept in s: the
// tokens it holds at now, whole and fractional, rounded down to this
// bucket's units and capped at Burst, from now on refilled at this Limit
// per Window. A now before 0 is read as 0. Any other from leaves s a full
// bucket, the zero state.
func (g *GCRA) Adopt(s *GCRAState, from Machine[GCRAState], now time.Duration) {
	f, ok := from.(*GCRA)
	if !ok || f == nil {
		*s = GCRAState{}
		return
	}
	g.adopt(s, f, now)
}

// adopt sets s, which f kept, to the TAT of the same tokens in this bucket
// at now.
func (g *GCRA) adopt(s *GCRAState, f *GCRA, now time.Duration) {
	t := uint64(max(now, 0))
	g.setTAT(s, t, g.bucket.adopt(&f.bucket, f.usedAt(s, t)))
}

// decide decides n at now into d, and moves TAT on if it allows and commit
// is set. It returns the units the bucket missed before the decision.
func (g *GCRA) decide(s *GCRAState, now time.Duration, n int, commit bool, d *Decision) wide.Uint128 {
	checkN(n, g.burst)
	at, ahead := catchUp(now, 0)
	t := uint64(at)
	used := g.usedAt(s, t)
	after := g.take(used, n, d)
	if d.Allowed && commit {
		g.setTAT(s, t, after)
	}
	d.delay(ahead)
	return used
}

// usedAt returns the units the bucket misses at t: (TAT - t) × perNs.
func (g *GCRA) usedAt(s *GCRAState, t uint64) wide.Uint128 {
	if s.tat < t { // TAT = tat + frac/perNs < tat + 1 <= t
		return wide.Uint128{}
	}
	return wide.Mul(s.tat-t, g.perNs).Add(wide.From(s.frac))
}

// setTAT sets TAT to the instant a bucket missing used units at t is full:
// t + used/perNs.
func (g *GCRA) setTAT(s *GCRAState, t uint64, used wide.Uint128) {
	q, r, _ := used.DivMod(g.perNs) // q <= a full bucket's refill time < 2^63
	s.tat, s.frac = t+q, r
}
