package lincheck

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// heldOut is the answer of a request denied by a hold: no Policy, no
// Limit, nothing left.
func heldOut(retry, reset time.Duration) Output {
	return Output{D: chanlimit.Decision{RetryAfter: retry, ResetAfter: reset}}
}

func holdFor(d time.Duration) Input { return Input{Kind: Hold, Key: "k", For: d} }

func advance(to time.Duration) Input { return Input{Kind: Advance, At: to} }

// A key held is denied, taking nothing, with the wait until the hold's
// end and then the policies' own wait at the end; the answer is exact to
// the nanosecond, and one granted while held never fits.
func TestMemoryHoldDenies(t *testing.T) {
	m, err := NewModel(bucket, Options{})
	require.NoError(t, err)
	take5 := Input{Kind: Allow, Key: "k", N: 5, ID: 1}
	one := Input{Kind: Allow, Key: "k", N: 1, ID: 2}
	three := Input{Kind: Allow, Key: "k", N: 3, ID: 3}
	peek3 := Input{Kind: Peek, Key: "k", N: 3}
	// Empty at 0 and held until 200 ms, when 2 units are back: one unit
	// waits for the end, three for 100 ms more; the key is untouched at
	// 500 ms.
	before := []step{
		{take5, allowed(0, 500*ms), true},
		{holdFor(200 * ms), Output{}, true},
	}
	for _, c := range []struct {
		name string
		give []step
	}{
		{"exact", []step{{one, heldOut(200*ms, 500*ms), true}, {three, heldOut(300*ms, 500*ms), true}, {peek3, heldOut(300*ms, 500*ms), true}}},
		{"RetryAfter 1ns long", []step{{one, heldOut(200*ms+1, 500*ms), false}}},
		{"RetryAfter 1ns short", []step{{three, heldOut(300*ms-1, 500*ms), false}}},
		{"ResetAfter the hold's alone", []step{{one, heldOut(200*ms, 200*ms), false}}},
		{"denied by the policy", []step{{one, denied(0, 100*ms, 500*ms), false}}},
		{"granted while held", []step{{advance(100 * ms), Output{}, true}, {one, allowed(0, 500*ms), false}}},
		{"a batch's items", []step{{Input{Kind: Batch, Key: "k", Ns: []int{1, 3}}, Output{Ds: []chanlimit.Decision{heldOut(200*ms, 500*ms).D, heldOut(300*ms, 500*ms).D}}, true}}},
		{"a batch's item granted", []step{{Input{Kind: Batch, Key: "k", Ns: []int{1}}, Output{Ds: []chanlimit.Decision{allowed(0, 500*ms).D}}, false}}},
		{"1ns before the end, then at it", []step{
			{advance(200*ms - 1), Output{}, true},
			{one, heldOut(1, 300*ms+1), true},
			{advance(200 * ms), Output{}, true},
			{one, allowed(1, 400*ms), true}, // nothing was taken meanwhile
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run(t, m, append(append([]step(nil), before...), c.give...))
		})
	}
}

// A later Hold moves the end only later; one of 0 or less changes
// nothing; one whose caller left may or may not have held.
func TestMemoryHoldOnlyMovesLater(t *testing.T) {
	m, err := NewModel(bucket, Options{})
	require.NoError(t, err)
	peek := Input{Kind: Peek, Key: "k", N: 1}
	t.Run("shorter", func(t *testing.T) {
		run(t, m, []step{
			{holdFor(500 * ms), Output{}, true},
			{advance(100 * ms), Output{}, true},
			{holdFor(100 * ms), Output{}, true},
			{peek, heldOut(200*ms, 200*ms), false}, // as if the end were 200 ms
			{peek, heldOut(400*ms, 400*ms), true},
			{holdFor(600 * ms), Output{}, true},
			{peek, heldOut(600*ms, 600*ms), true},
		})
	})
	t.Run("nothing", func(t *testing.T) {
		run(t, m, []step{
			{holdFor(0), Output{}, true},
			{holdFor(-1), Output{}, true},
			{peek, heldOut(1, 1), false},
			{peek, allowed(4, 100*ms), true},
		})
	})
	t.Run("left", func(t *testing.T) {
		gone := Output{Outcome: Left}
		run(t, m, []step{
			{holdFor(time.Second), gone, true},
			{peek, allowed(4, 100*ms), true}, // never held
		})
		run(t, m, []step{
			{holdFor(time.Second), gone, true},
			{peek, heldOut(time.Second, time.Second), true}, // or held
		})
	})
}

// Reset ends a hold.
func TestMemoryHoldEndsWithReset(t *testing.T) {
	m, err := NewModel(bucket, Options{})
	require.NoError(t, err)
	take5 := Input{Kind: Allow, Key: "k", N: 5, ID: 1}
	run(t, m, []step{
		{holdFor(time.Hour), Output{}, true},
		{take5, heldOut(time.Hour, time.Hour), true},
		{Input{Kind: Reset, Key: "k"}, Output{}, true},
		{take5, heldOut(time.Hour, time.Hour), false},
		{take5, allowed(0, 500*ms), true},
	})
}

