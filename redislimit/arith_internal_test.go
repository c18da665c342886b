package redislimit

import (
	"context"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCeilMilli: the script's ceilMilli, ceil(1000 × b / p) for
// 0 <= b < p < 2^53, is exact where 1000 × b passes 2^53 (a double's
// 1000 × b / p is not), against math/big, on Redis's Lua.
func TestCeilMilli(t *testing.T) {
	c := singleNode(t)
	helpers := decideLua[:strings.Index(decideLua, "-- The algorithms by name")]
	script := helpers + `
bind()
local out = {}
for i = 1, #ARGV, 2 do
  out[#out + 1] = ceilMilli(tonumber(ARGV[i]), tonumber(ARGV[i + 1]))
end
return out
`
	rng := rand.New(rand.NewPCG(1, 2))
	var args []any
	var want []int64
	for range 2000 {
		p := 1 + rng.Int64N(1<<53-1)
		if rng.IntN(4) == 0 {
			p = 1 + rng.Int64N(2000) // small ones too
		}
		b := rng.Int64N(p)
		if rng.IntN(8) == 0 { // where the rounding turns: 1000 × b a multiple of p, or next to one
			k := rng.Int64N(1000)
			b = min(max(new(big.Int).Div(new(big.Int).Mul(big.NewInt(k), big.NewInt(p)), big.NewInt(1000)).Int64()+rng.Int64N(3)-1, 0), p-1)
		}
		num := new(big.Int).Mul(big.NewInt(1000), big.NewInt(b))
		q, r := new(big.Int).QuoRem(num, big.NewInt(p), new(big.Int))
		if r.Sign() > 0 {
			q.Add(q, big.NewInt(1))
		}
		args = append(args, strconv.FormatInt(b, 10), strconv.FormatInt(p, 10))
		want = append(want, q.Int64())
	}
	got, err := c.Eval(context.Background(), script, nil, args...).Int64Slice()
	require.NoError(t, err)
	for i := range want {
		require.Equal(t, want[i], got[i], "ceilMilli(%s, %s)", args[2*i], args[2*i+1])
	}
}
