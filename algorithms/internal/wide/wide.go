// Package wide is unsigned 128-bit arithmetic, just enough for exact rate
// math: a rate of Limit per Window scaled to integers needs products of two
// 64-bit numbers (Burst × Window, elapsed × Limit) that overflow 64 bits.
package wide

import "math/bits"

// Uint128 is an unsigned 128-bit integer. The zero value is 0.
type Uint128 struct{ hi, lo uint64 }

// From returns x as a Uint128.
func From(x uint64) Uint128 { return Uint128{lo: x} }

// Mul returns the full product a × b.
func Mul(a, b uint64) Uint128 {
	hi, lo := bits.Mul64(a, b)
	return Uint128{hi, lo}
}

// Add returns x + y. The caller keeps sums below 2^128.
func (x Uint128) Add(y Uint128) Uint128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, carry)
	return Uint128{hi, lo}
}

// Sub returns x - y. The caller ensures y <= x.
func (x Uint128) Sub(y Uint128) Uint128 {
	lo, borrow := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, borrow)
	return Uint128{hi, lo}
}

// SubFloor returns x - y, or 0 if y > x.
func (x Uint128) SubFloor(y Uint128) Uint128 {
	if x.Less(y) {
		return Uint128{}
	}
	return x.Sub(y)
}

// Less reports whether x < y.
func (x Uint128) Less(y Uint128) bool {
	return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo)
}

// Div returns x / d rounded down, and whether the quotient fits in 64 bits.
// d must not be 0.
func (x Uint128) Div(d uint64) (q uint64, ok bool) {
	if x.hi >= d {
		return 0, false
	}
	q, _ = bits.Div64(x.hi, x.lo, d)
	return q, true
}

// DivCeil returns x / d rounded up, and whether the quotient fits in 64
// bits. d must not be 0.
func (x Uint128) DivCeil(d uint64) (q uint64, ok bool) {
	if x.hi >= d {
		return 0, false
	}
	q, r := bits.Div64(x.hi, x.lo, d)
	if r == 0 {
		return q, true
	}
	if q == ^uint64(0) {
		return 0, false
	}
	return q + 1, true
}

// DivMod returns x / d rounded down and x mod d, and whether the quotient
// fits in 64 bits. d must not be 0.
func (x Uint128) DivMod(d uint64) (q, r uint64, ok bool) {
	if x.hi >= d {
		return 0, 0, false
	}
	q, r = bits.Div64(x.hi, x.lo, d)
	return q, r, true
}

// Make returns hi × 2^64 + lo.
func Make(hi, lo uint64) Uint128 { return Uint128{hi, lo} }

// Parts returns the high and low 64 bits of x.
func (x Uint128) Parts() (hi, lo uint64) { return x.hi, x.lo }
