package chanlimit_test

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// TestAGoexitInAdoptLeavesNoHalfSwitchedRouter: a rule whose Adopt runs
// runtime.Goexit while SetPolicies switches the router (in its second or
// third partition): every partition must end under one set of policies,
// the router's Policies saying which, so that its snapshot restores into a
// router of those policies. (Before the fix, SetPolicies returned
// ErrAlgorithmPanic with the partitions before the Goexit's switched and
// the others not, Policies saying the old ones; the snapshot was refused:
// "8 bytes after the states of its 1 policies".)
func TestAGoexitInAdoptLeavesNoHalfSwitchedRouter(t *testing.T) {
	var calls atomic.Int64
	name := registerBucketAs(t, func(tb *algorithms.TokenBucket) adoptExits {
		return adoptExits{tb, &calls, func(c int64) bool { return c == 25 }}
	})
	old := []chanlimit.Policy{{Name: "p", Algorithm: name, Limit: 3, Window: time.Hour}}
	r, clk := newRouter(t, chanlimit.Config{Policies: old, Partitions: 4})
	keys := make([]string, 0, 40)
	for i := range 40 {
		keys = append(keys, fmt.Sprint("k", i))
	}
	for _, k := range keys {
		require.True(t, allowN(t, r, k, 1).Allowed)
	}
	next := []chanlimit.Policy{{Name: "p", Algorithm: name, Limit: 4, Window: time.Hour}, {Name: "q", Limit: 9, Window: time.Hour}}
	require.NoError(t, r.SetPolicies(bg, next...), "as when Adopt panics: the key is dropped, the switch goes on")
	assert.Equal(t, uint64(1), stats(t, r).Panicked)

	// Every key decides under the policies the router says it has: a
	// request for 4 exceeds the old ones' capacity, not the new ones'.
	switched := len(r.Policies()) == 2
	for _, k := range slices.Concat(keys, []string{"new"}) {
		_, err := r.Peek(bg, k, 4)
		assert.Equal(t, switched, err == nil, "%s: Peek of 4: %v; the router's policies are %+v", k, err, r.Policies())
	}
	snap := snapshotOf(t, r)
	cfg := chanlimit.Config{Policies: r.Policies(), Partitions: 3, Clock: clk}
	dst, err := chanlimit.New(cfg)
	require.NoError(t, err)
	defer dst.Close()
	assert.NoError(t, dst.Restore(bg, bytesReader(snap)), "a router's snapshot restores into a router of its Policies")
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// TestAGoexitInAdoptDuringSetPoliciesDropsOnlyItsKey: a rule whose Adopt
// runs runtime.Goexit on three keys (two of them in a row, so that the
// goroutine finishing the switch ends too) while SetPolicies switches
// three partitions: SetPolicies succeeds, as it does when Adopt panics;
// each of the three keys is dropped and counted once in Stats.Panicked;
// every other key decides exactly as in a twin router whose SetPolicies
// met no Goexit, through the time its entries leave the window. (Before
// the fix, the interrupted partition stayed under the old policies, and
// the keys carried before the Goexit had had their old sliding_window_log
// entries cut in place by the new rule's Adopt, which works on a copy
// sharing their array: they then decided otherwise, a denial with a
// RetryAfter of 0 among them.)
func TestAGoexitInAdoptDuringSetPoliciesDropsOnlyItsKey(t *testing.T) {
	var calls, twinCalls atomic.Int64
	name := registerBucketAs(t, func(tb *algorithms.TokenBucket) adoptExits {
		return adoptExits{tb, &calls, func(c int64) bool { return c == 6 || c == 7 || c == 25 }}
	})
	twinName := registerBucketAs(t, func(tb *algorithms.TokenBucket) adoptExits {
		return adoptExits{tb, &twinCalls, func(int64) bool { return false }}
	})
	policies := func(name string, log, p int) []chanlimit.Policy {
		return []chanlimit.Policy{
			{Name: "log", Algorithm: "sliding_window_log", Limit: log, Window: time.Hour},
			{Name: "p", Algorithm: name, Limit: p, Window: time.Hour},
		}
	}
	r, clk := newRouter(t, chanlimit.Config{Policies: policies(name, 10, 20), Partitions: 3})
	twin, clkTwin := newRouter(t, chanlimit.Config{Policies: policies(twinName, 10, 20), Partitions: 3})
	keys := make([]string, 0, 30)
	for i := range 30 {
		keys = append(keys, fmt.Sprint("k", i))
	}
	for step := range 3 { // 3 units at 0, 10m and 20m: entries [3 3 3]
		for _, k := range keys {
			require.True(t, allowN(t, r, k, 3).Allowed)
			require.True(t, allowN(t, twin, k, 3).Allowed)
		}
		if step < 2 {
			clk.Advance(10 * time.Minute)
			clkTwin.Advance(10 * time.Minute)
		}
	}
	require.NoError(t, r.SetPolicies(bg, policies(name, 4, 21)...))
	require.NoError(t, twin.SetPolicies(bg, policies(twinName, 4, 21)...))
	assert.Equal(t, policies(name, 4, 21), r.Policies())
	assert.Equal(t, uint64(3), stats(t, r).Panicked, "three Goexits, each counted once")
	assert.Equal(t, int64(30), calls.Load(), "each key adopted once (the three that exited too)")

	dropped := map[string]bool{}
	for _, at := range []time.Duration{20 * time.Minute, 40 * time.Minute, 50*time.Minute + 1, 60*time.Minute + 1, 70*time.Minute + 1} {
		clk.Set(epoch.Add(at))
		clkTwin.Set(epoch.Add(at))
		for _, k := range keys {
			for n := 1; n <= 5; n++ {
				want, werr := twin.Peek(bg, k, n)
				got, gerr := r.Peek(bg, k, n)
				if dropped[k] || (at == 20*time.Minute && n == 1 && want != got) {
					dropped[k] = true
					want, werr = twin.Peek(bg, "never-seen", n) // untouched
				}
				assert.Equal(t, werr == nil, gerr == nil, "t+%v %s n=%d: %v, %v", at, k, n, werr, gerr)
				assert.Equal(t, want, got, "t+%v %s n=%d: decides as the twin", at, k, n)
			}
		}
	}
	assert.Len(t, dropped, 3, "the three keys whose Adopt ended the goroutine: %v", dropped)
}
