// Package lincheck checks that a router's histories are linearizable
// (DESIGN.md, property 10): every history of concurrent calls is
// explained by some order of the calls, consistent with real time,
// under the sequential rules. Tests record the calls of many goroutines
// on routers and a fake clock (History, Workload), and Check hands them,
// with the sequential specification of a key (Model), to porcupine
// (github.com/anishathalye/porcupine), which searches for such an order,
// key by key.
//
// For tests only: nothing outside tests imports it.
package lincheck

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// porcupineModel returns m as porcupine takes it: one partition a key,
// each with every move of the clock.
func (m *Model) porcupineModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: m.partition,
		Init:      func() []any { return []any{m.init()} },
		Step: func(s, in, out any) []any {
			var next []any
			for _, n := range m.Step(s.(*state), in.(Input), out.(Output)) {
				next = append(next, n)
			}
			return next
		},
		Equal:             func(a, b any) bool { return a.(*state).id == b.(*state).id },
		Hash:              func(s any) uint64 { return s.(*state).hash },
		DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
		DescribeState:     func(s any) string { return s.(*state).String() },
	}
	return nm.ToModel()
}

// partition splits a history by key, each part with the clock's moves
// in memory, where they set the time the calls are decided at. Through a
// Store each request carries its own time, and the moves are left out:
// each one a call may come before or after is another order to search,
// and none changes what the store decides.
func (m *Model) partition(history []porcupine.Operation) [][]porcupine.Operation {
	var clock []porcupine.Operation
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range history {
		in := op.Input.(Input)
		if in.Kind == Advance {
			if !m.store {
				clock = append(clock, op)
			}
			continue
		}
		if _, ok := byKey[in.Key]; !ok {
			keys = append(keys, in.Key)
		}
		byKey[in.Key] = append(byKey[in.Key], op)
	}
	slices.Sort(keys)
	var parts [][]porcupine.Operation
	for _, k := range keys {
		parts = append(parts, append(slices.Clone(clock), byKey[k]...))
	}
	return parts
}

// describe writes an operation out, as the story and the visualization
// tell it.
func describe(in Input, out Output) string {
	var b strings.Builder
	switch in.Kind {
	case Advance:
		fmt.Fprintf(&b, "clock → %v", in.At)
		return b.String()
	case Reset:
		fmt.Fprintf(&b, "r%d Reset(%q)", in.Router, in.Key)
	case Batch:
		fmt.Fprintf(&b, "r%d AllowBatch(%q, %v)", in.Router, in.Key, in.Ns)
	case Join, Done, Wait:
		fmt.Fprintf(&b, "r%d %v#%d(%q, %d)", in.Router, in.Kind, in.ID, in.Key, in.N)
	case GiveBack:
		fmt.Fprintf(&b, "r%d give-back of #%d (%q, %d)", in.Router, in.ID, in.Key, in.N)
		return b.String()
	case Hold:
		fmt.Fprintf(&b, "r%d Hold(%q, %v)", in.Router, in.Key, in.For)
	default:
		fmt.Fprintf(&b, "r%d %v(%q, %d)", in.Router, in.Kind, in.Key, in.N)
		if in.ID != 0 {
			fmt.Fprintf(&b, " #%d", in.ID)
		}
	}
	if len(in.Times) > 0 {
		fmt.Fprintf(&b, " sent at one of %v", in.Times)
	}
	switch {
	case out.Outcome != Answered:
		fmt.Fprintf(&b, " → %v (%v)", out.Outcome, out.Err)
	case in.Kind == Batch:
		fmt.Fprintf(&b, " →")
		for _, d := range out.Ds {
			fmt.Fprintf(&b, " %s;", decision(d))
		}
	case in.Kind == Allow || in.Kind == Peek || in.Kind == Done || in.Kind == Wait:
		fmt.Fprintf(&b, " → %s", decision(out.D))
	default:
		b.WriteString(" → ok")
	}
	return b.String()
}

// decision writes d out, leaving out its zero fields.
func decision(d chanlimit.Decision) string {
	var b strings.Builder
	if d.Allowed {
		b.WriteString("allowed")
	} else {
		b.WriteString("denied")
	}
	if d.WouldDeny {
		b.WriteString(" would-deny")
	}
	fmt.Fprintf(&b, " %s/%d left %d", d.Policy, d.Limit, d.Remaining)
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"retry", d.RetryAfter}, {"reset", d.ResetAfter}, {"delay", d.Delay}} {
		if f.v != 0 {
			fmt.Fprintf(&b, " %s %v", f.name, f.v)
		}
	}
	return b.String()
}

