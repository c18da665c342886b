package chanlimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// The rows of README's table "What a key keeps when its policies change",
// each with the numbers of its example.

const ms = time.Millisecond

// TestCarryBucketKeepsItsTokens: same name, same algorithm, a new Limit:
// the bucket keeps its tokens and refills at the new rate; a new Burst caps
// them.
func TestCarryBucketKeepsItsTokens(t *testing.T) {
	for _, algorithm := range []string{"token_bucket", "gcra"} {
		t.Run(algorithm, func(t *testing.T) {
			r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "second", Algorithm: algorithm, Limit: 10, Window: time.Second}}})
			require.True(t, allowN(t, r, "alice", 7).Allowed) // 3 tokens left
			require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "second", Algorithm: algorithm, Limit: 20, Window: time.Second}))
			d := peekAt(t, r, "alice", 4)
			assert.False(t, d.Allowed)
			assert.Equal(t, 3, d.Remaining, "the 3 tokens are kept")
			assert.Equal(t, 50*ms, d.RetryAfter, "the fourth comes at the new rate, 20 a second")
			assert.Equal(t, 20, d.Limit)

			require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "second", Algorithm: algorithm, Limit: 10, Window: time.Second, Burst: 2}))
			d = peekAt(t, r, "alice", 1)
			assert.Equal(t, 1, d.Remaining, "capped at the new Burst: 2 tokens, 1 after this one")

			// Fractions of a token are kept too: 1.5 tokens at 1 a second.
			clk.Advance(time.Second)
			require.True(t, allowN(t, r, "bob", 2).Allowed)
			clk.Advance(150 * ms) // 1.5 tokens
			require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "second", Algorithm: algorithm, Limit: 1, Window: time.Second, Burst: 2}))
			assert.Equal(t, 500*ms, peekAt(t, r, "bob", 2).RetryAfter, "half a token to go, at 1 a second")
		})
	}
}

// TestCarryQueueKeepsItsWork: leaky_bucket, a shaper, keeps the work it
// admitted: the queue drains when it would have, and the room left is
// counted at the new rate.
func TestCarryQueueKeepsItsWork(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "second", Algorithm: "leaky_bucket", Limit: 10, Window: time.Second}}})
	require.True(t, allowN(t, r, "alice", 7).Allowed) // queued until 700ms
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "second", Algorithm: "leaky_bucket", Limit: 20, Window: time.Second}))
	d := allowN(t, r, "alice", 4)
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 20, Remaining: 2, ResetAfter: 900 * ms, Delay: 700 * ms, Policy: "second"}, d,
		"700ms of work ahead is 14 units at 20 a second: room for 6, and the 4 start at 700ms")

	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "second", Algorithm: "leaky_bucket", Limit: 10, Window: time.Second, Burst: 2}))
	d = peekAt(t, r, "alice", 1)
	assert.Equal(t, 100*ms, d.RetryAfter, "900ms of work capped at a queue of 2: full for 200ms")
}

// TestCarryWindowKeepsItsCounts: same name, same algorithm, a new Limit
// and Window: a window keeps its count (capped at the new Limit) and its
// start, read under the new Window.
func TestCarryWindowKeepsItsCounts(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "minute", Algorithm: "fixed_window", Limit: 100, Window: time.Minute}}})
	require.True(t, allowN(t, r, "alice", 60).Allowed) // the window opens at 0
	clk.Advance(10 * time.Second)
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "minute", Algorithm: "fixed_window", Limit: 50, Window: 30 * time.Second}))
	d := peekAt(t, r, "alice", 1)
	assert.Equal(t, chanlimit.Decision{Limit: 50, RetryAfter: 20 * time.Second, ResetAfter: 20 * time.Second, Policy: "minute"}, d,
		"60 capped at 50: full until the window, opened at 0, ends at 30s")
	clk.Advance(20 * time.Second)
	assert.True(t, allowN(t, r, "alice", 50).Allowed, "a new window")
}

