package chanlimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// Adversarial tests of actor property 3 (no double counts, no lost
// decrements) under several policies: with the fake clock frozen, callers
// racing on one key, with cancellations, are granted exactly what the
// key's policies hold, also while its policies are changed to equal ones
// (which must change no decision).

// exactPolicies are two policies of the algorithms a and b, of different
// capacities: 5 for a, 3 for b, or the other way round.
func exactPolicies(a, b string, swap bool) []chanlimit.Policy {
	ca, cb := 5, 3
	if swap {
		ca, cb = cb, ca
	}
	return []chanlimit.Policy{
		{Name: "a", Algorithm: a, Limit: ca, Window: time.Hour},
		{Name: "b", Algorithm: b, Limit: cb, Window: 2 * time.Hour},
	}
}

// hammer has callers race AllowN and AllowBatch on key (batches mixing
// other keys of other partitions), each with a context cancelled at random
// by another goroutine, n units at a time (n = 1 + rng.IntN(maxN)); while
// they run, churn is called over and over. It returns the units of key the
// callers were told were allowed.
func hammer(t *testing.T, r *chanlimit.Router, key string, maxN int, churn func(i int) error) int64 {
	t.Helper()
	var (
		granted atomic.Int64
		wg      sync.WaitGroup
		stop    atomic.Bool
		bad     = make(chan error, 64)
	)
	report := func(err error) {
		select {
		case bad <- err:
		default:
		}
	}
	okErr := func(err error) bool {
		return err == nil || errors.Is(err, context.Canceled)
	}
	for g := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			out := make([]chanlimit.Decision, 8)
			for i := 0; i < 300; i++ {
				ctx, cancel := context.WithCancel(bg)
				if rng.IntN(3) == 0 {
					go cancel() // at some moment of the call, or before it
				}
				n := 1 + rng.IntN(maxN)
				if rng.IntN(2) == 0 {
					d, err := r.AllowN(ctx, key, n)
					switch {
					case !okErr(err):
						report(fmt.Errorf("AllowN: %w", err))
					case err == nil && d.Allowed:
						granted.Add(int64(n))
					}
				} else {
					reqs := []chanlimit.Request{{Key: fmt.Sprint("other-", g, "-", i%7), N: 1}, {Key: key, N: n}, {Key: "x" + fmt.Sprint(i%5), N: 1}, {Key: key, N: 1}}
					err := r.AllowBatch(ctx, reqs, out)
					if !okErr(err) {
						report(fmt.Errorf("AllowBatch: %w", err))
					}
					for j, req := range reqs {
						if req.Key == key && out[j].Allowed {
							granted.Add(int64(req.N))
						}
						if req.Key == key && err == nil && out[j].Limit == 0 {
							report(fmt.Errorf("AllowBatch: request %d undecided with no error", j))
						}
					}
				}
				cancel()
			}
		})
	}
	var churned sync.WaitGroup
	if churn != nil {
		churned.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if err := churn(i); err != nil {
					report(fmt.Errorf("churn %d: %w", i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	churned.Wait()
	close(bad)
	for err := range bad {
		t.Error(err)
	}
	return granted.Load()
}

// TestExactnessUnderTwoPolicies: for every pair of algorithms as two
// policies of capacities 5 and 3 (both ways round), on a frozen clock,
// callers asking for one unit at a time are granted exactly 3 in all,
// cancellations included; and the key is then out.
func TestExactnessUnderTwoPolicies(t *testing.T) {
	for _, a := range registered {
		for _, b := range registered {
			for _, swap := range []bool{false, true} {
				t.Run(fmt.Sprint(a, "+", b, "/", swap), func(t *testing.T) {
					r, _ := newRouter(t, chanlimit.Config{Policies: exactPolicies(a, b, swap), Partitions: 3, MailboxSize: 4})
					got := hammer(t, r, "k", 1, nil)
					assert.Equal(t, int64(3), got, "granted in all")
					d := peekAt(t, r, "k", 1)
					assert.False(t, d.Allowed, "the key is out: %+v", d)
				})
			}
		}
	}
}

// TestExactnessWithMixedCounts: n of 1 to 3 units: each grant takes from
// both policies, so what is left under the smaller one is its capacity
// less what the callers were told they got, to the unit.
func TestExactnessWithMixedCounts(t *testing.T) {
	for _, a := range registered {
		for _, b := range []string{"token_bucket", "sliding_window_log", "leaky_bucket"} {
			t.Run(a+"+"+b, func(t *testing.T) {
				r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
					{Name: "a", Algorithm: a, Limit: 40, Window: time.Hour},
					{Name: "b", Algorithm: b, Limit: 25, Window: 2 * time.Hour},
				}, Partitions: 2})
				got := hammer(t, r, "k", 3, nil)
				require.LessOrEqual(t, got, int64(25))
				left := 25 - int(got)
				for n := 1; n <= 3; n++ {
					d := peekAt(t, r, "k", n)
					assert.Equal(t, n <= left, d.Allowed, "n = %d, %d left", n, left)
					if d.Allowed {
						assert.Equal(t, left-n, d.Remaining, "n = %d", n)
					}
				}
			})
		}
	}
}

