package keytable

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

func exitSet(limit int, window time.Duration, exit *string) *Set {
	m := exitsInAdopt{fixedWindow(limit, window), exit}
	return NewSet([]Policy{{Name: "p", Algorithm: "exits", Params: Params{Limit: limit, Window: window}, Rule: NewRule[algorithms.FixedWindowState](m)}})
}

// leftBehind returns keys k0, k1, ... (n of them), each with 1 taken at
// 0 from a fixed window of 3 a second, bounded by limit, whose switch at
// 100 ms to a window of 5 per window a Goexit in Adopt interrupted on its
// first key: that key is dropped, the others are left behind.
func leftBehind(t *testing.T, n int, limit Limit, window time.Duration) *Keys {
	t.Helper()
	var exit string
	k := NewKeys(exitSet(3, s, &exit))
	k.Bound(limit)
	for i := range n {
		allow(t, k, fmt.Sprint("k", i), 0, 1)
	}
	exit = "any"
	require.True(t, setPoliciesExiting(k, exitSet(5, window, &exit), 100*ms))
	exit = ""
	return k
}

// TestASwitchKeepsStateAcrossExpiry: an uninterrupted switch from a
// window of 1 s to one of 10 s keeps a key's count until 10 s, expiry
// run or not.
func TestASwitchKeepsStateAcrossExpiry(t *testing.T) {
	var exit string
	k := NewKeys(exitSet(3, s, &exit))
	for i := range 4 {
		allow(t, k, fmt.Sprint("k", i), 0, 1)
	}
	k.SetPolicies(exitSet(5, 10*s, &exit), 100*ms)
	k.Expire(2*s, 1000)
	d, err := peek(k, "k1", 2*s, 1)
	require.NoError(t, err)
	assert.Equal(t, 3, d.Remaining)
}

// TestKeysLeftBehindAreNotExpiredUnderTheOldPolicies: keys a switch left
// behind wait to be carried over, as of the switch: the old policies'
// idea of idle, at a later now, would lose state the new ones keep.
func TestKeysLeftBehindAreNotExpiredUnderTheOldPolicies(t *testing.T) {
	k := leftBehind(t, 4, Limit{}, 10*s)
	k.Expire(2*s, 1000) // the partition's expiry after a burst
	for _, key := range []string{"k0", "k1", "k2"} {
		d, err := peek(k, key, 2*s, 1)
		require.NoError(t, err)
		assert.Equal(t, 3, d.Remaining, "%s: 1 taken at 0 in a 10s window; state lost", key)
	}
}

// TestANewKeyEvictsAmongKeysLeftBehind: with EvictLRU, a new key that
// finds the cap reached, keys left behind included, evicts the least
// recently used, which is one of those, never ErrTooManyKeys.
func TestANewKeyEvictsAmongKeysLeftBehind(t *testing.T) {
	k := leftBehind(t, 4, Limit{Max: 4, Evict: true}, 10*s)
	_, err := tryAllow(k, "new1", 200*ms, 1) // room: the dropped key's place
	require.NoError(t, err)
	_, err = tryAllow(k, "new2", 200*ms, 1)
	assert.NoError(t, err, "EvictLRU: a new key evicts, never ErrTooManyKeys")
	assert.NotErrorIs(t, err, actor.ErrTooManyKeys)
	assert.NotEqual(t, none, k.def.slotOf("new1"), "new1, used at 200ms, is evicted before keys used at 0")
}

// TestIdleKeysLeftBehindMakeRoom: an idle key left behind makes room for
// a new key, as any idle key does.
func TestIdleKeysLeftBehindMakeRoom(t *testing.T) {
	k := leftBehind(t, 4, Limit{Max: 4}, s)
	// At 5s every key is idle under either policy. Without the switch, a new key
	// would make room by dropping an idle one.
	_, err := tryAllow(k, "new1", 5*s, 1)
	require.NoError(t, err)
	_, err = tryAllow(k, "new2", 5*s, 1)
	assert.NoError(t, err, "idle keys left behind should make room as idle keys do")
}

// TestExpireKeepsItsBudgetWithKeysLeftBehind: at most budget steps in
// all, keys left behind or not.
func TestExpireKeepsItsBudgetWithKeysLeftBehind(t *testing.T) {
	k := leftBehind(t, 10, Limit{}, 2*s)
	// carry 5 keys into def (they will be idle under 10ms window at 5s)
	for i := 1; i <= 5; i++ {
		peek(k, fmt.Sprint("k", i), 100*ms, 1)
	}
	dropped := k.Expire(5*s, 4)
	assert.LessOrEqual(t, dropped, 4, "at most budget steps in all")
}

// TestANewKeyEvictsAnUnpinnedKeyLeftBehind: with EvictLRU, a new key
// evicts an unpinned key left behind when the only key carried is pinned.
func TestANewKeyEvictsAnUnpinnedKeyLeftBehind(t *testing.T) {
	k := leftBehind(t, 4, Limit{Max: 4, Evict: true}, 10*s)
	k.Pin("w") // a caller waits on w
	allow(t, k, "w", 200*ms, 1)
	_, err := tryAllow(k, "x", 200*ms, 1)
	assert.NoError(t, err, "EvictLRU: unpinned keys k1..k3 could be evicted")
}

