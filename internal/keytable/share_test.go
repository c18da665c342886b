package keytable

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestShare: a hash picks one of n tables with its high bits alone, from
// the first to the last, so that the low bits, which pick a key's slot in
// its table, are spread over every slot in each table.
func TestShare(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 64, 1 << 20} {
		assert.Equal(t, 0, Share(0, n), "n=%d", n)
		assert.Equal(t, n-1, Share(math.MaxUint64, n), "n=%d", n)
		for _, high := range []uint64{0, 1, 0x8000_0000, 0xdead_beef, math.MaxUint32} {
			want := Share(high<<32, n)
			assert.Equal(t, want, Share(high<<32|math.MaxUint32, n), "n=%d: the low bits do not count", n)
			assert.Less(t, want, n)
		}
	}
	seen := map[int]int{}
	for i := range 4096 {
		seen[Share(Hash(string(rune(i))+"key"), 8)]++
	}
	assert.Len(t, seen, 8, "4,096 keys reach every one of 8 tables")
}