// TestCarryLogKeepsItsEntries: the log keeps its entries, read under the
// new Window, the oldest dropped past the new Limit.
func TestCarryLogKeepsItsEntries(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "minute", Algorithm: "sliding_window_log", Limit: 10, Window: time.Minute}}})
	for range 3 { // 3 units at 0s, 10s and 20s
		require.True(t, allowN(t, r, "alice", 3).Allowed)
		clk.Advance(10 * time.Second)
	}
	// At 30s: 4 a half-minute. The entry at 0s is out of the new window;
	// 10s and 20s hold 6 units, capped at 4: 1 of 10s's and 3 of 20s's.
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "minute", Algorithm: "sliding_window_log", Limit: 4, Window: 30 * time.Second}))
	d := peekAt(t, r, "alice", 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 10*time.Second, d.RetryAfter, "the unit of 10s leaves the window at 40s")
	assert.Equal(t, 20*time.Second, d.ResetAfter, "20s's leave at 50s")
}

// TestCarryOtherAlgorithmOrNameStartsUntouched: a policy whose algorithm
// changed, or whose name is new, starts untouched; a removed one's state
// is gone, so adding it back starts untouched too.
func TestCarryOtherAlgorithmOrNameStartsUntouched(t *testing.T) {
	second := chanlimit.Policy{Name: "second", Limit: 10, Window: time.Second}
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{second}})
	require.True(t, allowN(t, r, "alice", 10).Allowed)

	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "second", Algorithm: "gcra", Limit: 10, Window: time.Second}))
	assert.Equal(t, 9, allowN(t, r, "alice", 1).Remaining, "another algorithm: a full bucket again")

	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "second", Algorithm: "gcra", Limit: 10, Window: time.Second},
		chanlimit.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}))
	d := allowN(t, r, "alice", 1)
	assert.Equal(t, 8, d.Remaining, "second kept its 8, and decides")
	require.True(t, allowN(t, r, "alice", 8).Allowed)
	d = peekAt(t, r, "alice", 1)
	assert.Equal(t, "second", d.Policy)

	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}))
	assert.Equal(t, 990, peekAt(t, r, "alice", 1).Remaining, "second is gone; day kept its 991 tokens (990 after the one peeked)")
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "second", Algorithm: "gcra", Limit: 10, Window: time.Second},
		chanlimit.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}))
	assert.Equal(t, 9, peekAt(t, r, "alice", 1).Remaining, "second, added back, starts untouched")

	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "sec", Algorithm: "gcra", Limit: 10, Window: time.Second}))
	assert.Equal(t, 9, peekAt(t, r, "alice", 1).Remaining, "renamed: a new policy")
}

// TestCarryOverrides: a key moves between the router's policies and its
// override by the same rule, policy by policy.
func TestCarryOverrides(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "second", Limit: 10, Window: time.Second}}})
	require.True(t, allowN(t, r, "acme", 4).Allowed) // 6 tokens left
	require.NoError(t, r.SetOverride(bg, "acme", chanlimit.Policy{Name: "second", Limit: 100, Window: time.Second}))
	d := peekAt(t, r, "acme", 1)
	assert.Equal(t, 5, d.Remaining, "its 6 tokens are kept, under a bucket of 100")
	require.True(t, allowN(t, r, "acme", 6).Allowed)
	require.NoError(t, r.ClearOverride(bg, "acme"))
	assert.False(t, peekAt(t, r, "acme", 1).Allowed, "no tokens left, back under 10 a second")

	require.NoError(t, r.SetOverride(bg, "beta", chanlimit.Policy{Name: "vip", Limit: 100, Window: time.Second}))
	require.True(t, allowN(t, r, "beta", 100).Allowed)
	require.NoError(t, r.ClearOverride(bg, "beta"))
	assert.Equal(t, 9, peekAt(t, r, "beta", 1).Remaining, "vip is not second: beta starts untouched")
}

// TestCarryAnIdleKeyIsAsNeverSeen: a key idle under its old policy, which
// its partition may or may not have let go yet, starts untouched under the
// new one, as a key never seen does: a full bucket of 10 is not 10 tokens
// of a bucket of 20.
func TestCarryAnIdleKeyIsAsNeverSeen(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "second", Limit: 10, Window: time.Second}}, Partitions: 1})
	require.True(t, allowN(t, r, "alice", 1).Allowed)
	clk.Advance(500 * ms) // full again: idle, within its grace
	require.Equal(t, 1, stats(t, r).Idle)
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "second", Limit: 20, Window: time.Second}))
	assert.Equal(t, peekAt(t, r, "bob", 20), peekAt(t, r, "alice", 20), "alice decides as bob, never seen")
	assert.True(t, peekAt(t, r, "alice", 20).Allowed)
	st := stats(t, r)
	assert.Zero(t, st.Keys+st.Idle, "let go in the switch")
	assert.Equal(t, uint64(1), st.Expired)
}
