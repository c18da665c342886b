package lincheck

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// bucket is the policy the step tables use: 10 units a second, 5 at
// most, so a unit refills in 100 ms.
var bucket = []chanlimit.Policy{{Name: "p", Algorithm: "token_bucket", Limit: 10, Window: time.Second, Burst: 5}}

// step is one operation of a step table, and whether the specification
// allows it after the ones before.
type step struct {
	in   Input
	out  Output
	fits bool
}

// run walks steps through m, keeping every state the specification may
// be in, and checks that each step fits, or does not, as it says. A step
// that does not fit leaves the states as they were.
func run(t *testing.T, m *Model, steps []step) {
	t.Helper()
	states := []*state{m.init()}
	for i, st := range steps {
		var next []*state
		seen := map[string]bool{}
		for _, s := range states {
			for _, n := range m.Step(s, st.in, st.out) {
				if !seen[n.id] {
					seen[n.id] = true
					next = append(next, n)
				}
			}
		}
		if !assert.Equal(t, st.fits, len(next) > 0, "step %d: %s", i, describe(st.in, st.out)) {
			return
		}
		if st.fits {
			states = next
		}
	}
}

func allowed(remaining int, reset time.Duration) Output {
	return Output{D: chanlimit.Decision{Allowed: true, Limit: 10, Remaining: remaining, ResetAfter: reset, Policy: "p"}}
}

func denied(remaining int, retry, reset time.Duration) Output {
	return Output{D: chanlimit.Decision{Limit: 10, Remaining: remaining, RetryAfter: retry, ResetAfter: reset, Policy: "p"}}
}

func at(ts ...time.Duration) []time.Duration { return ts }

const ms = time.Millisecond

// Through a Store, a request is decided at the later of its own time and
// the key's last write, and tells its waits from its own time.
func TestStoreDecidesAtTheLatestWrite(t *testing.T) {
	m, err := NewModel(bucket, Options{Store: true})
	require.NoError(t, err)
	take5 := Input{Kind: Allow, Key: "k", N: 5, ID: 1, Times: at(200 * ms)}
	late := Input{Kind: Allow, Key: "k", N: 1, ID: 2, Times: at(100 * ms)}
	t.Run("at the write", func(t *testing.T) {
		run(t, m, []step{
			{take5, allowed(0, 500*ms), true},
			{late, denied(0, 200*ms, 600*ms), true}, // decided at 200 ms: 100 ms to wait, and 100 ms ahead
		})
	})
	t.Run("never at its own time", func(t *testing.T) {
		run(t, m, []step{
			{take5, allowed(0, 500*ms), true},
			{late, denied(0, 100*ms, 500*ms), false}, // as if decided at 200 ms, told from there
		})
	})
	t.Run("a Peek writes nothing", func(t *testing.T) {
		run(t, m, []step{
			{Input{Kind: Peek, Key: "k", N: 1, Times: at(300 * ms)}, allowed(4, 100*ms), true},
			{take5, allowed(0, 500*ms), true}, // sent earlier, decided after the Peek, at its own time
		})
	})
}

// A caller who left holds its grant until its give-back lands, which
// gives it back to the state it came from, never across a Reset.
func TestStoreGiveBacks(t *testing.T) {
	m, err := NewModel(bucket, Options{Store: true})
	require.NoError(t, err)
	left := Input{Kind: Allow, Key: "k", N: 5, ID: 1, Times: at(0)}
	gone := Output{Outcome: Left}
	back := Input{Kind: GiveBack, Key: "k", N: 5, ID: 1}
	all := Input{Kind: Allow, Key: "k", N: 5, ID: 2, Times: at(0)}
	reset := Input{Kind: Reset, Key: "k", Times: at(0)}
	t.Run("held until it lands", func(t *testing.T) {
		run(t, m, []step{
			{left, gone, true},
			{all, allowed(0, 500*ms), true}, // it may never have been decided
			{back, Output{}, true},
		})
		run(t, m, []step{
			{left, gone, true},
			{Input{Kind: Peek, Key: "k", N: 1, Times: at(0)}, denied(0, 100*ms, 500*ms), true}, // or granted, and held
			{back, Output{}, true},
			{all, allowed(0, 500*ms), true}, // given back
		})
	})
	t.Run("never across a Reset", func(t *testing.T) {
		run(t, m, []step{
			{left, gone, true},
			{Input{Kind: Peek, Key: "k", N: 1, Times: at(0)}, denied(0, 100*ms, 500*ms), true}, // granted
			{reset, Output{}, true},
			{all, allowed(0, 500*ms), true},
			{back, Output{}, true},
			{Input{Kind: Allow, Key: "k", N: 5, ID: 3, Times: at(0)}, allowed(0, 500*ms), false}, // 10 units at one instant
		})
	})
	t.Run("not before its request", func(t *testing.T) {
		run(t, m, []step{{back, Output{}, false}})
	})
}

// A waiter's turn through a Store takes only if it is granted with no
// Delay; one that must wait takes nothing.
func TestStoreTurns(t *testing.T) {
	leaky := []chanlimit.Policy{{Name: "p", Algorithm: "leaky_bucket", Limit: 10, Window: time.Second, Burst: 5}}
	m, err := NewModel(leaky, Options{Store: true})
	require.NoError(t, err)
	first := Input{Kind: Allow, Key: "k", N: 1, ID: 1, Times: at(0)}
	turn := Input{Kind: Wait, Key: "k", N: 1, ID: 2, Times: at(0, 100*ms)}
	granted := allowed(4, 100*ms) // the first unit drained
	run(t, m, []step{
		{first, allowed(4, 100*ms), true},
		{turn, granted, true}, // at 100 ms, with no Delay; at 0 it would have had one
	})
	run(t, m, []step{
		{first, allowed(4, 100*ms), true},
		{Input{Kind: Wait, Key: "k", N: 1, ID: 2, Times: at(0)}, granted, false},
	})
}

// In memory, the clock's moves set the instant calls are decided at.
func TestMemoryFollowsTheClock(t *testing.T) {
	m, err := NewModel(bucket, Options{})
	require.NoError(t, err)
	take5 := Input{Kind: Allow, Key: "k", N: 5, ID: 1}
	one := Input{Kind: Allow, Key: "k", N: 1, ID: 2}
	run(t, m, []step{
		{take5, allowed(0, 500*ms), true},
		{Input{Kind: Advance, At: 100 * ms}, Output{}, true},
		{one, allowed(0, 500*ms), true},
		{Input{Kind: Advance, At: 50 * ms}, Output{}, false}, // the clock never goes back
		{one, allowed(0, 500*ms), false},                     // nothing refilled
	})
}
