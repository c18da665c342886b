package keytable

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// exitsInAdopt is a fixed window whose Adopt ends its goroutine
// (runtime.Goexit) on the key named exit, and adopts the others.
type exitsInAdopt struct {
	*algorithms.FixedWindow
	exit *string
}

func (m exitsInAdopt) Adopt(s *algorithms.FixedWindowState, from algorithms.Machine[algorithms.FixedWindowState], now time.Duration) {
	if *m.exit != "" {
		runtime.Goexit()
	}
	m.FixedWindow.Adopt(s, from.(exitsInAdopt).FixedWindow, now)
}

// setPoliciesExiting runs k.SetPolicies(set, now) on a goroutine of its
// own, which the rule may end, doing on the way out what a partition does
// (Abandoned), and reports whether the goroutine ended.
func setPoliciesExiting(k *Keys, set *Set, now time.Duration) (ended bool) {
	done := make(chan bool)
	go func() {
		returned := false
		defer func() {
			if !returned {
				k.Abandoned()
			}
			done <- !returned
		}()
		k.SetPolicies(set, now)
		returned = true
	}()
	return <-done
}

// TestASwitchIsInstalledInOneStep: a switch of the router's policies that
// a rule interrupts by ending the goroutine is installed all the same,
// with nothing left to finish it: the key the rule was on is dropped, as
// for a panic, and each other key decides with its state carried over to
// the new policies, held and counted under the cap as before, the cap
// refusing a new key only once the keys carried and not yet carried fill
// it. Asked again, SetPolicies carries the rest as of the switch.
// (It failed before: the partition's next goroutine had to finish the
// switch, and until it did every key decided under the old policies.)
func TestASwitchIsInstalledInOneStep(t *testing.T) {
	var exit string
	newSet := func(limit int) *Set {
		m := exitsInAdopt{fixedWindow(limit, s), &exit}
		return NewSet([]Policy{{Name: "p", Algorithm: "exits", Params: Params{Limit: limit, Window: s}, Rule: NewRule[algorithms.FixedWindowState](m)}})
	}
	k := NewKeys(newSet(3))
	k.Bound(Limit{Max: 9})
	for i := range 9 {
		allow(t, k, fmt.Sprint("k", i), 0, 1)
	}
	five := newSet(5)
	// Adopt ends the goroutine on its first call: the key it is on is
	// the one left untouched below.
	exit = "any"
	require.True(t, setPoliciesExiting(k, five, 100*ms))
	exit = ""

	assert.Same(t, five, k.Set(), "the new policies are the router's at once")
	assert.Equal(t, 8, k.Len(), "the key the rule was on is dropped; the others are held")
	assert.Equal(t, 8, k.Capped())
	assert.Equal(t, uint64(1), k.Counts(100*ms).Panicked)

	// A new key fills the cap's last place; the next finds none, though
	// only one key has been carried to the new table yet.
	allow(t, k, "new", 100*ms, 1)
	_, err := tryAllow(k, "another", 100*ms, 1)
	require.ErrorIs(t, err, actor.ErrTooManyKeys)

	dropped := 0
	peekAll := func(keys []string, now time.Duration) {
		for _, key := range keys {
			d, err := peek(k, key, now, 1)
			if errors.Is(err, actor.ErrTooManyKeys) {
				dropped++ // a new key, for which the full table has no room
				continue
			}
			require.NoError(t, err)
			assert.Equal(t, 3, d.Remaining, "%s: 1 taken at 0 in this window, now under a limit of 5", key)
		}
	}
	peekAll([]string{"k0", "k1", "k2", "k3"}, 200*ms) // each carried as it is asked about
	k.SetPolicies(five, 300*ms)                       // carries the rest, as of the switch
	assert.Equal(t, 9, k.Capped())
	peekAll([]string{"k4", "k5", "k6", "k7", "k8"}, 300*ms)
	assert.Equal(t, 1, dropped, "only the key the rule was on is dropped")
	assert.Equal(t, 9, k.Len())
	_, err = tryAllow(k, "another", 300*ms, 1)
	require.ErrorIs(t, err, actor.ErrTooManyKeys, "the cap holds once every key is carried")
}

// TestASwitchInterruptedKeepsTheOrderOfUse: with eviction on, a switch
// carries the keys over newest use first, each to the oldest end of the
// new table's order; one a rule interrupts on its first key drops that
// key, and carries the others in the same order, so that the next key
// evicted is the oldest used of those left.
func TestASwitchInterruptedKeepsTheOrderOfUse(t *testing.T) {
	var exit string
	newSet := func(limit int) *Set {
		m := exitsInAdopt{fixedWindow(limit, s), &exit}
		return NewSet([]Policy{{Name: "p", Algorithm: "exits", Params: Params{Limit: limit, Window: s}, Rule: NewRule[algorithms.FixedWindowState](m)}})
	}
	k := NewKeys(newSet(3))
	k.Bound(Limit{Max: 4, Evict: true})
	for _, key := range []string{"a", "b", "c", "d"} {
		allow(t, k, key, 0, 1)
	}
	allow(t, k, "a", 0, 1) // a is used last: b is the oldest
	five := newSet(5)
	exit = "any"
	require.True(t, setPoliciesExiting(k, five, 100*ms))
	exit = ""
	k.SetPolicies(five, 100*ms)
	assert.Equal(t, none, k.def.slotOf("a"), "the newest used, which the rule ended the goroutine on")
	assert.Equal(t, 3, k.Len())

	allow(t, k, "e", 200*ms, 1) // room for one
	allow(t, k, "f", 200*ms, 1) // evicts the oldest used left: b
	for key, want := range map[string]bool{"a": false, "b": false, "c": true, "d": true, "e": true, "f": true} {
		assert.Equal(t, want, k.def.slotOf(key) != none, key)
	}
}
