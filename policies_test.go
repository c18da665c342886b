package chanlimit_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// perSecondAndMinute is two policies of two algorithms: 2 per second as
// a token bucket, and 3 per minute as a fixed window.
var perSecondAndMinute = []chanlimit.Policy{
	{Name: "second", Limit: 2, Window: time.Second},
	{Name: "minute", Algorithm: "fixed_window", Limit: 3, Window: time.Minute},
}

func peekAt(t *testing.T, r *chanlimit.Router, key string, n int) chanlimit.Decision {
	t.Helper()
	d, err := r.Peek(bg, key, n)
	require.NoError(t, err, "Peek(%q, %d)", key, n)
	return d
}

// TestSeveralPoliciesDecideTogether: a request is allowed only if every
// policy allows it, and takes from each; a denial takes from none; the
// decision's fields combine the policies' as Decision documents.
func TestSeveralPoliciesDecideTogether(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: perSecondAndMinute, Partitions: 2})
	const ms = time.Millisecond
	type want = chanlimit.Decision
	steps := []struct {
		at   time.Duration // since the start
		n    int
		want want
	}{
		// Both allow: the fewest Remaining decides (second: 1, minute: 2).
		{0, 1, want{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Minute, Policy: "second"}},
		{0, 1, want{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Minute, Policy: "second"}},
		// second denies; minute would allow, and reports its state as it
		// is: 1 left (not 0), its window's end as ResetAfter.
		{0, 1, want{Limit: 2, Remaining: 0, RetryAfter: 500 * ms, ResetAfter: time.Minute, Policy: "second"}},
		{500*ms - 1, 1, want{Limit: 2, Remaining: 0, RetryAfter: 1, ResetAfter: time.Minute - 500*ms + 1, Policy: "second"}},
		// At RetryAfter it passes, and took nothing from minute before.
		{500 * ms, 1, want{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Minute - 500*ms, Policy: "second"}},
		// minute is out: it decides, though second would allow (1 token).
		{time.Second, 1, want{Limit: 3, Remaining: 0, RetryAfter: 59 * time.Second, ResetAfter: 59 * time.Second, Policy: "minute"}},
		// Both deny (n = 2: second has 1 token): the longest wait decides.
		{time.Second, 2, want{Limit: 3, Remaining: 0, RetryAfter: 59 * time.Second, ResetAfter: 59 * time.Second, Policy: "minute"}},
		{time.Minute - 1, 2, want{Limit: 3, Remaining: 0, RetryAfter: 1, ResetAfter: 1, Policy: "minute"}},
		{time.Minute, 2, want{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Minute, Policy: "second"}},
	}
	start := clk.Now()
	for i, st := range steps {
		clk.Set(start.Add(st.at))
		peeked := peekAt(t, r, "k", st.n)
		got := allowN(t, r, "k", st.n)
		assert.Equal(t, st.want, got, "step %d: AllowN(t+%v, %d)", i, st.at, st.n)
		assert.Equal(t, got, peeked, "step %d: Peek agrees", i)
	}

	_, err := r.AllowN(bg, "k", 3)
	assert.ErrorIs(t, err, chanlimit.ErrExceedsCapacity, "the smallest capacity is second's, 2")
	assert.ErrorContains(t, err, `"second"`)
	_, err = r.Peek(bg, "new", 3)
	assert.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)
}

