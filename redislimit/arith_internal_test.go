package redislimit

import (
	"context"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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

// TestKeptRecords: of a value's records, the script keeps another store's
// until they expire, and this store's own while an attempt of their call
// may come (at or above low, or kept); a record it cannot read whole, or
// anything but records after one, makes the value one it did not write. On Redis's Lua, against the
// records it should keep.
func TestKeptRecords(t *testing.T) {
	c := singleNode(t)
	helpers := decideLua[:strings.Index(decideLua, "-- decideCall decides one call")]
	script := helpers + `
bind()
local c = {mine = '#me:', mineLast = byte('e'), low = 10, keep = {[7] = true}, time = 1000000, clock = 1000}
local recs = {
  entry('#me:5', {2000, 5, 1, 2}), -- 1: its own, below low: goes
  entry('#me:7', {2000, 7, 3}),    -- 2: its own, below low, kept: stays
  entry('#me:12', {2000, 12, 4}),  -- 3: its own, at or above low: stays
  entry('#other:3', {3000, 3, 5}), -- 4: another store's: stays
  entry('#other:4', {999, 4, 6}),  -- 5: expired: goes
  entry('#me:x', {2500}),          -- 6: no call's number: stays
}
local cases = {
  table.concat(recs),
  recs[2] .. recs[4],                       -- all stay
  recs[1] .. recs[5],                       -- none stays
  recs[1] .. recs[4],                       -- the first goes, the rest stays
  recs[4] .. recs[1],                       -- the last goes
  entry('#x#me:5', {2000, 5, 1}) .. recs[1], -- '#me:' further in its name: another store's, which stays
  recs[4] .. string.sub(recs[3], 1, 10),    -- cut short
  recs[4] .. entry('token_bucket|x', {1, 2, 3, 4, 5}), -- a state after a record: records come last
  recs[4] .. spack('<H', 3) .. '#ab' .. spack('<I4', 0), -- a record of no numbers
}
local out = {}
for _, recsOf in ipairs(cases) do
  local ok, v = pcall(parse, MARK .. recsOf)
  if not (ok and v) then
    out[#out + 1], out[#out + 2] = false, -1
  else
    local kept, latest = keptOf(c, v.blob, v.recsAt)
    out[#out + 1], out[#out + 2] = kept, latest
  end
end
local want = {recs[2] .. recs[3] .. recs[4] .. recs[6], recs[2] .. recs[4], '', recs[4], recs[4], entry('#x#me:5', {2000, 5, 1})}
return {out, want}
`
	v, err := c.Eval(context.Background(), script, nil).Slice()
	require.NoError(t, err)
	out, want := v[0].([]any), v[1].([]any)
	require.Len(t, out, 18)
	for i, latest := range []int64{3000, 3000, 0, 3000, 3000, 2000} {
		assert.Equal(t, want[i], out[2*i], "case %d: the records kept", i+1)
		assert.Equal(t, latest, out[2*i+1], "case %d: the latest expiry", i+1)
	}
	require.Equal(t, []any{nil, int64(-1), nil, int64(-1), nil, int64(-1)}, out[12:], "not records: the key is corrupt")
}