// A hold takes nothing from a dry-run policy, and a denial by it would
// deny nothing.
func TestMemoryHoldTakesNothingFromDryRun(t *testing.T) {
	policies := append([]chanlimit.Policy{{Name: "dry", Algorithm: "fixed_window", Limit: 1, Window: time.Second, DryRun: true}}, bucket...)
	m, err := NewModel(policies, Options{})
	require.NoError(t, err)
	one := Input{Kind: Allow, Key: "k", N: 1, ID: 1}
	wouldDeny := allowed(3, 200*ms)
	wouldDeny.D.WouldDeny = true
	wrong := heldOut(100*ms, 100*ms)
	wrong.D.WouldDeny = true
	run(t, m, []step{
		{holdFor(100 * ms), Output{}, true},
		{one, wrong, false},
		{one, heldOut(100*ms, 100*ms), true},
		{advance(100 * ms), Output{}, true},
		{one, wouldDeny, false}, // as if the denial had taken the dry-run policy's unit
		{one, allowed(4, 100*ms), true},
		{one, wouldDeny, true},
	})
}

// Waiters keep their places while a key is held, and are served from its
// end; a request that finds the line is told its wait in it from the end.
func TestMemoryHoldKeepsTheLine(t *testing.T) {
	m, err := NewModel(bucket, Options{})
	require.NoError(t, err)
	join := Input{Kind: Join, Key: "k", N: 1, ID: 1}
	done := Input{Kind: Done, Key: "k", N: 1, ID: 1}
	one := Input{Kind: Allow, Key: "k", N: 1, ID: 2}
	granted := allowed(4, 100*ms)
	t.Run("joined while held", func(t *testing.T) {
		run(t, m, []step{
			{holdFor(200 * ms), Output{}, true},
			{join, granted, true},
			{advance(100 * ms), Output{}, true},
			{done, granted, false}, // not before the end
			{one, heldOut(100*ms+1, 200*ms), false},
			{one, heldOut(100*ms, 200*ms), true}, // in line: the waiter at 200 ms, then it
			{advance(200 * ms), Output{}, true},
			{done, granted, true},
		})
	})
	t.Run("held while waiting", func(t *testing.T) {
		late := allowed(2, 300*ms)
		run(t, m, []step{
			{Input{Kind: Allow, Key: "k", N: 5, ID: 3}, allowed(0, 500*ms), true},
			{join, late, true}, // its turn at 100 ms
			{advance(50 * ms), Output{}, true},
			{holdFor(250 * ms), Output{}, true}, // until 300 ms, when 3 units are back
			{advance(299 * ms), Output{}, true},
			{done, late, false}, // not at its own turn, nor before the end
			{advance(300 * ms), Output{}, true},
			{done, late, true},
		})
	})
}

// Through a Store, a held request is decided as a peek at the hold's
// end, told from its own time, each policy's wait at the end rounded up
// to the microsecond; it takes nothing, and one granted while held never
// fits. A request past the end is decided as ever.
func TestStoreHoldDenies(t *testing.T) {
	m, err := NewModel(bucket, Options{Store: true})
	require.NoError(t, err)
	take5 := Input{Kind: Allow, Key: "k", N: 5, ID: 1, Times: at(0)}
	hold := Input{Kind: Hold, Key: "k", For: 200 * ms, Times: at(0)}
	one := Input{Kind: Allow, Key: "k", N: 1, ID: 2, Times: at(100 * ms)}
	three := Input{Kind: Allow, Key: "k", N: 3, ID: 3, Times: at(100 * ms)}
	before := []step{{take5, allowed(0, 500*ms), true}, {hold, Output{}, true}}
	for _, c := range []struct {
		name string
		give []step
	}{
		// At the end, 200 ms, the bucket has 2 units: one waits for the
		// end alone, three 100 ms more; untouched 300 ms after the end.
		{"exact", []step{{one, heldOut(100*ms, 400*ms), true}, {three, heldOut(200*ms, 400*ms), true}}},
		{"RetryAfter 1µs long", []step{{one, heldOut(100*ms+time.Microsecond, 400*ms), false}}},
		{"granted while held", []step{{one, allowed(0, 500*ms), false}}},
		{"past the end", []step{{Input{Kind: Allow, Key: "k", N: 2, ID: 4, Times: at(250 * ms)}, allowed(0, 450*ms), true}}}, // 2.5 units then, 0.5 left
		{"Reset ends it", []step{{Input{Kind: Reset, Key: "k", Times: at(50 * ms)}, Output{}, true}, {one, allowed(4, 100*ms), true}}},
		{"a shorter Hold changes nothing", []step{
			{Input{Kind: Hold, Key: "k", For: 50 * ms, Times: at(100 * ms)}, Output{}, true},
			{one, heldOut(100*ms, 400*ms), true},
		}},
		{"a longer Hold moves the end", []step{
			{Input{Kind: Hold, Key: "k", For: 300 * ms, Times: at(100 * ms)}, Output{}, true},
			{one, heldOut(300*ms, 400*ms), true}, // untouched by 400 ms too: all 5 back at 500 ms
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run(t, m, append(append([]step(nil), before...), c.give...))
		})
	}
}

// Through a Store, a hold whose end the key's time has passed is let go:
// the states a key reaches with it and without it are one, so that the
// search does not keep both.
func TestStoreHoldEndedIsLetGo(t *testing.T) {
	m, err := NewModel(bucket, Options{Store: true})
	require.NoError(t, err)
	hold := Input{Kind: Hold, Key: "k", For: 100 * ms, Times: at(0)}
	later := Input{Kind: Allow, Key: "k", N: 1, ID: 1, Times: at(150 * ms)}
	s := m.init()
	held := m.Step(s, hold, Output{})
	require.Len(t, held, 1)
	require.Equal(t, 100*ms, held[0].hold)
	withHold := m.Step(held[0], later, allowed(4, 100*ms))
	without := m.Step(s, later, allowed(4, 100*ms))
	require.Len(t, withHold, 1)
	require.Len(t, without, 1)
	require.Equal(t, without[0].id, withHold[0].id)
	require.Zero(t, withHold[0].hold)
}