// TestSeveralPoliciesMixAllAlgorithms: every pair of algorithms, as two
// policies, decides a burst and its RetryAfter exactly: at now +
// RetryAfter the denied request passes, 1ns before it does not.
func TestSeveralPoliciesMixAllAlgorithms(t *testing.T) {
	for _, a := range registered {
		for _, b := range registered {
			t.Run(a+"+"+b, func(t *testing.T) {
				r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
					{Name: "fast", Algorithm: a, Limit: 3, Window: time.Second},
					{Name: "slow", Algorithm: b, Limit: 5, Window: 10 * time.Second},
				}})
				for range 3 {
					require.True(t, allowN(t, r, "k", 1).Allowed)
				}
				for step := range 6 {
					d := allowN(t, r, "k", 1)
					if d.Allowed {
						continue
					}
					require.Positive(t, d.RetryAfter, "step %d", step)
					clk.Advance(d.RetryAfter - 1)
					require.False(t, peekAt(t, r, "k", 1).Allowed, "step %d: 1ns before RetryAfter %v (%s)", step, d.RetryAfter, d.Policy)
					clk.Advance(1)
					require.True(t, peekAt(t, r, "k", 1).Allowed, "step %d: at RetryAfter %v (%s)", step, d.RetryAfter, d.Policy)
				}
			})
		}
	}
}

// TestPoliciesRefuseBadInput: New, SetPolicies and SetOverride refuse bad
// policies with an ErrInvalidConfig naming the policy and the field, and
// change nothing.
func TestPoliciesRefuseBadInput(t *testing.T) {
	sec := chanlimit.Policy{Name: "second", Limit: 2, Window: time.Second}
	tests := []struct {
		name string
		give chanlimit.Config
		want string
	}{
		{"Nothing", chanlimit.Config{}, "no limit"},
		{"Both", chanlimit.Config{Limit: 1, Window: time.Second, Policies: []chanlimit.Policy{sec}}, "both set"},
		{"BothBurst", chanlimit.Config{Burst: 1, Policies: []chanlimit.Policy{sec}}, "both set"},
		{"DuplicateNames", chanlimit.Config{Policies: []chanlimit.Policy{sec, sec}}, `Policies[1] ("second"): Name: Policies[0] has that name too`},
		{"DefaultTwice", chanlimit.Config{Policies: []chanlimit.Policy{{Limit: 1, Window: time.Second}, {Name: "default", Limit: 1, Window: time.Minute}}}, `Policies[1] ("default"): Name`},
		{"BadLimit", chanlimit.Config{Policies: []chanlimit.Policy{sec, {Name: "hour", Window: time.Hour}}}, `Policies[1] ("hour"): Limit: must be > 0`},
		{"BadWindow", chanlimit.Config{Policies: []chanlimit.Policy{{Name: "w", Limit: 1}}}, `Policies[0] ("w"): Window`},
		{"BadBurst", chanlimit.Config{Policies: []chanlimit.Policy{{Name: "w", Algorithm: "fixed_window", Limit: 1, Window: time.Second, Burst: 2}}}, `Policies[0] ("w"): Algorithm "fixed_window"`},
		{"UnknownAlgorithm", chanlimit.Config{Policies: []chanlimit.Policy{sec, {Name: "x", Algorithm: "nope", Limit: 1, Window: time.Second}}}, `Policies[1] ("x"): Algorithm: "nope" is not registered`},
		{"NameNotASCII", chanlimit.Config{Policies: []chanlimit.Policy{{Name: "sécond", Limit: 1, Window: time.Second}}}, "printable ASCII"},
		{"NameWithNewline", chanlimit.Config{Policies: []chanlimit.Policy{{Name: "a\nb", Limit: 1, Window: time.Second}}}, "printable ASCII"},
		{"NegativeMaxOverrides", chanlimit.Config{Limit: 1, Window: time.Second, MaxOverrides: -1}, "MaxOverrides"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := chanlimit.New(tt.give)
			require.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.want)
		})
	}

	r, _ := newRouter(t, chanlimit.Config{Policies: perSecondAndMinute})
	require.True(t, allowN(t, r, "k", 2).Allowed)
	before := r.Policies()
	for _, tt := range tests[3:11] { // those that are about the policies
		err := r.SetPolicies(bg, tt.give.Policies...)
		require.ErrorIs(t, err, chanlimit.ErrInvalidConfig, tt.name)
		assert.ErrorContains(t, err, strings.Replace(tt.want, "Policies", "SetPolicies", 2), tt.name)
		err = r.SetOverride(bg, "k", tt.give.Policies...)
		require.ErrorIs(t, err, chanlimit.ErrInvalidConfig, tt.name)
		assert.ErrorContains(t, err, strings.Replace(tt.want, "Policies", "SetOverride", 2), tt.name)
	}
	assert.ErrorIs(t, r.SetPolicies(bg), chanlimit.ErrInvalidConfig, "no policy")
	assert.ErrorIs(t, r.SetOverride(bg, "k"), chanlimit.ErrInvalidConfig, "no policy")
	long := strings.Repeat("k", chanlimit.DefaultMaxKeyBytes+1)
	assert.ErrorIs(t, r.SetOverride(bg, long, sec), chanlimit.ErrKeyTooLong)
	assert.ErrorIs(t, r.ClearOverride(bg, long), chanlimit.ErrKeyTooLong)

	assert.Equal(t, before, r.Policies(), "nothing changed")
	assert.Zero(t, stats(t, r).Overrides)
	d := allowN(t, r, "k", 1)
	assert.Equal(t, chanlimit.Decision{Limit: 2, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Minute, Policy: "second"}, d,
		"k's state is as it was")
}

