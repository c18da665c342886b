package algorithms

import (
	"math"
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
//
// Tokens are counted exactly in units of 1/(Window/g) token, where g is
// gcd(Limit, Window in ns): one nanosecond refills Limit/g units and one
// token is Window/g units, so no ratio of Limit to Window drifts.
type TokenBucket struct {
	limit    int
	burst    int
	perNs    uint64       // units refilled per nanosecond: Limit/g
	perToken uint64       // units in one token: Window/g
	full     wide.Uint128 // units in a full bucket: Burst × perToken
}

// TokenBucketState is the bucket of one key. The zero value is a full
// bucket.
type TokenBucketState struct {
	used wide.Uint128  // units taken and not yet refilled at last
	last time.Duration // when used was last brought up to date
}

var _ Machine[TokenBucketState] = (*TokenBucket)(nil)

// NewTokenBucket returns the rule for p. Besides Limit > 0 and Window > 0 it
// requires that refilling a whole bucket, Burst × Window / Limit, take at
// most the largest Duration (about 292 years), so that every RetryAfter and
// ResetAfter is exact.
func NewTokenBucket(p Params) (*TokenBucket, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	g := gcd(uint64(p.Limit), uint64(p.Window))
	tb := &TokenBucket{
		limit:    p.Limit,
		burst:    p.burst(),
		perNs:    uint64(p.Limit) / g,
		perToken: uint64(p.Window) / g,
	}
	tb.full = wide.Mul(uint64(tb.burst), tb.perToken)
	if t, ok := tb.full.DivCeil(tb.perNs); !ok || t > math.MaxInt64 {
		return nil, invalid("Burst", "too large for Limit %d per %v: refilling %d tokens would take longer than the largest time.Duration (about 292 years)",
			p.Limit, p.Window, tb.burst)
	}
	return tb, nil
}

// Capacity returns Burst: a full bucket.
func (tb *TokenBucket) Capacity() int { return tb.burst }

// AllowN takes n tokens from s at now if there are at least n.
func (tb *TokenBucket) AllowN(s *TokenBucketState, now time.Duration, n int) (Decision, error) {
	if err := CheckCount(n, tb.burst); err != nil {
		return Decision{}, err
	}
	if s.used.IsZero() { // full: when it was last touched does not matter
		return tb.allow(s, s.used, now, n), nil
	}
	at, ahead := catchUp(now, s.last)
	used := s.used.SubFloor(wide.Mul(uint64(since(at, s.last)), tb.perNs))
	return tb.allow(s, used, at, n).delayedBy(ahead), nil
}

// allow decides n at now, when the bucket misses used units.
func (tb *TokenBucket) allow(s *TokenBucketState, used wide.Uint128, now time.Duration, n int) Decision {
	free := tb.full.Sub(used)
	need := wide.Mul(uint64(n), tb.perToken)
	if free.Less(need) {
		return Decision{
			Limit:      tb.limit,
			Remaining:  tb.tokens(free),
			RetryAfter: tb.refillTime(need.Sub(free)),
			ResetAfter: tb.refillTime(used),
		}
	}
	s.used, s.last = used.Add(need), now
	return Decision{
		Allowed:    true,
		Limit:      tb.limit,
		Remaining:  tb.tokens(free.Sub(need)),
		ResetAfter: tb.refillTime(s.used),
	}
}

// Refund puts back the n tokens taken at now.
func (tb *TokenBucket) Refund(s *TokenBucketState, now time.Duration, n int) {
	s.used = s.used.SubFloor(wide.Mul(uint64(n), tb.perToken))
}

// tokens returns the whole tokens in units.
func (tb *TokenBucket) tokens(units wide.Uint128) int {
	t, _ := units.Div(tb.perToken) // at most Burst, checked by NewTokenBucket
	return int(t)
}

// refillTime returns how long refilling units takes, rounded up to the
// nanosecond: the first instant at which they are all back.
func (tb *TokenBucket) refillTime(units wide.Uint128) time.Duration {
	t, _ := units.DivCeil(tb.perNs) // at most a full bucket's, checked by NewTokenBucket
	return time.Duration(t)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