// TestExactnessWhilePoliciesAreSetToEqualOnes: SetPolicies with the same
// policies, or the same in another order, and SetOverride of the same
// policies then ClearOverride, race with the callers. A change to equal
// policies changes no decision (algorithms.Adopter), so the callers are
// granted exactly 3 units in all still.
func TestExactnessWhilePoliciesAreSetToEqualOnes(t *testing.T) {
	for _, a := range registered {
		for _, b := range registered {
			t.Run(a+"+"+b, func(t *testing.T) {
				ps := exactPolicies(a, b, false)
				reordered := []chanlimit.Policy{ps[1], ps[0]}
				r, _ := newRouter(t, chanlimit.Config{Policies: ps, Partitions: 3, MailboxSize: 4, MaxOverrides: 1})
				got := hammer(t, r, "k", 1, func(i int) error {
					switch i % 4 {
					case 0:
						return r.SetPolicies(bg, ps...)
					case 1:
						return r.SetOverride(bg, "k", reordered...)
					case 2:
						return r.ClearOverride(bg, "k")
					default:
						return r.SetPolicies(bg, reordered...)
					}
				})
				assert.Equal(t, int64(3), got, "granted in all")
				assert.False(t, peekAt(t, r, "k", 1).Allowed, "the key is out")
				st := stats(t, r)
				assert.Zero(t, st.Panicked)
				assert.LessOrEqual(t, st.Overrides, 1)
			})
		}
	}
}

// TestNoRequestSeesAHalfSwitchedPartition: while SetPolicies switches
// between two sets of policies of other names and SetOverride/ClearOverride
// go on, every decision names a policy of one set, with that set's Limit,
// and every batch's items of one partition are of one set.
func TestNoRequestSeesAHalfSwitchedPartition(t *testing.T) {
	setA := []chanlimit.Policy{{Name: "a1", Limit: 1000, Window: time.Hour}, {Name: "a2", Algorithm: "fixed_window", Limit: 999, Window: time.Hour}}
	setB := []chanlimit.Policy{{Name: "b1", Algorithm: "gcra", Limit: 500, Window: time.Hour}}
	vip := []chanlimit.Policy{{Name: "v", Algorithm: "sliding_window_log", Limit: 700, Window: time.Hour}}
	limits := map[string]int{"a1": 1000, "a2": 999, "b1": 500, "v": 700}
	r, _ := newRouter(t, chanlimit.Config{Policies: setA, Partitions: 1, MaxOverrides: 10})
	var (
		wg   sync.WaitGroup
		stop atomic.Bool
		bad  = make(chan error, 16)
	)
	for g := range 3 {
		wg.Go(func() {
			reqs := make([]chanlimit.Request, 12)
			for i := range reqs {
				reqs[i] = chanlimit.Request{Key: fmt.Sprint(g, "-", i%6), N: 1}
			}
			out := make([]chanlimit.Decision, len(reqs))
			for !stop.Load() {
				if err := r.AllowBatch(bg, reqs, out); err != nil {
					bad <- err
					return
				}
				set := ""
				for i, d := range out {
					if limits[d.Policy] != d.Limit {
						bad <- fmt.Errorf("item %d: policy %q with Limit %d", i, d.Policy, d.Limit)
						return
					}
					if d.Policy == "v" {
						continue
					}
					s := d.Policy[:1]
					if set == "" {
						set = s
					} else if s != set {
						bad <- fmt.Errorf("one batch decided under two sets: %+v", out)
						return
					}
				}
			}
		})
	}
	for i := range 60 {
		set := setA
		if i%2 == 0 {
			set = setB
		}
		require.NoError(t, r.SetPolicies(bg, set...))
		key := fmt.Sprint(i%3, "-", i%6)
		require.NoError(t, r.SetOverride(bg, key, vip...))
		if i%3 == 0 {
			require.NoError(t, r.ClearOverride(bg, key))
		}
	}
	stop.Store(true)
	wg.Wait()
	close(bad)
	for err := range bad {
		t.Error(err)
	}
}

// TestExactnessWhileParamsChangeButNotWhatIsLeft: as above, but the
// changes are to other Params, so that every key's state is adopted
// (algorithms.Adopter) under traffic: a bucket's Burst goes from 0 to its
// Limit and back (the same capacity), a window's Window doubles and halves
// (on a frozen clock, the same window). What a key has left is the same
// under both, so the callers are still granted exactly 3 units in all.
func TestExactnessWhileParamsChangeButNotWhatIsLeft(t *testing.T) {
	other := func(ps []chanlimit.Policy) []chanlimit.Policy {
		out := slices.Clone(ps)
		for j := range out {
			switch out[j].Algorithm {
			case "token_bucket", "gcra", "leaky_bucket":
				out[j].Burst = out[j].Limit
			default:
				out[j].Window *= 2
			}
		}
		return out
	}
	for _, a := range registered {
		for _, b := range registered {
			t.Run(a+"+"+b, func(t *testing.T) {
				ps := exactPolicies(a, b, true)
				alt := other(ps)
				r, _ := newRouter(t, chanlimit.Config{Policies: ps, Partitions: 2, MailboxSize: 4, MaxOverrides: 1})
				got := hammer(t, r, "k", 1, func(i int) error {
					switch i % 5 {
					case 0:
						return r.SetPolicies(bg, alt...)
					case 1:
						return r.SetPolicies(bg, ps...)
					case 2:
						return r.SetOverride(bg, "k", alt...)
					case 3:
						return r.SetOverride(bg, "k", ps...)
					default:
						return r.ClearOverride(bg, "k")
					}
				})
				assert.Equal(t, int64(3), got, "granted in all")
				assert.False(t, peekAt(t, r, "k", 1).Allowed, "the key is out")
				assert.Zero(t, stats(t, r).Panicked)
			})
		}
	}
}