// TestPoliciesDefaultName: the single fields are the policy "default", and
// so is a policy whose Name is "".
func TestPoliciesDefaultName(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
	assert.Equal(t, []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 1, Window: time.Second}}, r.Policies())
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Limit: 2, Window: time.Second}))
	assert.Equal(t, "default", allowN(t, r, "k", 1).Policy)
	assert.Equal(t, []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 2, Window: time.Second}}, r.Policies())
}

// TestOverrides: a key with an override is under its own policies until
// ClearOverride; the override outlives the key's state being let go and
// its Reset, counts in Stats.Overrides and against MaxOverrides.
func TestOverrides(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, MaxOverrides: 2, Partitions: 1})
	vip := chanlimit.Policy{Name: "vip", Limit: 5, Window: time.Second}
	require.NoError(t, r.SetOverride(bg, "vip", vip))
	assert.Equal(t, 1, stats(t, r).Overrides)

	d := allowN(t, r, "vip", 5)
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 5, ResetAfter: time.Second, Policy: "vip"}, d)
	assert.True(t, allowN(t, r, "other", 1).Allowed)
	assert.False(t, allowN(t, r, "other", 1).Allowed, "other keys are under the router's policy")
	_, err := r.AllowN(bg, "other", 2)
	assert.ErrorIs(t, err, chanlimit.ErrExceedsCapacity, "capacity is per key")

	// Forgotten: the key's state goes once idle, its override stays.
	clk.Advance(time.Hour)
	for range 10 { // each burst lets a few idle keys go
		allowN(t, r, "tick", 1)
		clk.Advance(time.Second)
	}
	st := stats(t, r)
	assert.LessOrEqual(t, st.Keys+st.Idle, 1, "only tick may be held")
	assert.Equal(t, uint64(2), st.Expired, "vip and other were let go")
	assert.Equal(t, 1, st.Overrides)
	assert.True(t, allowN(t, r, "vip", 5).Allowed, "still under its override")
	require.NoError(t, r.Reset(bg, "vip"))
	assert.True(t, allowN(t, r, "vip", 5).Allowed, "Reset drops the state, not the override")

	// MaxOverrides: a third key is refused; changing a key's override or
	// clearing one is fine.
	require.NoError(t, r.SetOverride(bg, "second", vip))
	err = r.SetOverride(bg, "third", vip)
	assert.ErrorIs(t, err, chanlimit.ErrTooManyOverrides)
	assert.True(t, allowN(t, r, "third", 1).Allowed)
	assert.False(t, allowN(t, r, "third", 1).Allowed, "third is under the router's policy")
	require.NoError(t, r.SetOverride(bg, "second", chanlimit.Policy{Name: "vip", Limit: 7, Window: time.Second}))
	require.NoError(t, r.ClearOverride(bg, "second"))
	require.NoError(t, r.ClearOverride(bg, "second"), "clearing twice does nothing")
	require.NoError(t, r.ClearOverride(bg, "never"), "a key without one")
	require.NoError(t, r.SetOverride(bg, "third", vip))
	assert.Equal(t, 2, stats(t, r).Overrides)
	require.NoError(t, r.ClearOverride(bg, "vip"))
	d = allowN(t, r, "vip", 1)
	assert.Equal(t, "default", d.Policy, "vip is back under the router's policy")
}

