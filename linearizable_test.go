package chanlimit_test

import (
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/lincheck"
)

// The checks' size: CI's by default; .ci/lincheck-soak asks for more.
var (
	linearSeeds = flag.Int("lincheck.seeds", 4, "histories recorded and checked for each set of policies")
	linearOps   = flag.Int("lincheck.ops", 30, "calls each goroutine makes in a history")
)

// TestLinearizableInMemory records the calls of many goroutines on one
// router, with a fake clock moving meanwhile, and checks that some order
// of them, consistent with real time, explains every answer under the
// sequential rules (DESIGN.md, property 10): for each algorithm, and for
// several policies with a dry-run one.
func TestLinearizableInMemory(t *testing.T) {
	for name, policies := range lincheck.PolicySets() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checked := 0
			for seed := range uint64(*linearSeeds) {
				ops := memoryHistory(t, policies, []string{"a", "b"}, 8, *linearOps, seed)
				m, err := lincheck.NewModel(policies, lincheck.Options{})
				require.NoError(t, err)
				checked += lincheck.Check(t, m, ops, time.Minute).Ops
			}
			t.Logf("%d histories, %d operations checked", *linearSeeds, checked)
		})
	}
}

// TestLinearizableCheckerBites checks that the checker rejects a real
// history under a model of a key with one more token than the router
// has: a checker that passes everything would pass it.
func TestLinearizableCheckerBites(t *testing.T) {
	policies := lincheck.PolicySets()["token_bucket"]
	ops := memoryHistory(t, policies, []string{"a", "b", "c"}, 3, 15, 7)

	right, err := lincheck.NewModel(policies, lincheck.Options{})
	require.NoError(t, err)
	require.Equal(t, "Ok", string(lincheck.Verdict(right, ops, time.Minute).CheckResult))

	wrong := slices.Clone(policies)
	wrong[0].Burst = 6
	m, err := lincheck.NewModel(wrong, lincheck.Options{})
	require.NoError(t, err)
	res := lincheck.Verdict(m, ops, time.Minute)
	require.Equal(t, "Illegal", string(res.CheckResult), "a model with one more token explains the history")
	t.Logf("the story of the wrong model:\n%s", res.Story)
}

// memoryHistory records a history of clients goroutines making ops calls
// each on keys of one router under policies, with a fake clock moving
// meanwhile, and returns its operations.
func memoryHistory(t *testing.T, policies []chanlimit.Policy, keys []string, clients, ops int, seed uint64) []porcupine.Operation {
	t.Helper()
	origin := time.Unix(1_800_000_000, 0)
	clk := clock.NewFake(origin)
	r, err := chanlimit.New(chanlimit.Config{Policies: policies, Clock: clk, Partitions: 2})
	require.NoError(t, err)
	w := lincheck.Workload{
		Routers: []lincheck.Target{r}, Clock: clk, Origin: origin,
		Keys: keys, Capacity: 3, Clients: clients, Ops: ops,
		Step: 60 * time.Millisecond, Quantum: time.Nanosecond, Leave: 0.2, Seed: seed,
	}
	h := w.Run(t)
	require.NoError(t, r.Close())
	return h.Operations()
}
