package redislimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// TestLargeLog: a sliding_window_log with 5,000 live entries (more
// numbers than Lua moves at once) is written and read, and the other
// keys of its calls are decided. Before, its write failed every call
// past about 4,000 entries.
func TestLargeLog(t *testing.T) {
	s := newTestStore(t, singleNode(t))
	ctx := context.Background()
	log := []chanlimit.Policy{{Name: "default", Algorithm: "sliding_window_log", Limit: 10000, Window: time.Minute}}
	other := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 10, Window: time.Minute}}
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	us := 0
	for round := range 40 {
		ops := make([]chanlimit.StoreOp, 0, MaxPerCall)
		for range MaxPerCall - 1 {
			us++
			ops = append(ops, chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: "log", N: 1, Policies: log, Now: base.Add(time.Duration(us) * time.Microsecond)})
		}
		ops = append(ops, chanlimit.StoreOp{Kind: chanlimit.StorePeek, Key: "other", N: 1, Policies: other, Now: base})
		s.Decide(ctx, ops)
		for i := range ops {
			require.NoError(t, ops[i].Err, "round %d, op %d", round, i)
		}
		assert.Equal(t, 10000-us, ops[len(ops)-2].Decision.Remaining, "round %d", round)
	}
}

// TestRecordKeptWhileAsked: a key that keeps another store's record
// lives as long as that record may be asked for, whoever writes it. Before,
// another store's write set the key's TTL to its own ResetAfter and
// Grace, and a retry of the first store's call, after that, was decided
// again.
func TestRecordKeptWhileAsked(t *testing.T) {
	c := singleNode(t)
	a := newTestStore(t, c)
	b, err := NewStore(c, Options{Prefix: a.prefix})
	require.NoError(t, err)
	ctx := context.Background()
	p := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: 2, Window: 200 * time.Millisecond}}
	ops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
	calls := a.calls(ops)
	a.build(ops, calls)
	a.send(ctx, calls, byScript) // a's call runs; say its answer is lost
	require.NoError(t, calls[0].cmd.Err())
	bops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "j", N: 1, Policies: p}, {Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
	b.Decide(ctx, bops) // j holds b's record; k keeps a's
	require.NoError(t, bops[1].Err)
	ttl, err := c.PTTL(ctx, a.Key("k")).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, a.replay-2*time.Second, "k lives as long as a may send its call again")
}

// TestManySetsInACall: 128 resets, each key under an override of its own
// of 10 and 11 policies (more numbers in the arguments than Lua moves at
// once): every one is served. Before, each such call failed as a whole.
func TestManySetsInACall(t *testing.T) {
	s := newTestStore(t, singleNode(t))
	ctx := context.Background()
	for _, np := range []int{5, 10, 11} {
		ops := make([]chanlimit.StoreOp, MaxPerCall)
		for i := range ops {
			var p []chanlimit.Policy
			for j := range np {
				p = append(p, chanlimit.Policy{Name: fmt.Sprint("p", j), Algorithm: "token_bucket", Limit: 100, Window: time.Minute})
			}
			ops[i] = chanlimit.StoreOp{Kind: chanlimit.StoreReset, Key: fmt.Sprint("k", i), Policies: p}
		}
		s.Decide(ctx, ops)
		for i := range ops {
			require.NoError(t, ops[i].Err, "%d policies, op %d", np, i)
		}
	}
}

// TestTimeOutsideRedis: a request whose time (Config.Clock) is before
// 1970 fails, with the reason (which the router wraps in
// ErrStoreUnavailable), instead of being
// decided on Redis's clock. Before, its negative time read as "Redis's
// clock".
func TestTimeOutsideRedis(t *testing.T) {
	s := newTestStore(t, singleNode(t))
	p := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: 1, Window: time.Hour}}
	ops := []chanlimit.StoreOp{
		{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p, Now: time.Time{}.Add(time.Hour)},
		{Kind: chanlimit.StoreAllow, Key: "j", N: 1, Policies: p},
	}
	s.Decide(context.Background(), ops)
	require.ErrorContains(t, ops[0].Err, "1970")
	require.NoError(t, ops[1].Err, "the other request is decided")
	assert.True(t, ops[1].Decision.Allowed)
}

// TestDenialBeforeAResetReplays: a call that denies a request and then
// resets its key keeps its answers too: sent again, it answers the
// denial, though the key is untouched by then. Before, the call left no
// record, and its replay allowed the request.
func TestDenialBeforeAResetReplays(t *testing.T) {
	s := newTestStore(t, singleNode(t))
	ctx := context.Background()
	p := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: 1, Window: time.Hour}}
	spend := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
	s.Decide(ctx, spend)
	require.NoError(t, spend[0].Err)
	ops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}, {Kind: chanlimit.StoreReset, Key: "k", Policies: p}}
	calls := s.calls(ops)
	s.build(ops, calls)
	s.send(ctx, calls, byScript)
	first, err := numbers(calls[0].cmd)
	require.NoError(t, err)
	require.EqualValues(t, 0, first[2], "denied: the key is spent (the policy's allowed, after the key's generation)")
	s.send(ctx, calls, byScript) // the client's retry
	again, err := numbers(calls[0].cmd)
	require.NoError(t, err)
	assert.Equal(t, first, again, "the first time's answers")
}

