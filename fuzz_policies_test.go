package chanlimit_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// fuzzPolicies are the router's policies in FuzzRestorePolicies, and the
// overrides its seeds hold: two sets shared by several keys.
var (
	fuzzPolicies = []chanlimit.Policy{
		{Name: "second", Limit: 3, Window: time.Second},
		{Name: "minute", Algorithm: "sliding_window_log", Limit: 5, Window: time.Minute},
	}
	fuzzOverrides = [][]chanlimit.Policy{
		{{Name: "minute", Algorithm: "fixed_window", Limit: 4, Window: time.Minute}},
		{{Name: "second", Algorithm: "gcra", Limit: 6, Window: time.Second, Burst: 2}, {Name: "hour", Algorithm: "sliding_window_counter", Limit: 7, Window: time.Hour}},
	}
	fuzzKeys = []string{"a", "b", "o0", "o1", "o2", "o3", "idle", "key0"}
)

const fuzzMaxOverrides = 6

func fuzzPoliciesConfig(partitions byte) chanlimit.Config {
	return chanlimit.Config{
		Policies:     fuzzPolicies,
		Partitions:   1 + int(partitions)%4,
		Clock:        clock.NewFake(epoch),
		MaxKeys:      64,
		MaxOverrides: fuzzMaxOverrides,
	}
}

// policiesView is what a router says of fuzzKeys (n = 1 and 3, which is
// above some keys' capacity), and how many keys and overrides it holds.
type policiesView struct {
	keys, overrides int
	decisions       [2 * 8]chanlimit.Decision
	errs            [2 * 8]string
}

func viewPolicies(t *testing.T, r *chanlimit.Router) policiesView {
	t.Helper()
	st, err := r.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	v := policiesView{keys: st.Keys, overrides: st.Overrides}
	for i, k := range fuzzKeys {
		for j, n := range []int{1, 3} {
			d, err := r.Peek(bg, k, n)
			v.decisions[2*i+j] = d
			if err != nil {
				v.errs[2*i+j] = err.Error()
			}
		}
	}
	return v
}

// FuzzRestorePolicies: FuzzRestore for a router of two policies with
// overrides, restored into 1 to 4 partitions. Whatever the bytes, Restore
// never panics, and either loads everything or refuses with
// ErrBadSnapshot and changes nothing (its overrides and their count
// included). A restored router holds at most MaxOverrides overrides, its
// count of them is right (exactly the rest can be set), and its snapshot
// restores into a twin that answers alike.
func FuzzRestorePolicies(f *testing.F) {
	for parts := range byte(3) {
		cfg := fuzzPoliciesConfig(parts)
		r, err := chanlimit.New(cfg)
		if err != nil {
			f.Fatal(err)
		}
		for i, k := range []string{"o0", "o1", "o2", "o3", "idle"} {
			if err := r.SetOverride(bg, k, fuzzOverrides[i%2]...); err != nil {
				f.Fatal(err)
			}
		}
		for k, key := range []string{"a", "o0", "o1", "o2", "key0", "o3"} {
			cfg.Clock.(*clock.Fake).Advance(100 * time.Millisecond)
			_, _ = r.AllowN(bg, key, 1+k%2)
		}
		var buf bytes.Buffer
		if err := r.Snapshot(bg, &buf); err != nil {
			f.Fatal(err)
		}
		r.Close()
		f.Add(parts+1, false, buf.Bytes())
		f.Add(parts, true, buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, parts byte, fixSum bool, data []byte) {
		if fixSum && len(data) >= 4 {
			data = resum(append([]byte(nil), data...))
		}
		cfg := fuzzPoliciesConfig(parts)
		r, err := chanlimit.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := r.SetOverride(bg, "b", fuzzOverrides[0]...); err != nil {
			t.Fatal(err)
		}
		_, _ = r.AllowN(bg, "a", 2)
		_, _ = r.AllowN(bg, "b", 1)
		twinCfg := cfg // restored into another number of partitions
		twinCfg.Partitions = 1 + (cfg.Partitions % 4)
		before, loaded := checkRestore(t, r, twinCfg, data, viewPolicies)
		if !loaded {
			checkOverrideCount(t, r, before.overrides)
			return
		}
		got := viewPolicies(t, r)
		if got.overrides > fuzzMaxOverrides {
			t.Fatalf("%d overrides restored, MaxOverrides is %d", got.overrides, fuzzMaxOverrides)
		}
		checkOverrideCount(t, r, got.overrides)
	})
}

// checkOverrideCount checks that r, holding have overrides, lets exactly
// MaxOverrides - have more be set.
func checkOverrideCount(t *testing.T, r *chanlimit.Router, have int) {
	t.Helper()
	set := 0
	for i := range fuzzMaxOverrides + 1 {
		err := r.SetOverride(bg, fmt.Sprint("count-", i), fuzzOverrides[1]...)
		switch {
		case err == nil:
			set++
		case !errors.Is(err, chanlimit.ErrTooManyOverrides):
			t.Fatalf("SetOverride: %v", err)
		}
	}
	if set != fuzzMaxOverrides-have {
		t.Fatalf("%d overrides held, MaxOverrides %d, and %d more could be set", have, fuzzMaxOverrides, set)
	}
}
