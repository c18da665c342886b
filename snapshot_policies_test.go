package chanlimit_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// Adversarial tests of snapshots with policies and overrides.

var (
	advPolicies = []chanlimit.Policy{
		{Name: "second", Limit: 4, Window: time.Second},
		{Name: "minute", Algorithm: "sliding_window_counter", Limit: 9, Window: time.Minute},
	}
	advVIP  = []chanlimit.Policy{{Name: "vip", Algorithm: "sliding_window_log", Limit: 6, Window: time.Minute}, {Name: "second", Algorithm: "gcra", Limit: 5, Window: time.Second, Burst: 3}}
	advGold = []chanlimit.Policy{{Name: "minute", Algorithm: "fixed_window", Limit: 7, Window: time.Minute}}
)

// advKeys are the keys the snapshot tests use: many with an override
// (sharing two sets of policies), some of them idle.
func advKeys() (plain, vip, gold, idle []string) {
	for i := range 12 {
		plain = append(plain, fmt.Sprint("plain-", i))
		vip = append(vip, fmt.Sprint("vip-", i))
	}
	for i := range 5 {
		gold = append(gold, fmt.Sprint("gold-", i))
		idle = append(idle, fmt.Sprint("idle-", i))
	}
	return plain, vip, gold, idle
}

// advSource returns a router with overrides and states, on clk.
func advSource(t *testing.T, partitions int) (*chanlimit.Router, *clock.Fake) {
	t.Helper()
	r, clk := newRouter(t, chanlimit.Config{Policies: advPolicies, Partitions: partitions, MaxOverrides: 30})
	plain, vip, gold, idle := advKeys()
	for _, k := range vip {
		require.NoError(t, r.SetOverride(bg, k, advVIP...))
	}
	for _, k := range gold {
		require.NoError(t, r.SetOverride(bg, k, advGold...))
	}
	for i, k := range idle { // overrides whose keys hold no state
		set := advVIP
		if i%2 == 0 {
			set = advGold
		}
		require.NoError(t, r.SetOverride(bg, k, set...))
	}
	for i, k := range append(append(plain, vip...), gold...) {
		allowN(t, r, k, 1+i%3)
		if i%4 == 0 {
			allowN(t, r, k, 1)
		}
	}
	clk.Advance(300 * time.Millisecond)
	return r, clk
}

// sameAnswers checks that a and b answer alike every key of advKeys, for
// n of 1 to 3, and hold as many overrides and keys.
func sameAnswers(t *testing.T, what string, a, b *chanlimit.Router) {
	t.Helper()
	plain, vip, gold, idle := advKeys()
	for _, k := range append(append(append(append(plain, vip...), gold...), idle...), "never") {
		for n := 1; n <= 3; n++ {
			da, erra := a.Peek(bg, k, n)
			db, errb := b.Peek(bg, k, n)
			assert.Equal(t, erra == nil, errb == nil, "%s: %s, n = %d: errors %v, %v", what, k, n, erra, errb)
			assert.Equal(t, da, db, "%s: %s, n = %d", what, k, n)
		}
	}
	sa, sb := stats(t, a), stats(t, b)
	assert.Equal(t, sa.Overrides, sb.Overrides, "%s: overrides", what)
	assert.Equal(t, sa.Keys, sb.Keys, "%s: keys", what)
}

func snapshotOf(t *testing.T, r *chanlimit.Router) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, r.Snapshot(bg, &buf))
	return buf.Bytes()
}

// TestRestoreOverridesIntoOtherPartitionCounts: a snapshot with overrides
// (shared by many keys, some idle) restores into routers of 1 to 7
// partitions, which answer as the source; their snapshots restore again,
// into yet other counts, and answer alike too.
func TestRestoreOverridesIntoOtherPartitionCounts(t *testing.T) {
	src, clk := advSource(t, 3)
	snap := snapshotOf(t, src)
	for _, parts := range []int{1, 2, 3, 5, 7} {
		t.Run(fmt.Sprint(parts), func(t *testing.T) {
			dst, err := chanlimit.New(chanlimit.Config{Policies: advPolicies, Partitions: parts, MaxOverrides: 30, Clock: clk})
			require.NoError(t, err)
			defer dst.Close()
			require.NoError(t, dst.SetOverride(bg, "plain-0", advGold...), "replaced by the restore")
			require.NoError(t, dst.Restore(bg, bytes.NewReader(snap)))
			sameAnswers(t, "restored", src, dst)
			assert.Equal(t, 22, stats(t, dst).Overrides)

			again := snapshotOf(t, dst)
			third, err := chanlimit.New(chanlimit.Config{Policies: advPolicies, Partitions: 8 - parts, MaxOverrides: 22, Clock: clk})
			require.NoError(t, err)
			defer third.Close()
			require.NoError(t, third.Restore(bg, bytes.NewReader(again)))
			sameAnswers(t, "restored twice", src, third)
		})
	}
}

