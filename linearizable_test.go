package chanlimit_test

import (
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
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
// several policies with a dry-run one; keys are held (Hold) now and then,
// and the histories have calls denied by a hold.
func TestLinearizableInMemory(t *testing.T) {
	for name, policies := range lincheck.PolicySets() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checked, holds, heldDenials := 0, 0, 0
			for seed := range uint64(*linearSeeds) {
				ops := memoryHistory(t, policies, []string{"a", "b"}, 8, *linearOps, seed)
				m, err := lincheck.NewModel(policies, lincheck.Options{})
				require.NoError(t, err)
				checked += lincheck.Check(t, m, ops, time.Minute).Ops
				h, d := countHolds(ops)
				holds, heldDenials = holds+h, heldDenials+d
			}
			t.Logf("%d histories, %d operations checked: %d Holds, %d answers denied by a hold", *linearSeeds, checked, holds, heldDenials)
			if *linearSeeds*(*linearOps) >= 4*30 { // at CI's size or more: some hold always bites

				assert.Positive(t, holds, "no Hold was made")
				assert.Positive(t, heldDenials, "no answer was denied by a hold")
			}
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

// TestLinearizableCheckerBitesHold checks that the checker rejects a real
// history with holds once each answer denied by a hold tells a wait 1ns
// longer than the router told: a model that let holds pass unchecked
// would pass it.
func TestLinearizableCheckerBitesHold(t *testing.T) {
	policies := lincheck.PolicySets()["token_bucket"]
	ops := memoryHistory(t, policies, []string{"a", "b"}, 8, 30, 7)
	m, err := lincheck.NewModel(policies, lincheck.Options{})
	require.NoError(t, err)
	require.Equal(t, "Ok", string(lincheck.Verdict(m, ops, time.Minute).CheckResult))

	changed := 0
	for i, op := range ops {
		out := op.Output.(lincheck.Output)
		out.Ds = slices.Clone(out.Ds)
		for _, d := range heldDenials(op.Input.(lincheck.Input).Kind, &out) {
			d.RetryAfter += time.Nanosecond
			changed++
		}
		ops[i].Output = out
	}
	require.Positive(t, changed, "no answer denied by a hold to change")
	res := lincheck.Verdict(m, ops, time.Minute)
	require.Equal(t, "Illegal", string(res.CheckResult), "%d hold denials 1ns off are explained", changed)
	t.Logf("the story of %d hold denials 1ns off:\n%s", changed, res.Story)
}

// heldDenials returns the answers in out, of an operation of kind, that
// a hold denied (the only denials with no Policy and no Limit), to be
// read or changed in place.
func heldDenials(kind lincheck.Kind, out *lincheck.Output) []*chanlimit.Decision {
	if out.Outcome != lincheck.Answered {
		return nil
	}
	var ds []*chanlimit.Decision
	switch kind {
	case lincheck.Allow, lincheck.Peek:
		ds = append(ds, &out.D)
	case lincheck.Batch:
		for i := range out.Ds {
			ds = append(ds, &out.Ds[i])
		}
	}
	return slices.DeleteFunc(ds, func(d *chanlimit.Decision) bool { return d.Allowed || d.Policy != "" || d.Limit != 0 })
}

// countHolds returns the Holds of a history, and its answers denied by a
// hold.
func countHolds(ops []porcupine.Operation) (holds, denials int) {
	for _, op := range ops {
		kind, out := op.Input.(lincheck.Input).Kind, op.Output.(lincheck.Output)
		if kind == lincheck.Hold {
			holds++
		}
		denials += len(heldDenials(kind, &out))
	}
	return holds, denials
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
		// A few Holds a history, a few Steps each: enough for the
		// histories to have denials by a hold and waiters in line behind
		// one, few enough that the search stays quick (a held key's
		// waiters and leavers are what it has most to order).
		Hold: 0.03, HoldFor: 200 * time.Millisecond,
	}
	h := w.Run(t)
	require.NoError(t, r.Close())
	return h.Operations()
}
