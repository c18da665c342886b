package redislimit

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// TestOneKeyManyOpsInACall: several requests on one key in one script
// call, each seeing what the ones before it did, whether the script
// serves them on its fast path (one fixed window) or its general one (a
// refund, a reset): an allow, another, a refund, a peek, a reset, an
// allow; then a peek in a call of its own.
func TestOneKeyManyOpsInACall(t *testing.T) {
	s := newTestStore(t, singleNode(t))
	ctx := context.Background()
	p := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: 5, Window: time.Hour}}
	op := func(kind chanlimit.StoreOpKind, n int) chanlimit.StoreOp {
		return chanlimit.StoreOp{Kind: kind, Key: "k", N: n, Policies: p}
	}
	ops := []chanlimit.StoreOp{
		op(chanlimit.StoreAllow, 1), op(chanlimit.StoreAllow, 2), op(chanlimit.StoreRefund, 1),
		op(chanlimit.StorePeek, 1), op(chanlimit.StoreReset, 0), op(chanlimit.StoreAllow, 1),
	}
	s.Decide(ctx, ops)
	for i := range ops {
		require.NoError(t, ops[i].Err, i)
	}
	assert.Equal(t, 4, ops[0].Decision.Remaining)
	assert.Equal(t, 2, ops[1].Decision.Remaining)
	assert.True(t, ops[3].Decision.Allowed)
	assert.Equal(t, 2, ops[3].Decision.Remaining, "after the refund: 2 taken, a peek of 1 leaves 2")
	assert.Equal(t, 4, ops[5].Decision.Remaining, "after the reset")
	peek := []chanlimit.StoreOp{op(chanlimit.StorePeek, 1)}
	s.Decide(ctx, peek)
	require.NoError(t, peek[0].Err)
	assert.Equal(t, 3, peek[0].Decision.Remaining)
}

// TestReadsV020Values: a key's value as v0.2.0's script wrote it (the
// script's layout, without the key's own entry, "@", which came after),
// records included, is read and carried over: the requests after it are
// decided from its state, and it is written back with its own entry.
func TestReadsV020Values(t *testing.T) {
	c := singleNode(t)
	s := newTestStore(t, c)
	ctx := context.Background()
	// token_bucket, Limit 10 per hour, 4 tokens used at a time far ahead of
	// any clock (the used units do not refill before the test ends).
	v020 := "\xc2" + binEntry("token_bucket|default", 10, 3600000000, 10, 4*360000000, 4102444800000000) +
		binEntry("#earlier:1", 4102444800000, 1, 1, 1, 6, 0, 0, 0)
	require.NoError(t, c.Set(ctx, s.Key("k"), v020, time.Minute).Err())
	p := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 10, Window: time.Hour}}
	ops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
	s.Decide(ctx, ops)
	require.NoError(t, ops[0].Err)
	assert.True(t, ops[0].Decision.Allowed)
	assert.Equal(t, 5, ops[0].Decision.Remaining, "4 taken before, 1 now")
	blob, err := c.Get(ctx, s.Key("k")).Bytes()
	require.NoError(t, err)
	assert.Equal(t, byte(0xC2), blob[0], "written back in the script's layout")
	assert.Contains(t, string(blob), "#earlier:1", "another store's record, kept while it lasts")
	assert.Contains(t, string(blob), "\x01\x00@", "the key's own entry, added")
}

// TestSetsToldApart: the script keeps the sets of policies it has met,
// across calls, by their first field; a set that differs from a kept one
// in a number (a limit changed by SetPolicies, a policy turned dry run)
// or in a field is decided as itself, in one call and across calls, as a
// Function and as a script.
func TestSetsToldApart(t *testing.T) {
	for _, how := range []callKind{byFunction, byScript} {
		t.Run(fmt.Sprint("how=", how), func(t *testing.T) {
			s := newTestStore(t, singleNode(t))
			ctx := context.Background()
			tb := func(limit int, dry bool, name string) []chanlimit.Policy {
				return []chanlimit.Policy{{Name: name, Algorithm: "token_bucket", Limit: limit, Window: time.Hour, DryRun: dry}}
			}
			sets := [][]chanlimit.Policy{tb(2, false, "default"), tb(1, false, "default"), tb(1, true, "default"), tb(1, false, "other")}
			// Two requests on a key of each set's own: what the second gets.
			type second struct{ allowed, wouldDeny bool }
			want := []second{{true, false}, {false, false}, {true, true}, {false, false}}
			for round := range 2 {
				var ops []chanlimit.StoreOp
				for i, p := range sets {
					for range 2 {
						ops = append(ops, chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: fmt.Sprint("r", round, "k", i), N: 1, Policies: p})
					}
				}
				calls := s.calls(ops)
				s.build(ops, calls)
				s.send(ctx, calls, how)
				for _, c := range calls {
					s.answer(ops, c)
				}
				for i := range sets {
					first, last := ops[2*i], ops[2*i+1]
					require.NoError(t, first.Err)
					require.NoError(t, last.Err)
					assert.True(t, first.Decision.Allowed, "round %d, set %d: the first request", round, i)
					assert.Equal(t, want[i], second{last.Decision.Allowed, last.Decision.WouldDeny}, "round %d, set %d: the second request", round, i)
				}
			}
		})
	}
}

// binEntry returns the bytes of an entry of the script's layout: the
// field's length and bytes, then its numbers' count and the numbers,
// little-endian doubles.
func binEntry(field string, nums ...float64) string {
	b := binary.LittleEndian.AppendUint16(nil, uint16(len(field)))
	b = append(b, field...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(nums)))
	for _, v := range nums {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return string(b)
}
