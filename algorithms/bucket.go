package algorithms

import (
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/chanlimit/chanlimit/algorithms/internal/wide"
	"github.com/chanlimit/chanlimit/internal/wire"
)

// bucket is the arithmetic token_bucket, gcra and leaky_bucket share: a
// bucket of burst tokens refilled continuously at limit per window.
//
// It counts exactly in units of 1/(Window/g) token, where g is
// gcd(Limit, Window in ns): one nanosecond refills Limit/g units and one
// token is Window/g units, so no ratio of Limit to Window drifts. Products
// such as Burst × Window/g need 128 bits.
type bucket struct {
	limit    int
	burst    int
	perNs    uint64       // units refilled per nanosecond: Limit/g
	perToken uint64       // units in one token: Window/g
	full     wide.Uint128 // units in a full bucket: burst × perToken
}

// newBucket checks p and returns its bucket. Besides what Validate checks,
// refilling a whole bucket, Burst × Window / Limit, must take at most the
// largest Duration (about 292 years), so that every wait is exact.
func newBucket(p Params) (bucket, error) {
	if err := p.Validate(); err != nil {
		return bucket{}, err
	}
	g := gcd(uint64(p.Limit), uint64(p.Window))
	b := bucket{
		limit:    p.Limit,
		burst:    p.burst(),
		perNs:    uint64(p.Limit) / g,
		perToken: uint64(p.Window) / g,
	}
	b.full = wide.Mul(uint64(b.burst), b.perToken)
	if t, ok := b.full.DivCeil(b.perNs); !ok || t > math.MaxInt64 {
		return bucket{}, invalid("Burst", "too large for Limit %d per %v: refilling %d tokens would take longer than the largest time.Duration (about 292 years)",
			p.Limit, p.Window, b.burst)
	}
	return b, nil
}

// take decides n tokens from a bucket that misses used units into d, and
// returns the units it misses after the decision.
//
// (It writes d in place: a Decision returned by value is copied through
// memory at each call it passes up, and that showed in every decision.)
func (b *bucket) take(used wide.Uint128, n int, d *Decision) wide.Uint128 {
	free := b.full.SubFloor(used)
	need := wide.Mul(uint64(n), b.perToken)
	*d = Decision{Limit: b.limit}
	if free.Less(need) {
		d.Remaining = b.tokens(free)
		d.RetryAfter = b.refillTime(used.Add(need).Sub(b.full))
		d.ResetAfter = b.refillTime(used)
		return used
	}
	used = used.Add(need)
	d.Allowed = true
	d.Remaining = b.tokens(free.Sub(need))
	d.ResetAfter = b.refillTime(used)
	return used
}

// adopt returns the units a bucket of b misses when it takes over a bucket
// of from that misses used: the same tokens, whole and fractional, capped
// at b's burst. from's free units, free/from.perToken tokens, become
// floor(free × b.perToken / from.perToken) of b's, rounded down so that b
// never holds more than from did. The product is taken apart so that no
// step overflows: free is q whole tokens and r < from.perToken units, and
// the result q × b.perToken + floor(r × b.perToken / from.perToken), where
// r × b.perToken fits 128 bits and the quotient is below b.perToken. With
// equal Params it is used itself.
func (b *bucket) adopt(from *bucket, used wide.Uint128) wide.Uint128 {
	free := from.full.SubFloor(used)
	q, r, _ := free.DivMod(from.perToken) // q <= from.burst: free <= from.full
	if q >= uint64(b.burst) {
		return wide.Uint128{} // full: capped at burst
	}
	part, _ := wide.Mul(r, b.perToken).Div(from.perToken) // < b.perToken: r < from.perToken
	// q < burst, so the free units, below (q + 1) × perToken, stay under full.
	return b.full.Sub(wide.Mul(q, b.perToken).Add(wide.From(part)))
}

// The buckets save the units a key misses at the snapshot's now, 128
// bits as two uvarints, and load them less what the time since refilled.

// appendUsed appends the units used to dst.
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

// tokens returns the whole tokens in units.
func (b *bucket) tokens(units wide.Uint128) int {
	t, _ := units.Div(b.perToken) // at most burst: units never exceed full
	return int(t)
}

// refillTime returns how long refilling units takes, rounded up to the
// nanosecond: the first instant at which they are all back. It saturates
// at the largest Duration, which newBucket ensures a full bucket never
// needs.
func (b *bucket) refillTime(units wide.Uint128) time.Duration {
	t, ok := units.DivCeil(b.perNs)
	if !ok || t > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(t)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
