package keytable

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestChangedSaysWhoseStatesChanged: Changed says what changed in the
// policies a partition's keys are under since it last asked: every key's
// for a switch of the router's policies or a Replace, the keys themselves
// for overrides, nothing for what changes no policy; past maxChanged keys,
// every key's.
func TestChangedSaysWhoseStatesChanged(t *testing.T) {
	newSet := func(limit int) *Set {
		return NewSet([]Policy{{Name: "p", Algorithm: "fixed_window", Params: Params{Limit: limit, Window: s}, Rule: NewRule(fixedWindow(limit, s))}})
	}
	type change struct {
		all  bool
		keys []string
	}
	k := NewKeys(newSet(2))
	changed := func() change {
		all, keys := k.Changed()
		return change{all, append([]string(nil), keys...)}
	}
	allow(t, k, "a", 0, 1)
	steps := []struct {
		give string
		do   func()
		want change
	}{
		{"nothing", func() {}, change{}},
		{"a decision", func() { allow(t, k, "b", 0, 1) }, change{}},
		{"SetOverride", func() { k.SetOverride("a", newSet(3), 0) }, change{keys: []string{"a"}}},
		{"the same override again", func() { k.SetOverride("a", newSet(3), 0) }, change{}},
		{"two overrides", func() { k.SetOverride("a", newSet(4), 0); k.SetOverride("c", newSet(4), 0) }, change{keys: []string{"a", "c"}}},
		{"ClearOverride", func() { k.ClearOverride("c", 0) }, change{keys: []string{"c"}}},
		{"ClearOverride of a key without one", func() { k.ClearOverride("c", 0) }, change{}},
		{"SetPolicies", func() { k.SetPolicies(newSet(5), 0) }, change{all: true}},
		{"the same policies again", func() { k.SetPolicies(newSet(5), 0) }, change{}},
		{"Replace", func() { k.Replace(NewKeys(newSet(5))) }, change{all: true}},
		{"more overrides than it lists", func() {
			for i := range maxChanged + 1 {
				k.SetOverride(fmt.Sprint("o", i), newSet(6), 0)
			}
		}, change{all: true}},
		{"asked again", func() {}, change{}},
	}
	for i, st := range steps {
		st.do()
		got := changed()
		if len(got.keys) == 0 {
			got.keys = nil
		}
		assert.Equal(t, st.want, got, "step %d: %s", i, st.give)
	}
}
