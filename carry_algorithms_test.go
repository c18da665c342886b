package chanlimit_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/model"
)

// Adversarial tests of what a key keeps when its policies change.

// TestChangesToEqualPoliciesChangeNoDecision: for every pair of algorithms
// as two policies, a random schedule of requests is interleaved with
// changes that keep every policy's Name, Algorithm and Params: SetPolicies
// of the same policies or of them in the other order, SetOverride of the
// same policies (in either order) and ClearOverride. Every decision, to
// the nanosecond, is the reference models' for the schedule without any
// change (ties of Remaining going to the first policy of the key's
// current order).
func TestChangesToEqualPoliciesChangeNoDecision(t *testing.T) {
	names := model.Names()
	for _, a := range names {
		for _, b := range names {
			t.Run(a+"+"+b, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(len(a)*13+len(b)), 3))
				for range 3 {
					pa, pb := policyParams(rng, a), policyParams(rng, b)
					ps := []chanlimit.Policy{
						{Name: "first", Algorithm: a, Limit: pa.Limit, Window: pa.Window, Burst: pa.Burst},
						{Name: "second", Algorithm: b, Limit: pb.Limit, Window: pb.Window, Burst: pb.Burst},
					}
					playEqualChanges(t, rng, ps)
				}
			})
		}
	}
}

func playEqualChanges(t *testing.T, rng *rand.Rand, ps []chanlimit.Policy) {
	t.Helper()
	r, clk := newRouter(t, chanlimit.Config{Policies: ps, Partitions: 2})
	ref := twoModels{names: [2]string{ps[0].Name, ps[1].Name}}
	for j, p := range ps {
		ref.models[j] = model.New(p.Algorithm, algorithms.Params{Limit: p.Limit, Window: p.Window, Burst: p.Burst})
	}
	swapped := []chanlimit.Policy{ps[1], ps[0]}
	// The key's order: the router's, or its override's if it has one.
	routerSwapped, override, overrideSwapped := false, false, false
	order := func() bool {
		if override {
			return overrideSwapped
		}
		return routerSwapped
	}
	refSwapped := false
	align := func() {
		if order() != refSwapped {
			ref.names[0], ref.names[1] = ref.names[1], ref.names[0]
			ref.models[0], ref.models[1] = ref.models[1], ref.models[0]
			refSwapped = !refSwapped
		}
	}
	pick := func() []chanlimit.Policy {
		if rng.IntN(2) == 0 {
			return ps
		}
		return swapped
	}
	capacity := min(ref.models[0].Capacity(), ref.models[1].Capacity())
	window := max(ps[0].Window, ps[1].Window)
	start, now := clk.Now(), time.Duration(0)
	var log []string
	for i := range 80 {
		switch rng.IntN(6) {
		case 0:
			set := pick()
			require.NoError(t, r.SetPolicies(bg, set...))
			routerSwapped = set[0].Name != ps[0].Name
			log = append(log, fmt.Sprint("SetPolicies swapped=", routerSwapped))
		case 1:
			set := pick()
			require.NoError(t, r.SetOverride(bg, "k", set...))
			override, overrideSwapped = true, set[0].Name != ps[0].Name
			log = append(log, fmt.Sprint("SetOverride swapped=", overrideSwapped))
		case 2:
			require.NoError(t, r.ClearOverride(bg, "k"))
			override = false
			log = append(log, "ClearOverride")
		case 3:
			now += time.Duration(rng.Int64N(int64(window)))
		case 4:
			now += time.Duration(rng.Int64N(int64(window)/8 + 1))
		}
		clk.Set(start.Add(now))
		align()
		n := 1 + rng.IntN(capacity)
		want := ref.decide(now, n)
		got := allowN(t, r, "k", n)
		log = append(log, fmt.Sprintf("t+%v AllowN(%d) = %+v", now, n, got))
		require.Equal(t, want, got, "%+v, step %d; so far:\n%s", ps, i, joinLines(log))
	}
}

func joinLines(lines []string) string {
	var s string
	for _, l := range lines[max(0, len(lines)-12):] {
		s += "  " + l + "\n"
	}
	return s
}