// TestRefundMakesNoState: a refund on a key without a state (here, just
// reset in the same call) leaves it without one. Before, it wrote a fresh
// state stamped with the refund's time.
func TestRefundMakesNoState(t *testing.T) {
	c := singleNode(t)
	s := newTestStore(t, c)
	ctx := context.Background()
	p := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 10, Window: time.Hour}}
	ops := []chanlimit.StoreOp{
		{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p},
		{Kind: chanlimit.StoreReset, Key: "k", Policies: p},
		{Kind: chanlimit.StoreRefund, Key: "k", N: 1, Policies: p},
	}
	s.Decide(ctx, ops)
	require.NoError(t, ops[0].Err)
	blob, err := c.Get(ctx, s.Key("k")).Result()
	require.NoError(t, err, "the key holds the call's record")
	assert.NotContains(t, blob, "token_bucket|default", "and no state")
}

// TestAnswersTheKeysGeneration: a request that takes nothing answers the
// generation the key holds, though its policies changed since (a peek
// under other params, and an allow they deny, the key being spent). Before, it answered the
// one drawn for it, which the key does not hold.
func TestAnswersTheKeysGeneration(t *testing.T) {
	c := singleNode(t)
	s := newTestStore(t, c)
	ctx := context.Background()
	// 10 a second, spent, at a last write in 2100 (so nothing refills).
	value := "\xc2" + binEntry("token_bucket|p", 10, 1000000, 10, 1000000, 4102444800000000) + binEntry("@", 4102444800000000, 111, 0, 0, 0)
	require.NoError(t, c.Set(ctx, s.Key("k"), value, time.Hour).Err())
	p := []chanlimit.Policy{{Name: "p", Algorithm: "token_bucket", Limit: 7, Window: time.Second}}
	for _, op := range []chanlimit.StoreOp{
		{Kind: chanlimit.StorePeek, Key: "k", N: 1, Policies: p},
		{Kind: chanlimit.StoreAllow, Key: "k", N: 7, Policies: []chanlimit.Policy{{Name: "p", Algorithm: "token_bucket", Limit: 7, Window: time.Hour}}},
	} {
		ops := []chanlimit.StoreOp{op}
		s.Decide(ctx, ops)
		require.NoError(t, ops[0].Err)
		assert.False(t, ops[0].Decision.Allowed, "%v: the key is spent", op.Kind)
		assert.EqualValues(t, 111, ops[0].Grant, "%v", op.Kind)
	}
}

// TestRecordsKeptWithTheCallsOwn: a key that gets its call's record keeps
// the records already there for as long as they may be asked for, through
// either of the script's paths: store B, whose client sends a call again
// for a minute, writes a key that holds store A's record, kept ten; the
// key lives ten minutes, not one. Before, the general path (two policies)
// let the key go with B's record, and A's with it.
func TestRecordsKeptWithTheCallsOwn(t *testing.T) {
	c := singleNode(t)
	ctx := context.Background()
	for name, p := range map[string][]chanlimit.Policy{
		"fast path":    {{Name: "p", Algorithm: "token_bucket", Limit: 10, Window: time.Second}},
		"general path": {{Name: "p", Algorithm: "token_bucket", Limit: 10, Window: time.Second}, {Name: "w", Algorithm: "fixed_window", Limit: 10, Window: time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := newTestStore(t, c), newTestStore(t, c)
			b.prefix = a.prefix // one key, two stores
			a.replay, b.replay = 10*time.Minute, time.Minute
			for _, s := range []*Store{a, b} {
				ops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
				s.Decide(ctx, ops)
				require.NoError(t, ops[0].Err)
			}
			ttl, err := c.PTTL(ctx, a.Key("k")).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, 9*time.Minute, "A's record may be asked for ten minutes")
		})
	}
}

// TestMoreUnitsThanCapacity: a store asked directly (not through a
// router, which refuses it first) for more units than a key's enforced
// policies can ever grant fails that request with ErrExceedsCapacity and
// decides the others of its call. Before, the request went to Redis,
// where a sliding window counter's wait for it divided by zero and the
// script never returned, holding Redis busy for every client.
func TestMoreUnitsThanCapacity(t *testing.T) {
	s := newTestStore(t, singleNode(t))
	counter := []chanlimit.Policy{{Name: "default", Algorithm: "sliding_window_counter", Limit: 2, Window: time.Second}}
	bucket := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 10, Window: time.Second, Burst: 3}}
	dry := []chanlimit.Policy{bucket[0], {Name: "shadow", Algorithm: "fixed_window", Limit: 1, Window: time.Second, DryRun: true}}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ops := []chanlimit.StoreOp{
		{Kind: chanlimit.StoreAllow, Key: "k", N: 3, Policies: counter, Now: now},
		{Kind: chanlimit.StorePeek, Key: "b", N: 4, Policies: bucket, Now: now},
		{Kind: chanlimit.StoreTurn, Key: "b", N: 4, Policies: bucket, Now: now},
		{Kind: chanlimit.StoreAllow, Key: "j", N: 1, Policies: counter, Now: now},
		{Kind: chanlimit.StoreAllow, Key: "d", N: 2, Policies: dry, Now: now}, // past the dry-run policy's capacity alone: it would deny
		{Kind: chanlimit.StoreRefund, Key: "j", N: 5, Policies: counter, Now: now},
	}
	s.Decide(context.Background(), ops)
	for i := range 3 {
		require.ErrorIs(t, ops[i].Err, chanlimit.ErrExceedsCapacity, "op %d", i)
	}
	for i := 3; i < len(ops); i++ {
		require.NoError(t, ops[i].Err, "op %d", i)
	}
	assert.True(t, ops[3].Decision.Allowed)
	assert.True(t, ops[4].Decision.Allowed, "the enforced policy allows")
}
