package chanlimit_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/model"
)

// TestTwoPoliciesMatchTheModels runs every pair of built-in algorithms as
// the two policies of a router through random schedules of requests and
// refunds, and checks each
// decision against a brute-force reference: each policy's own reference
// model (internal/model), combined by the rule of several policies: allowed
// only if both allow, then taken from both; on a denial, a policy that
// would have allowed reports its state as it is. After a denial the
// schedule often steps to 1ns before RetryAfter, where the request must
// still be denied, and then to RetryAfter, where it must pass.
// CHANLIMIT_POLICY_SCHEDULES sets the schedules per pair (default 4).
func TestTwoPoliciesMatchTheModels(t *testing.T) {
	schedules := 4
	if s := os.Getenv("CHANLIMIT_POLICY_SCHEDULES"); s != "" {
		var err error
		schedules, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	names := model.Names()
	for _, a := range names {
		for _, b := range names {
			t.Run(a+"+"+b, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(len(a)), uint64(len(b)*31+len(a)*7)))
				for s := range schedules {
					pa, pb := policyParams(rng, a), policyParams(rng, b)
					playTwoPolicies(t, fmt.Sprintf("schedule %d: %s %+v, %s %+v", s, a, pa, b, pb), rng,
						[]chanlimit.Policy{
							{Name: "first", Algorithm: a, Limit: pa.Limit, Window: pa.Window, Burst: pa.Burst},
							{Name: "second", Algorithm: b, Limit: pb.Limit, Window: pb.Window, Burst: pb.Burst},
						})
				}
			})
		}
	}
}

// policyParams draws small Params for a policy of algorithm name.
func policyParams(rng *rand.Rand, name string) algorithms.Params {
	windows := []time.Duration{7, time.Millisecond, time.Second, 3 * time.Second, time.Minute}
	p := algorithms.Params{Limit: 1 + rng.IntN(6), Window: windows[rng.IntN(len(windows))]}
	if (name == "token_bucket" || name == "gcra" || name == "leaky_bucket") && rng.IntN(2) == 0 {
		p.Burst = 1 + rng.IntN(8)
	}
	return p
}

// twoModels is the reference for a key under two policies.
type twoModels struct {
	names  [2]string
	models [2]model.Model
}

// decide returns the reference's decision for n units at now, taking the
// units from both models if both allow.
func (m *twoModels) decide(now time.Duration, n int) chanlimit.Decision {
	var ds [2]algorithms.Decision
	allowed := true
	for j, md := range m.models {
		d, err := md.PeekN(now, n)
		if err != nil {
			panic(err) // n is within both capacities
		}
		ds[j], allowed = d, allowed && d.Allowed
	}
	for j, md := range m.models {
		switch {
		case allowed:
			ds[j], _ = md.AllowN(now, n)
		case ds[j].Allowed: // would have allowed: its state as it is
			ds[j].Remaining, ds[j].ResetAfter = md.Remaining(now), md.ResetAfter(now)
		}
	}
	out := chanlimit.Decision{Allowed: allowed, Remaining: min(ds[0].Remaining, ds[1].Remaining), ResetAfter: max(ds[0].ResetAfter, ds[1].ResetAfter)}
	by := 0
	if allowed {
		out.Delay = max(ds[0].Delay, ds[1].Delay)
		if ds[1].Remaining < ds[0].Remaining {
			by = 1
		}
	} else if ds[0].Allowed || (!ds[1].Allowed && ds[1].RetryAfter > ds[0].RetryAfter) {
		by = 1
	}
	out.RetryAfter, out.Limit, out.Policy = ds[by].RetryAfter, ds[by].Limit, m.names[by]
	return out
}

// refund gives n back to both models.
func (m *twoModels) refund(now time.Duration, n int) {
	for _, md := range m.models {
		md.Refund(now, n)
	}
}

func playTwoPolicies(t *testing.T, what string, rng *rand.Rand, policies []chanlimit.Policy) {
	t.Helper()
	r, clk := newRouter(t, chanlimit.Config{Policies: policies, Partitions: 1})
	ref := twoModels{names: [2]string{policies[0].Name, policies[1].Name}}
	for j, p := range policies {
		ref.models[j] = model.New(p.Algorithm, algorithms.Params{Limit: p.Limit, Window: p.Window, Burst: p.Burst})
	}
	capacity := min(ref.models[0].Capacity(), ref.models[1].Capacity())
	start := clk.Now()
	now := time.Duration(0)
	step := func(d time.Duration) { now += d; clk.Set(start.Add(now)) }
	window := max(policies[0].Window, policies[1].Window)
	for i := range 60 {
		switch rng.IntN(4) {
		case 0:
			step(time.Duration(rng.Int64N(int64(window))))
		case 1:
			step(time.Duration(rng.Int64N(int64(window)/8 + 1)))
		}
		n := 1 + rng.IntN(capacity)
		if rng.IntN(6) == 0 { // a refund, now and then of more than either policy holds
			if rng.IntN(3) == 0 {
				n += capacity
			}
			require.NoError(t, r.Refund(bg, "k", n), "%s, step %d", what, i)
			ref.refund(now, n)
			continue
		}
		if rng.IntN(4) == 0 { // a batch of three on the key
			reqs := []chanlimit.Request{{"k", n}, {"k", 1 + rng.IntN(capacity)}, {"k", 1}}
			out := make([]chanlimit.Decision, len(reqs))
			require.NoError(t, r.AllowBatch(bg, reqs, out), "%s, step %d", what, i)
			for k, req := range reqs {
				require.Equal(t, ref.decide(now, req.N), out[k], "%s, step %d, batch item %d: AllowBatch(t+%v, %d)", what, i, k, now, req.N)
			}
			continue
		}
		want := ref.decide(now, n)
		got := allowN(t, r, "k", n)
		require.Equal(t, want, got, "%s, step %d: AllowN(t+%v, %d)", what, i, now, n)
		if got.Allowed || got.RetryAfter <= 0 || got.RetryAfter > 10*window || rng.IntN(3) == 0 {
			continue
		}
		step(got.RetryAfter - 1)
		require.False(t, peekAt(t, r, "k", n).Allowed, "%s, step %d: 1ns before RetryAfter %v", what, i, got.RetryAfter)
		step(1)
		require.True(t, peekAt(t, r, "k", n).Allowed, "%s, step %d: at RetryAfter %v", what, i, got.RetryAfter)
	}
}