// TestCarryEveryAlgorithmRenamedOrReplaced: for every algorithm, a key
// that used its whole capacity keeps that under the same Name and
// Algorithm; renamed, or under another algorithm of the same name, it
// starts untouched, and so does a policy removed and added back.
func TestCarryEveryAlgorithmRenamedOrReplaced(t *testing.T) {
	for _, a := range registered {
		t.Run(a, func(t *testing.T) {
			p := chanlimit.Policy{Name: "p", Algorithm: a, Limit: 4, Window: time.Minute}
			r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{p}})
			require.True(t, allowN(t, r, "k", 4).Allowed)
			before := peekAt(t, r, "k", 1)
			require.False(t, before.Allowed)

			require.NoError(t, r.SetPolicies(bg, p))
			assert.Equal(t, before, peekAt(t, r, "k", 1), "the same policy: nothing changes")

			renamed := p
			renamed.Name = "q"
			require.NoError(t, r.SetPolicies(bg, renamed))
			assert.True(t, peekAt(t, r, "k", 4).Allowed, "renamed: untouched")

			require.NoError(t, r.SetPolicies(bg, p))
			require.True(t, allowN(t, r, "k", 4).Allowed)
			for _, b := range registered {
				if b == a {
					continue
				}
				other := p
				other.Algorithm = b
				require.NoError(t, r.SetPolicies(bg, other))
				assert.True(t, peekAt(t, r, "k", 4).Allowed, "%s → %s: untouched", a, b)
				require.NoError(t, r.SetPolicies(bg, p))
				assert.True(t, peekAt(t, r, "k", 4).Allowed, "%s → %s → %s: the state went with %s", a, b, a, b)
				require.True(t, allowN(t, r, "k", 4).Allowed)
			}

			// Removed, then added back: untouched.
			require.NoError(t, r.SetPolicies(bg, renamed))
			require.NoError(t, r.SetPolicies(bg, renamed, p))
			assert.True(t, peekAt(t, r, "k", 4).Allowed)
		})
	}
}

// TestCarrySlidingWindowCounterKeepsItsCounts: the README's row for
// sliding_window_counter, in numbers: the current and previous windows'
// counts are kept, capped at the new Limit, read under the new Window.
func TestCarrySlidingWindowCounterKeepsItsCounts(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "m", Algorithm: "sliding_window_counter", Limit: 10, Window: time.Minute}}})
	require.True(t, allowN(t, r, "k", 8).Allowed) // window [0, 60s): 8
	clk.Advance(time.Minute + 30*time.Second)     // window [60s, 120s), previous 8 weighs floor(8 × (30s - 1ns) / 60s) = 3
	d := peekAt(t, r, "k", 7)
	require.True(t, d.Allowed)
	require.False(t, peekAt(t, r, "k", 8).Allowed)

	// The same Params: the same answers.
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "m", Algorithm: "sliding_window_counter", Limit: 10, Window: time.Minute}))
	assert.Equal(t, d, peekAt(t, r, "k", 7))
	assert.False(t, peekAt(t, r, "k", 8).Allowed)

	// Limit 5: the previous window's 8 capped at 5, which weighs
	// floor(5 × (30s - 1ns) / 60s) = 2: 3 units fit, 4 do not.
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "m", Algorithm: "sliding_window_counter", Limit: 5, Window: time.Minute}))
	assert.True(t, peekAt(t, r, "k", 3).Allowed)
	assert.False(t, peekAt(t, r, "k", 4).Allowed)

	// Window 2 minutes, from the change on: the current window [60s,
	// 180s) now, 90s of it to go; the previous 5 weigh floor(5 × (90s -
	// 1ns) / 120s) = 3: 2 units fit, 3 do not.
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "m", Algorithm: "sliding_window_counter", Limit: 5, Window: 2 * time.Minute}))
	assert.True(t, peekAt(t, r, "k", 2).Allowed)
	assert.False(t, peekAt(t, r, "k", 3).Allowed)
}

