package algorithms

import (
	"time"

	"github.com/chanlimit/chanlimit/algorithms/internal/wide"
)

// TokenBucket is the token_bucket rule: each key has a bucket of Burst
// tokens (Limit if Burst is 0), initially full, refilled continuously at
// Limit tokens per Window and never above Burst. A request for n takes n
// tokens if at least n are there, and otherwise takes nothing.
//
// It polices: a full bucket lets Burst requests through at once, then Limit
// per Window. A TokenBucket is immutable and safe for concurrent use; the
// TokenBucketState of a key is not: one goroutine owns it.
type TokenBucket struct{ bucket }

// TokenBucketState is the bucket of one key: the units it missed when last
// touched, and when that was. The zero value is a full bucket.
type TokenBucketState struct {
	used wide.Uint128
	last time.Duration
}

var (
	_ Machine[TokenBucketState]    = (*TokenBucket)(nil)
	_ Expiring[TokenBucketState]   = (*TokenBucket)(nil)
	_ StateCodec[TokenBucketState] = (*TokenBucket)(nil)
	_ Adopter[TokenBucketState]    = (*TokenBucket)(nil)
)

// NewTokenBucket returns the rule for p. Besides Limit > 0 and Window > 0 it
// requires that refilling a whole bucket, Burst × Window / Limit, take at
// most the largest Duration (about 292 years), so that every RetryAfter and
// ResetAfter is exact.
func NewTokenBucket(p Params) (*TokenBucket, error) {
	b, err := newBucket(p)
	if err != nil {
		return nil, err
	}
	return &TokenBucket{b}, nil
}

// Capacity returns Burst: a full bucket.
func (tb *TokenBucket) Capacity() int { return tb.burst }

// AllowN takes n tokens from s at now if there are at least n. A now
// before the state's last touch is read as that instant.
func (tb *TokenBucket) AllowN(s *TokenBucketState, now time.Duration, n int, d *Decision) {
	checkN(n, tb.burst)
	at, ahead := catchUp(now, s.last)
	used := s.used.SubFloor(wide.Mul(uint64(since(at, s.last)), tb.perNs))
	if after := tb.take(used, n, d); d.Allowed {
		s.used, s.last = after, at
	}
	d.delay(ahead)
}

// PeekN writes what AllowN would, and changes nothing: it decides on a
// copy of s, which holds no pointers.
func (tb *TokenBucket) PeekN(s *TokenBucketState, now time.Duration, n int, d *Decision) {
	c := *s
	tb.AllowN(&c, now, n, d)
}

// Refund puts n tokens back, up to the bucket's capacity: taken from the
// units used (which then refill as before), so at any instant.
func (tb *TokenBucket) Refund(s *TokenBucketState, now time.Duration, n int) {
	checkN(n, tb.burst)
	s.used = s.used.SubFloor(wide.Mul(uint64(n), tb.perToken))
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

// Adopt takes over the bucket that from, another *TokenBucket, kept in s:
// the tokens it holds at now, whole and fractional, rounded down to this
// bucket's units and capped at Burst, from now on refilled at this Limit
// per Window. A now before the state's last touch is read as that instant,
// which the state keeps as its last. Any other from leaves s a full bucket,
// the zero state.
func (tb *TokenBucket) Adopt(s *TokenBucketState, from Machine[TokenBucketState], now time.Duration) {
	f, ok := from.(*TokenBucket)
	if !ok || f == nil {
		*s = TokenBucketState{}
		return
	}
	at, _ := catchUp(now, s.last)
	used, _ := f.usedAt(s, at)
	s.used, s.last = tb.adopt(&f.bucket, used), at
}

// usedAt returns the units s has used at now, and how far now is behind
// the state's latest instant.
func (tb *TokenBucket) usedAt(s *TokenBucketState, now time.Duration) (wide.Uint128, time.Duration) {
	at, ahead := catchUp(now, s.last)
	return s.used.SubFloor(wide.Mul(uint64(since(at, s.last)), tb.perNs)), ahead
}