// TestOverridesAreNeverEvicted: a flood of new keys, with EvictLRU, evicts
// keys without an override, never a key with one, nor its state.
func TestOverridesAreNeverEvicted(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Hour, MaxKeys: 4, EvictLRU: true, Partitions: 1})
	require.NoError(t, r.SetOverride(bg, "vip", chanlimit.Policy{Name: "vip", Limit: 10, Window: time.Hour}))
	require.True(t, allowN(t, r, "vip", 9).Allowed)
	for k := range 100 {
		require.True(t, allowN(t, r, fmt.Sprint("flood-", k), 1).Allowed)
	}
	st := stats(t, r)
	assert.Equal(t, 5, st.Keys, "four under the cap, and vip")
	assert.Equal(t, uint64(96), st.Evicted)
	d := allowN(t, r, "vip", 1)
	assert.Equal(t, 0, d.Remaining, "vip kept its state: 9 of 10 used, then 1")
	assert.False(t, allowN(t, r, "vip", 1).Allowed)
}

// TestSnapshotCarriesPoliciesAndOverrides: a snapshot restores the keys'
// overrides with their states; a router of other policies, or with room
// for fewer overrides, refuses it and keeps its own.
func TestSnapshotCarriesPoliciesAndOverrides(t *testing.T) {
	cfg := chanlimit.Config{Policies: perSecondAndMinute, Partitions: 3}
	src, clk := newRouter(t, cfg)
	vip := []chanlimit.Policy{{Name: "vip", Algorithm: "sliding_window_log", Limit: 10, Window: time.Minute}}
	for _, k := range []string{"vip", "vip2", "idle-vip"} {
		require.NoError(t, src.SetOverride(bg, k, vip...))
	}
	require.NoError(t, src.SetOverride(bg, "gold", chanlimit.Policy{Name: "gold", Limit: 100, Window: time.Second}, perSecondAndMinute[1]))
	for _, k := range []string{"a", "b", "vip", "vip2", "gold"} {
		allowN(t, src, k, 2)
	}
	clk.Advance(time.Second)
	var buf bytes.Buffer
	require.NoError(t, src.Snapshot(bg, &buf))
	snapshot := buf.Bytes()
	clk.Advance(10 * time.Second)

	cfg.Clock = clk
	dst, err := chanlimit.New(cfg)
	require.NoError(t, err)
	defer dst.Close()
	require.NoError(t, dst.SetOverride(bg, "mine", vip...))
	require.NoError(t, dst.Restore(bg, bytes.NewReader(snapshot)))
	st := stats(t, dst)
	assert.Equal(t, 4, st.Overrides, "the snapshot's, and not mine")
	for _, k := range []string{"a", "b", "c", "vip", "vip2", "idle-vip", "gold", "mine"} {
		for _, n := range []int{1, 2} {
			want, err := src.Peek(bg, k, n)
			require.NoError(t, err)
			got, err := dst.Peek(bg, k, n)
			require.NoError(t, err)
			assert.Equal(t, want, got, "%s, n = %d", k, n)
		}
	}
	d := peekAt(t, dst, "gold", 3)
	assert.Equal(t, "minute", d.Policy, "gold's override holds two policies")

	refusing := map[string]chanlimit.Config{
		"other policies":  {Policies: perSecondAndMinute[:1]},
		"other order":     {Policies: []chanlimit.Policy{perSecondAndMinute[1], perSecondAndMinute[0]}},
		"fewer overrides": {Policies: perSecondAndMinute, MaxOverrides: 3},
	}
	for what, c := range refusing {
		r, _ := newRouter(t, c)
		require.NoError(t, r.SetOverride(bg, "mine", vip...))
		err := r.Restore(bg, bytes.NewReader(snapshot))
		assert.ErrorIs(t, err, chanlimit.ErrBadSnapshot, what)
		assert.Equal(t, 1, stats(t, r).Overrides, "%s: mine is kept", what)
	}
	r, _ := newRouter(t, refusing["fewer overrides"])
	assert.ErrorIs(t, r.Restore(bg, bytes.NewReader(snapshot)), chanlimit.ErrTooManyOverrides)
}