// TestCarryBucketsUnderANewWindow: token_bucket and gcra keep their tokens
// when the Window changes, and refill at the new rate from the change on;
// leaky_bucket keeps the work it admitted, which drains when it would
// have, and counts the room left at the new rate; to the nanosecond.
func TestCarryBucketsUnderANewWindow(t *testing.T) {
	for _, a := range []string{"token_bucket", "gcra", "leaky_bucket"} {
		t.Run(a, func(t *testing.T) {
			r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "b", Algorithm: a, Limit: 10, Window: time.Second}}})
			require.True(t, allowN(t, r, "k", 10).Allowed) // empty (queue full)
			clk.Advance(300 * time.Millisecond)            // 3 tokens back (700ms of work left)
			require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "b", Algorithm: a, Limit: 10, Window: 10 * time.Second}))
			fits, first, wait := 3, 4, time.Second // the fourth token at the new rate, 1 a second
			if a == "leaky_bucket" {
				// 700ms of work is 0.7 units at 1 a second: room for 9;
				// 10 once the work is done, 700ms on.
				fits, first, wait = 9, 10, 700*ms
			}
			assert.True(t, peekAt(t, r, "k", fits).Allowed)
			d := peekAt(t, r, "k", first)
			assert.False(t, d.Allowed)
			assert.Equal(t, wait, d.RetryAfter)
			clk.Advance(wait - 1)
			assert.False(t, peekAt(t, r, "k", first).Allowed)
			clk.Advance(1)
			assert.True(t, peekAt(t, r, "k", first).Allowed)
		})
	}
}

// counting is a rule of its own that is not an Adopter: a key may take
// Limit units in all, ever. Its state is the units taken.
type counting struct{ limit int }

type countingState struct{ used int }

func (c counting) Capacity() int { return c.limit }
func (c counting) PeekN(s *countingState, now time.Duration, n int, d *chanlimit.Decision) {
	*d = chanlimit.Decision{Allowed: s.used+n <= c.limit, Limit: c.limit, Remaining: max(c.limit-s.used-n, 0), ResetAfter: time.Hour}
	if !d.Allowed {
		d.Remaining, d.RetryAfter = max(c.limit-s.used, 0), time.Hour
	}
}

func (c counting) AllowN(s *countingState, now time.Duration, n int, d *chanlimit.Decision) {
	c.PeekN(s, now, n, d)
	if d.Allowed {
		s.used += n
	}
}
func (c counting) Refund(s *countingState, now time.Duration, n int) { s.used -= n }
func (c counting) ResetAfter(s *countingState, now time.Duration) time.Duration {
	if s.used == 0 {
		return 0
	}
	return time.Hour
}

func registerCounting(t *testing.T) string {
	t.Helper()
	name := fmt.Sprint("test_counting_", registrations.Add(1))
	require.NoError(t, chanlimit.Register[countingState](name, func(p algorithms.Params) (counting, error) {
		return counting{p.Limit}, p.Validate()
	}))
	return name
}

// TestCarryARuleWithoutAdopterKeepsItsStateAsIs: a registered rule that is
// not an Adopter keeps each key's state as it is across a change of its
// Params, and reads it under the new ones.
func TestCarryARuleWithoutAdopterKeepsItsStateAsIs(t *testing.T) {
	name := registerCounting(t)
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "c", Algorithm: name, Limit: 5, Window: time.Minute}}})
	require.True(t, allowN(t, r, "k", 3).Allowed)
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "c", Algorithm: name, Limit: 9, Window: time.Hour}))
	d := peekAt(t, r, "k", 1)
	assert.Equal(t, 5, d.Remaining, "3 used, kept as is, of 9")
	require.NoError(t, r.SetOverride(bg, "k", chanlimit.Policy{Name: "c", Algorithm: name, Limit: 4, Window: time.Hour}))
	assert.Equal(t, 0, peekAt(t, r, "k", 1).Remaining, "3 of 4")
	require.NoError(t, r.ClearOverride(bg, "k"))
	assert.Equal(t, 5, peekAt(t, r, "k", 1).Remaining)
}
