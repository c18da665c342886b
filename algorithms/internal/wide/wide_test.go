package wide

import (
	"math"
	"math/big"
	"testing"
)

func toBig(x Uint128) *big.Int {
	b := new(big.Int).SetUint64(x.hi)
	b.Lsh(b, 64)
	return b.Or(b, new(big.Int).SetUint64(x.lo))
}

var edges = []uint64{0, 1, 2, 3, 7, 1e9, 1<<32 - 1, 1 << 32, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64 - 1, math.MaxUint64}

// TestAgainstBig checks every operation against math/big over the edges of
// the 64-bit range, where carries and borrows happen.
func TestAgainstBig(t *testing.T) {
	two128 := new(big.Int).Lsh(big.NewInt(1), 128)
	for _, a := range edges {
		for _, b := range edges {
			p := Mul(a, b)
			want := new(big.Int).Mul(new(big.Int).SetUint64(a), new(big.Int).SetUint64(b))
			if toBig(p).Cmp(want) != 0 {
				t.Fatalf("Mul(%d, %d) = %v, want %v", a, b, toBig(p), want)
			}
			for _, c := range edges {
				x := p.Add(From(c))
				sum := new(big.Int).Add(want, new(big.Int).SetUint64(c))
				if sum.Cmp(two128) < 0 && toBig(x).Cmp(sum) != 0 {
					t.Fatalf("%v + %d = %v, want %v", want, c, toBig(x), sum)
				}
				if sum.Cmp(two128) >= 0 {
					continue
				}
				if got := x.Sub(From(c)); got != p {
					t.Fatalf("(%v + %d) - %d = %v, want %v", want, c, c, toBig(got), want)
				}
				if x.Less(p) || (c > 0) != p.Less(x) {
					t.Fatalf("Less disagrees for %v and %v", toBig(x), want)
				}
				if c == 0 {
					continue
				}
				q, r := new(big.Int).QuoRem(sum, new(big.Int).SetUint64(c), new(big.Int))
				fits := q.IsUint64()
				got, ok := x.Div(c)
				if ok != fits || (ok && got != q.Uint64()) {
					t.Fatalf("%v / %d = %d, %v; want %v, %v", sum, c, got, ok, q, fits)
				}
				gotQ, gotR, ok := x.DivMod(c)
				if ok != fits || (ok && (gotQ != q.Uint64() || gotR != r.Uint64())) {
					t.Fatalf("%v divmod %d = %d, %d, %v; want %v, %v, %v", sum, c, gotQ, gotR, ok, q, r, fits)
				}
				if r.Sign() > 0 {
					q.Add(q, big.NewInt(1))
				}
				fits = q.IsUint64()
				got, ok = x.DivCeil(c)
				if ok != fits || (ok && got != q.Uint64()) {
					t.Fatalf("ceil(%v / %d) = %d, %v; want %v, %v", sum, c, got, ok, q, fits)
				}
			}
		}
	}
}

func TestSubFloor(t *testing.T) {
	if got := From(3).SubFloor(From(5)); got != (Uint128{}) {
		t.Fatalf("3 - 5 floored = %v, want 0", toBig(got))
	}
	if got := Mul(math.MaxUint64, 2).SubFloor(From(1)); toBig(got).Cmp(new(big.Int).Sub(toBig(Mul(math.MaxUint64, 2)), big.NewInt(1))) != 0 {
		t.Fatalf("borrow across the halves went wrong: %v", toBig(got))
	}
}
