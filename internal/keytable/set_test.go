package keytable

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestSameStates: two sets hold states that mean the same exactly when
// their policies agree, in order, on name, algorithm, Limit, Window and
// capacity; DryRun, and a Burst that leaves the capacity as it is, may
// differ. Same, which a switch of policies uses, tells those apart.
func TestSameStates(t *testing.T) {
	pol := func(name, alg string, limit, burst int, dry bool) Policy {
		p := Params{Limit: limit, Window: time.Minute, Burst: burst}
		return Policy{Name: name, Algorithm: alg, Params: p, Rule: builtins[alg](p), DryRun: dry}
	}
	base := NewSet([]Policy{pol("a", "token_bucket", 10, 0, false), pol("b", "fixed_window", 5, 0, false)})
	steps := []struct {
		give       string
		set        *Set
		sameStates bool
		same       bool
	}{
		{"itself", base, true, true},
		{"the same policies again", NewSet([]Policy{pol("a", "token_bucket", 10, 0, false), pol("b", "fixed_window", 5, 0, false)}), true, true},
		{"a policy turned dry run", NewSet([]Policy{pol("a", "token_bucket", 10, 0, false), pol("b", "fixed_window", 5, 0, true)}), true, false},
		{"Burst equal to Limit", NewSet([]Policy{pol("a", "token_bucket", 10, 10, false), pol("b", "fixed_window", 5, 0, false)}), true, false},
		{"another Burst", NewSet([]Policy{pol("a", "token_bucket", 10, 20, false), pol("b", "fixed_window", 5, 0, false)}), false, false},
		{"another Limit", NewSet([]Policy{pol("a", "token_bucket", 11, 0, false), pol("b", "fixed_window", 5, 0, false)}), false, false},
		{"another name", NewSet([]Policy{pol("a", "token_bucket", 10, 0, false), pol("c", "fixed_window", 5, 0, false)}), false, false},
		{"another algorithm", NewSet([]Policy{pol("a", "gcra", 10, 0, false), pol("b", "fixed_window", 5, 0, false)}), false, false},
		{"the other order", NewSet([]Policy{pol("b", "fixed_window", 5, 0, false), pol("a", "token_bucket", 10, 0, false)}), false, false},
		{"one policy fewer", NewSet([]Policy{pol("a", "token_bucket", 10, 0, false)}), false, false},
	}
	for _, st := range steps {
		assert.Equal(t, st.sameStates, base.SameStates(st.set), "SameStates: %s", st.give)
		assert.Equal(t, st.sameStates, st.set.SameStates(base), "SameStates, the other way: %s", st.give)
		assert.Equal(t, st.same, base.Same(st.set), "Same: %s", st.give)
	}
}