// Result is what Verdict found.
type Result struct {
	porcupine.CheckResult
	Ops   int           // the operations checked
	Took  time.Duration // the search's time
	Story string        // on a violation: how the longest explanation found ends
	Key   string        // on a violation: the key the story is of
	info  porcupine.LinearizationInfo
	model porcupine.Model
}

// Verdict checks history under m, within timeout (0: none).
func Verdict(m *Model, history []porcupine.Operation, timeout time.Duration) Result {
	pm := m.porcupineModel()
	start := clock.Real().Now()
	res, info := porcupine.CheckOperationsVerbose(pm, history, timeout)
	r := Result{CheckResult: res, Ops: len(history), Took: clock.Real().Since(start), info: info, model: pm}
	if res != porcupine.Ok {
		r.Story, r.Key = story(pm, m.partition(history), info)
	}
	return r
}

// Check fails t unless history is linearizable under m, as porcupine
// finds within timeout; a timeout fails it too, never counted a pass. On
// a violation it writes porcupine's visualization to a file it names
// and tells the story in t's log.
func Check(t testing.TB, m *Model, history []porcupine.Operation, timeout time.Duration) Result {
	t.Helper()
	r := Verdict(m, history, timeout)
	switch r.CheckResult {
	case porcupine.Ok:
		return r
	case porcupine.Unknown:
		t.Errorf("lincheck: porcupine did not finish within %v on %d operations (history: %s): not a pass; the longest order it had found:\n%s", timeout, len(history), savedTo(history), r.Story)
		return r
	}
	where := "not written"
	if f, err := os.CreateTemp("", "lincheck-*.html"); err == nil {
		if err = porcupine.Visualize(r.model, r.info, f); err == nil {
			where = f.Name()
		}
		f.Close()
	}
	t.Errorf("lincheck: not linearizable (%d operations; visualization: %s; history: %s)\n%s", len(history), where, savedTo(history), r.Story)
	return r
}

// savedTo writes history to a file of its own, for Load, and returns its
// path.
func savedTo(history []porcupine.Operation) string {
	f, err := os.CreateTemp("", "lincheck-*.json")
	if err != nil {
		return "not written: " + err.Error()
	}
	f.Close()
	if err := Save(f.Name(), history); err != nil {
		return "not written: " + err.Error()
	}
	return f.Name()
}

// story tells, for the first part that no order explains, the longest
// order found, and the calls none of which can come next; and returns
// that part's key.
func story(m porcupine.Model, parts [][]porcupine.Operation, info porcupine.LinearizationInfo) (string, string) {
	partials := info.PartialLinearizations()
	for p, lins := range partials {
		if p >= len(parts) {
			continue
		}
		ops := parts[p]
		var longest []int // none: no call of the part can come first
		for _, l := range lins {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(ops) {
			continue // this part is linearizable
		}
		key := ""
		for _, op := range ops {
			if in := op.Input.(Input); in.Kind != Advance {
				key = in.Key
				break
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "key %q: %d of its %d operations fit an order; the last of them, then the state:\n", key, len(longest), len(ops))
		s := m.Init()
		for k, i := range longest {
			_, s = m.Step(s, ops[i].Input, ops[i].Output)
			if k >= len(longest)-8 {
				fmt.Fprintf(&b, "  %s\n", describe(ops[i].Input.(Input), ops[i].Output.(Output)))
			}
		}
		fmt.Fprintf(&b, "  state: %s\nnone of these can come next:\n", m.DescribeState(s))
		done := map[int]bool{}
		for _, i := range longest {
			done[i] = true
		}
		shown := 0
		for i, op := range ops {
			if done[i] || shown == 8 {
				continue
			}
			// A call that must come before some call not yet placed.
			first := true
			for j, other := range ops {
				if !done[j] && j != i && other.Return < op.Call {
					first = false
					break
				}
			}
			if first {
				fmt.Fprintf(&b, "  %s\n", describe(op.Input.(Input), op.Output.(Output)))
				shown++
			}
		}
		return b.String(), key
	}
	return "(porcupine found no partial order to tell)", ""
}

// Describe writes an operation out, as the story tells it.
func Describe(in Input, out Output) string { return describe(in, out) }
