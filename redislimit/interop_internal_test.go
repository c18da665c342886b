package redislimit

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// v020 runs v0.2.0's script (testdata/v0.2.0/decide.lua, as released) on
// c as v0.2.0's store would call it: one request of kind on key, for n
// units, under one token bucket of limit a window, on Redis's clock, as
// call seq of the store "v020". It returns the script's answer: whether
// the call wrote, then the request's allowed and the policy's numbers
// (allowed, remaining, retry after, reset after, delay, rounding).
func v020(t *testing.T, c *redis.Client, key string, kind chanlimit.StoreOpKind, n int, limit int, window time.Duration, seq int) []int64 {
	t.Helper()
	src, err := os.ReadFile("testdata/v0.2.0/decide.lua")
	require.NoError(t, err)
	w := uint64(window / time.Microsecond)
	perUs, perToken := perUnits(uint64(limit), w)
	nums := []float64{
		float64(Grace.Milliseconds()), float64(ClockGrace.Milliseconds()), 60000, // graces, and how long a record is kept
		float64(seq), 0, // the lowest call out, and no calls kept below it
		1, 1, 1, float64(limit), float64(w), float64(limit), float64(perUs), float64(perToken), // one set: one token bucket
		float64(kind), float64(n), 1, -1, // the request, on Redis's clock
	}
	var blob []byte
	for _, v := range nums {
		blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(v))
	}
	out, err := c.Eval(context.Background(), string(src), []string{key}, blob, "v020", strconv.Itoa(seq), "token_bucket|default").Int64Slice()
	require.NoError(t, err)
	return out
}

// TestSharedWithV020: a router of v0.2.0 and one of this version, on one
// Redis, share a key's quota during a rolling deploy: each decides from
// what the other took, and the key's own entry ("@": its last write and
// generation), which v0.2.0 keeps as the state of a policy it does not
// know, survives v0.2.0's writes, so that a grant this version gives back
// afterwards still goes back. v0.2.0's script is the one it released.
func TestSharedWithV020(t *testing.T) {
	c := singleNode(t)
	s := newTestStore(t, c)
	ctx := context.Background()
	p := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 10, Window: time.Hour}}
	op := func(kind chanlimit.StoreOpKind, n int, grant uint64) chanlimit.Decision {
		t.Helper()
		ops := []chanlimit.StoreOp{{Kind: kind, Key: "k", N: n, Policies: p, Grant: grant}}
		s.Decide(ctx, ops)
		require.NoError(t, ops[0].Err)
		return ops[0].Decision
	}

	d := op(chanlimit.StoreAllow, 2, 0)
	require.True(t, d.Allowed)
	require.Equal(t, 8, d.Remaining)
	ops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
	s.Decide(ctx, ops)
	require.NoError(t, ops[0].Err)
	grant := ops[0].Grant
	require.Equal(t, 7, ops[0].Decision.Remaining)

	old := v020(t, c, s.Key("k"), chanlimit.StoreAllow, 3, 10, time.Hour, 1)
	require.Len(t, old, 8)
	assert.EqualValues(t, 1, old[1], "v0.2.0 allows")
	assert.EqualValues(t, 4, old[3], "v0.2.0 decides from what this version took: 3 of 10, then its 3")
	blob, err := c.Get(ctx, s.Key("k")).Result()
	require.NoError(t, err)
	assert.Contains(t, blob, "\x01\x00@", "v0.2.0 kept the key's own entry")
	assert.Contains(t, blob, "#v020:1", "and left its record")

	op(chanlimit.StoreGiveBack, 1, grant) // the grant of this version's second allow, given back across v0.2.0's write
	d = op(chanlimit.StorePeek, 1, 0)
	assert.True(t, d.Allowed)
	assert.Equal(t, 4, d.Remaining, "this version decides from what v0.2.0 took, and the unit given back: 10 - 6 + 1 - 1")

	old = v020(t, c, s.Key("k"), chanlimit.StorePeek, 1, 10, time.Hour, 2)
	require.Len(t, old, 8)
	assert.EqualValues(t, 4, old[3], "v0.2.0 reads this version's write")
	_ = op(chanlimit.StoreReset, 0, 0)
	old = v020(t, c, s.Key("k"), chanlimit.StorePeek, 1, 10, time.Hour, 3)
	assert.EqualValues(t, 9, old[3], "after this version's Reset, v0.2.0 finds the key afresh")
}
