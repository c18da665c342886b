package redislimit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// generalOnly is decide.lua with its fast path off: every request goes
// through serve.
var generalOnly = strings.Replace(decideLua, "    set.fast = MARK ..", "    set.fast = nil and MARK ..", 1)

// FuzzValue: whatever bytes a key holds, a call of an allow or a peek on
// it beside an allow on another key is answered: the other key is
// decided, and the key's request is decided or fails alone (-1, a
// corrupt key). The script's fast path, which no pcall guards, answers as
// its general path alone does, and leaves the key as it does. The seeds
// run with the tests; go test -fuzz FuzzValue . (through .ci/redis) tries
// more.
func FuzzValue(f *testing.F) {
	valid := "\xc2" + binEntry("token_bucket|default", 10, 3600000000, 10, 360000000, 1e15) + binEntry("@", 1e15, 7, 0, 0, 0)
	f.Add([]byte(valid), uint8(0), uint8(1))
	f.Add([]byte(valid+binEntry("#other:3", 4e12, 3, 1, 2)), uint8(1), uint8(2))
	f.Add([]byte(valid+binEntry("#x")+binEntry("#abc0Cxy", 1e12, 3)), uint8(0), uint8(1))
	f.Add([]byte(valid[:60]), uint8(0), uint8(1))
	f.Add([]byte("\xc2"+binEntry("fixed_window|default", 10, 3600000000, 10, 1e15, 4)+binEntry("@", 1e15, 7, 0, 0, 0)), uint8(2), uint8(3))
	f.Add([]byte("\xc2"+binEntry("token_bucket|default", 10, 3600000000, 10, 360000000, 1e15)), uint8(0), uint8(1)) // v0.2.0's: no "@"
	f.Add([]byte("garbage"), uint8(0), uint8(1))
	c := singleNode(f)
	s, err := NewStore(c, Options{Prefix: "fuzz:"})
	require.NoError(f, err)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, value []byte, how, n uint8) {
		p := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 10, Window: time.Hour}}
		if how&2 != 0 {
			p[0].Algorithm = "fixed_window"
		}
		kind := chanlimit.StoreAllow
		if how&1 != 0 {
			kind = chanlimit.StorePeek
		}
		now := time.UnixMicro(1_700_000_000_000_000) // the requests' own time: the two runs decide at the same instant
		ops := []chanlimit.StoreOp{
			{Kind: kind, Key: "k", N: 1 + int(n%10), Policies: p, Now: now},
			{Kind: chanlimit.StoreAllow, Key: "other", N: 1, Policies: p, Now: now},
		}
		calls := s.calls(ops)
		s.build(ops, calls)
		require.Len(t, calls, 1)
		var answers [2]string
		var kept [2]string
		for i, src := range []string{decideLua, generalOnly} {
			keys := []string{s.Key("k") + string(rune('0'+i)), s.Key("other") + string(rune('0'+i))}
			require.NoError(t, c.Del(ctx, keys...).Err())
			require.NoError(t, c.Set(ctx, keys[0], value, time.Minute).Err())
			out, err := c.Eval(ctx, src, keys, calls[0].args...).Text()
			require.NoError(t, err, "the call failed as a whole (%s)", []string{"with its fast path", "general path alone"}[i])
			answers[i] = out
			v, err := c.Get(ctx, keys[0]).Result()
			require.NoError(t, err)
			kept[i] = withoutRecords(v)
		}
		require.Equal(t, answers[1], answers[0], "the fast path answers as the general path")
		require.Equal(t, kept[1], kept[0], "and leaves the key as it does")
	})
}

// withoutRecords returns v less its records, which hold Redis's clock.
func withoutRecords(v string) string {
	if i := strings.Index(v, "\x00#"); i > 0 {
		return v[:i-1]
	}
	return v
}