// TestSetPoliciesRacesWithTraffic: while SetPolicies switches the router
// between two sets of policies, every batch on one partition is decided
// under one set or the other, never a mix, and no call fails.
func TestSetPoliciesRacesWithTraffic(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "a", Limit: 1000, Window: time.Second}}, Partitions: 1})
	setA := []chanlimit.Policy{{Name: "a", Limit: 1000, Window: time.Second}}
	setB := []chanlimit.Policy{{Name: "b", Limit: 1000, Window: time.Second}, {Name: "c", Algorithm: "sliding_window_log", Limit: 999, Window: time.Second}}
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Go(func() {
			reqs := make([]chanlimit.Request, 16)
			for i := range reqs {
				reqs[i] = chanlimit.Request{Key: fmt.Sprint(g, "-", i), N: 1}
			}
			out := make([]chanlimit.Decision, len(reqs))
			for ctx.Err() == nil {
				if err := r.AllowBatch(bg, reqs, out); err != nil {
					errs <- err
					return
				}
				for _, d := range out[1:] {
					if (d.Policy == "a") != (out[0].Policy == "a") {
						errs <- fmt.Errorf("a batch decided under two sets: %q and %q", out[0].Policy, d.Policy)
						return
					}
				}
			}
		})
	}
	for i := range 50 {
		set := setA
		if i%2 == 0 {
			set = setB
		}
		require.NoError(t, r.SetPolicies(bg, set...))
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestBatchesWithOverrides: a batch that mixes keys under the router's
// policies and keys under overrides (two of them sharing one set of
// policies) decides as AllowN would one by one.
func TestBatchesWithOverrides(t *testing.T) {
	cfg := chanlimit.Config{Policies: perSecondAndMinute, Partitions: 2}
	batch, clkB := newRouter(t, cfg)
	single, clkS := newRouter(t, cfg)
	vip := []chanlimit.Policy{{Name: "vip", Algorithm: "gcra", Limit: 4, Window: time.Second}}
	for _, r := range []*chanlimit.Router{batch, single} {
		require.NoError(t, r.SetOverride(bg, "vip", vip...))
		require.NoError(t, r.SetOverride(bg, "vip2", vip...))
		require.NoError(t, r.SetOverride(bg, "gold", chanlimit.Policy{Name: "minute", Algorithm: "fixed_window", Limit: 6, Window: time.Minute}))
	}
	keys := []string{"a", "b", "vip", "vip2", "gold"}
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 40 {
		reqs := make([]chanlimit.Request, 1+rng.IntN(12))
		for i := range reqs {
			reqs[i] = chanlimit.Request{Key: keys[rng.IntN(len(keys))], N: 1 + rng.IntN(2)}
		}
		out := make([]chanlimit.Decision, len(reqs))
		require.NoError(t, batch.AllowBatch(bg, reqs, out), "round %d", round)
		for i, req := range reqs {
			assert.Equal(t, allowN(t, single, req.Key, req.N), out[i], "round %d, request %d (%s)", round, i, req.Key)
		}
		step := time.Duration(rng.Int64N(int64(700 * time.Millisecond)))
		clkB.Advance(step)
		clkS.Advance(step)
	}
}