// exitsOnCall is a fixed window whose Adopt ends its goroutine on its
// call number at, counting in calls.
type exitsOnCall struct {
	*algorithms.FixedWindow
	calls *int
	at    int
}

func (m exitsOnCall) Adopt(s *algorithms.FixedWindowState, from algorithms.Machine[algorithms.FixedWindowState], now time.Duration) {
	*m.calls++
	if *m.calls == m.at {
		runtime.Goexit()
	}
	m.FixedWindow.Adopt(s, from.(exitsOnCall).FixedWindow, now)
}

// TestAGoexitAnywhereInASwitchDropsOneKey: whichever key of ten a Goexit
// in Adopt comes on, with eviction or without, that key alone starts
// afresh, and every other is carried over once, its count intact.
func TestAGoexitAnywhereInASwitchDropsOneKey(t *testing.T) {
	for _, evict := range []bool{false, true} {
		for at := 1; at <= 10; at++ {
			calls := 0
			mk := func(limit int) *Set {
				m := exitsOnCall{fixedWindow(limit, 10*s), &calls, at}
				return NewSet([]Policy{{Name: "p", Algorithm: "x", Params: Params{Limit: limit, Window: 10 * s}, Rule: NewRule[algorithms.FixedWindowState](m)}})
			}
			k := NewKeys(mk(5))
			k.Bound(Limit{Max: 100, Evict: evict})
			for i := range 10 {
				allow(t, k, fmt.Sprint("k", i), 0, 1+i%3)
			}
			calls = 0
			require.True(t, setPoliciesExiting(k, mk(7), 100*ms))
			calls = -1000
			assert.Equal(t, 9, k.Len())
			k.SetPolicies(mk(7), 200*ms)
			assert.Equal(t, 9, k.Len())
			lost := 0
			for i := range 10 {
				d, err := peek(k, fmt.Sprint("k", i), 300*ms, 1)
				require.NoError(t, err)
				switch d.Remaining {
				case 7 - 1:
					lost++
				case 7 - (1 + i%3) - 1:
				default:
					t.Errorf("evict=%v at=%d k%d remaining %d", evict, at, i, d.Remaining)
				}
			}
			if lost != 1 {
				t.Errorf("evict=%v at=%d lost %d keys", evict, at, lost)
			}
		}
	}
}

// panicsInResetAfter is a fixed window whose Adopt ends its goroutine
// while *exit is set, and whose ResetAfter panics while *panics is above
// 0, counting it down.
type panicsInResetAfter struct {
	*algorithms.FixedWindow
	exit   *string
	panics *int
}

func (m panicsInResetAfter) Adopt(s *algorithms.FixedWindowState, from algorithms.Machine[algorithms.FixedWindowState], now time.Duration) {
	if *m.exit != "" {
		runtime.Goexit()
	}
	m.FixedWindow.Adopt(s, from.(panicsInResetAfter).FixedWindow, now)
}

func (m panicsInResetAfter) ResetAfter(s *algorithms.FixedWindowState, now time.Duration) time.Duration {
	if *m.panics > 0 {
		*m.panics--
		panic("ResetAfter")
	}
	return m.FixedWindow.ResetAfter(s, now)
}

// TestAKeyLeftBehindDroppedByCountsFreesItsPlace: a rule that panics
// while Counts reads the keys left behind drops that key, and its place
// under the cap is free at once, not held back until the next carry.
func TestAKeyLeftBehindDroppedByCountsFreesItsPlace(t *testing.T) {
	var exit string
	panics := 0
	set := func(limit int, window time.Duration) *Set {
		m := panicsInResetAfter{fixedWindow(limit, window), &exit, &panics}
		return NewSet([]Policy{{Name: "p", Algorithm: "panics", Params: Params{Limit: limit, Window: window}, Rule: NewRule[algorithms.FixedWindowState](m)}})
	}
	k := NewKeys(set(3, s))
	k.Bound(Limit{Max: 4})
	for i := range 4 {
		allow(t, k, fmt.Sprint("k", i), 0, 1)
	}
	exit = "any"
	require.True(t, setPoliciesExiting(k, set(5, 10*s), 100*ms)) // k0 dropped; k1..k3 behind
	exit = ""
	require.Equal(t, 3, k.Capped())

	before := k.Counts(100 * ms).Panicked
	panics = 1
	c := k.Counts(2 * s) // the idle count of behind: a panic drops one of its keys
	require.Equal(t, before+1, c.Panicked)
	require.Equal(t, 2, k.Capped())

	for _, key := range []string{"new1", "new2"} {
		_, err := tryAllow(k, key, 2*s, 1)
		assert.NoError(t, err, "%s: 2 keys under a cap of 4, so room for 2 more", key)
	}
}