// TestRestoredOverridesCountAgainstMaxOverrides: after a restore, the
// router's count of overrides is the snapshot's: at MaxOverrides a new one
// is refused; a cleared one makes room; a restored override can be changed
// and cleared, with its key's state carried.
func TestRestoredOverridesCountAgainstMaxOverrides(t *testing.T) {
	src, clk := advSource(t, 2)
	snap := snapshotOf(t, src)
	dst, err := chanlimit.New(chanlimit.Config{Policies: advPolicies, Partitions: 3, MaxOverrides: 22, Clock: clk})
	require.NoError(t, err)
	defer dst.Close()
	for i := range 5 { // overrides of its own, which the restore replaces
		require.NoError(t, dst.SetOverride(bg, fmt.Sprint("mine-", i), advVIP...))
	}
	require.NoError(t, dst.Restore(bg, bytes.NewReader(snap)))
	assert.Equal(t, 22, stats(t, dst).Overrides)
	assert.ErrorIs(t, dst.SetOverride(bg, "new", advVIP...), chanlimit.ErrTooManyOverrides, "22 of 22")
	require.NoError(t, dst.SetOverride(bg, "vip-0", advGold...), "changing one is fine")
	require.NoError(t, dst.ClearOverride(bg, "idle-0"))
	require.NoError(t, dst.SetOverride(bg, "new", advVIP...), "room for one")
	assert.ErrorIs(t, dst.SetOverride(bg, "newer", advVIP...), chanlimit.ErrTooManyOverrides)
	assert.Equal(t, 22, stats(t, dst).Overrides)

	// A restored override goes on as the source's: changed, cleared.
	for _, r := range []*chanlimit.Router{src, dst} {
		require.NoError(t, r.ClearOverride(bg, "vip-1"))
		require.NoError(t, r.SetOverride(bg, "gold-2", advVIP...))
	}
	for _, k := range []string{"vip-0", "vip-1", "gold-2"} {
		for n := 1; n <= 3; n++ {
			want, err := src.Peek(bg, k, n)
			require.NoError(t, err)
			if k == "vip-0" { // changed on dst only
				continue
			}
			assert.Equal(t, want, peekAt(t, dst, k, n), "%s, n = %d", k, n)
		}
	}
}

// TestRestoreRefusesAndKeepsOverrides: a snapshot refused (corrupted, or
// with more overrides than MaxOverrides) changes nothing: the router's own
// overrides and keys stay, and its count of overrides too.
func TestRestoreRefusesAndKeepsOverrides(t *testing.T) {
	src, clk := advSource(t, 2)
	snap := snapshotOf(t, src)
	dst, err := chanlimit.New(chanlimit.Config{Policies: advPolicies, Partitions: 2, MaxOverrides: 21, Clock: clk})
	require.NoError(t, err)
	defer dst.Close()
	require.NoError(t, dst.SetOverride(bg, "mine", advVIP...))
	allowN(t, dst, "mine", 2)
	mine := peekAt(t, dst, "mine", 1)
	err = dst.Restore(bg, bytes.NewReader(snap))
	require.ErrorIs(t, err, chanlimit.ErrTooManyOverrides)
	require.ErrorIs(t, err, chanlimit.ErrBadSnapshot)
	for cut := len(chanlimitMagic) + 1; cut < len(snap); cut += 37 {
		err := dst.Restore(bg, bytes.NewReader(resum(append([]byte(nil), snap[:cut]...))))
		require.ErrorIs(t, err, chanlimit.ErrBadSnapshot, "cut at %d", cut)
	}
	st := stats(t, dst)
	assert.Equal(t, 1, st.Overrides)
	assert.Equal(t, 1, st.Keys)
	assert.Equal(t, mine, peekAt(t, dst, "mine", 1))
	for i := range 20 {
		require.NoError(t, dst.SetOverride(bg, fmt.Sprint("more-", i), advGold...), "the count is still 1: room for 20 more")
	}
	assert.ErrorIs(t, dst.SetOverride(bg, "one-too-many", advGold...), chanlimit.ErrTooManyOverrides)
}

const chanlimitMagic = "chanlimit snapshot\n"

// TestRestoreOverridesSurviveAnotherRoundOfChanges: a restored router and
// its source, given the same changes of policies and overrides, answer
// alike, and an hour later, once their keys are let go (those under
// overrides too), still do.
func TestRestoreOverridesSurviveAnotherRoundOfChanges(t *testing.T) {
	src, clk := advSource(t, 4)
	snap := snapshotOf(t, src)
	dst, err := chanlimit.New(chanlimit.Config{Policies: advPolicies, Partitions: 2, MaxOverrides: 30, Clock: clk})
	require.NoError(t, err)
	defer dst.Close()
	require.NoError(t, dst.Restore(bg, bytes.NewReader(snap)))
	// The same changes on both: they must still answer alike.
	for _, r := range []*chanlimit.Router{src, dst} {
		require.NoError(t, r.SetPolicies(bg, advPolicies[1], chanlimit.Policy{Name: "second", Limit: 8, Window: time.Second}))
		require.NoError(t, r.ClearOverride(bg, "vip-3"))
		require.NoError(t, r.SetOverride(bg, "plain-3", advVIP...))
		require.NoError(t, r.SetOverride(bg, "gold-1", advVIP...))
	}
	sameAnswers(t, "after changes", src, dst)
	clk.Advance(time.Hour)
	for _, r := range []*chanlimit.Router{src, dst} {
		for range 30 { // let idle keys go, override tables one per burst
			allowN(t, r, "tick", 1)
			clk.Advance(time.Second)
		}
	}
	sameAnswers(t, "an hour later", src, dst)
	for range 40 { // each Stats is a message: a partition lets a few idle keys go after it
		stats(t, dst)
	}
	st := stats(t, dst)
	assert.LessOrEqual(t, st.Keys+st.Idle, 1, "only tick is held, even in override tables: %+v", st)
	assert.Equal(t, 22, st.Overrides)
}
