package chanlimit_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// Rules whose Adopt panics, or runs runtime.Goexit, while a key's
// policies change: each costs what a panic in any other method costs.

// adoptPanics is a token bucket whose Adopt panics, whatever it is asked
// to adopt.
type adoptPanics struct{ *algorithms.TokenBucket }

func (adoptPanics) Adopt(*algorithms.TokenBucketState, algorithms.Machine[algorithms.TokenBucketState], time.Duration) {
	panic("no adopting today")
}

// adoptExits is a token bucket whose Adopt runs runtime.Goexit at the
// calls (counting from 1) that exits says, and adopts otherwise.
type adoptExits struct {
	*algorithms.TokenBucket
	calls *atomic.Int64
	exits func(call int64) bool
}

func (m adoptExits) Adopt(s *algorithms.TokenBucketState, from algorithms.Machine[algorithms.TokenBucketState], now time.Duration) {
	if m.exits(m.calls.Add(1)) {
		runtime.Goexit()
	}
	if f, ok := from.(adoptExits); ok {
		m.TokenBucket.Adopt(s, f.TokenBucket, now)
	}
}

func registerBucketAs[M algorithms.Machine[algorithms.TokenBucketState]](t *testing.T, wrap func(*algorithms.TokenBucket) M) string {
	t.Helper()
	name := fmt.Sprint("test_adopt_", registrations.Add(1))
	require.NoError(t, chanlimit.Register[algorithms.TokenBucketState](name, func(p algorithms.Params) (M, error) {
		tb, err := algorithms.NewTokenBucket(p)
		return wrap(tb), err
	}))
	return name
}

// TestAPanickingAdoptDropsTheKey: a rule whose Adopt panics, in
// SetPolicies, SetOverride and ClearOverride: each key it was adopting is
// dropped (it starts afresh), each panic counts once in Stats.Panicked, the
// change is made, and the router and its other keys go on.
func TestAPanickingAdoptDropsTheKey(t *testing.T) {
	name := registerBucketAs(t, func(tb *algorithms.TokenBucket) adoptPanics { return adoptPanics{tb} })
	p := chanlimit.Policy{Name: "p", Algorithm: name, Limit: 3, Window: time.Hour}
	other := chanlimit.Policy{Name: "o", Algorithm: "fixed_window", Limit: 5, Window: time.Hour}
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{p, other}, Partitions: 2, MaxOverrides: 2})
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, allowN(t, r, k, 2).Allowed)
	}
	p2 := p
	p2.Limit = 4
	require.NoError(t, r.SetPolicies(bg, p2, other))
	st := stats(t, r)
	assert.Equal(t, uint64(3), st.Panicked, "one per key adopted")
	assert.Zero(t, st.Keys, "all three dropped")
	for _, k := range []string{"a", "b", "c"} {
		assert.Equal(t, 3, peekAt(t, r, k, 1).Remaining, "%s starts afresh under 4", k)
	}
	assert.Equal(t, p2, r.Policies()[0])

	require.True(t, allowN(t, r, "a", 2).Allowed)
	require.NoError(t, r.SetOverride(bg, "a", p, other))
	assert.Equal(t, uint64(4), stats(t, r).Panicked)
	assert.Equal(t, 1, stats(t, r).Overrides, "the override is set")
	assert.Equal(t, 2, peekAt(t, r, "a", 1).Remaining, "a starts afresh under its override's 3")
	require.True(t, allowN(t, r, "a", 1).Allowed)
	require.NoError(t, r.ClearOverride(bg, "a"))
	assert.Equal(t, uint64(5), stats(t, r).Panicked)
	assert.Zero(t, stats(t, r).Overrides)
	assert.Equal(t, 3, peekAt(t, r, "a", 1).Remaining, "a starts afresh under the router's 4")
	assert.True(t, allowN(t, r, "d", 1).Allowed, "the router goes on")
}

// TestAGoexitInAdoptKeepsTheOverrideCount: a rule whose Adopt runs
// runtime.Goexit while SetOverride moves a key into a new override: the
// call fails as for a panic (ErrAlgorithmPanic), the key is dropped and the
// Goexit counted once in Stats.Panicked; the key has no override, and the
// router's count of overrides is not left one too high: MaxOverrides keys
// can still have one. The same in ClearOverride: the key is dropped, and
// keeps its override.
func TestAGoexitInAdoptKeepsTheOverrideCount(t *testing.T) {
	var calls atomic.Int64
	name := registerBucketAs(t, func(tb *algorithms.TokenBucket) adoptExits {
		return adoptExits{tb, &calls, func(c int64) bool { return c == 1 || c == 3 }}
	})
	p := chanlimit.Policy{Name: "p", Algorithm: name, Limit: 3, Window: time.Hour}
	p5 := chanlimit.Policy{Name: "p", Algorithm: name, Limit: 5, Window: time.Hour}
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{p}, Partitions: 1, MaxOverrides: 1})
	require.True(t, allowN(t, r, "k", 2).Allowed)
	err := r.SetOverride(bg, "k", p5) // Adopt's call 1
	require.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	st := stats(t, r)
	assert.Equal(t, uint64(1), st.Panicked, "the Goexit counts as a panic")
	assert.Equal(t, 0, st.Overrides, "k has no override")
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 20 * time.Minute, Policy: "p"}, peekAt(t, r, "k", 1),
		"k was dropped, as for a panic: untouched under the router's policy")

	require.True(t, allowN(t, r, "k", 2).Allowed)
	require.NoError(t, r.SetOverride(bg, "k", p5), "MaxOverrides is 1 and no key has one") // call 2
	assert.Equal(t, 1, stats(t, r).Overrides)
	assert.Equal(t, 0, peekAt(t, r, "k", 1).Remaining, "1 token kept, under a bucket of 5")
	err = r.ClearOverride(bg, "k") // call 3
	require.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	st = stats(t, r)
	assert.Equal(t, uint64(2), st.Panicked)
	assert.Equal(t, 1, st.Overrides, "k keeps its override")
	assert.Equal(t, 4, peekAt(t, r, "k", 1).Remaining, "k was dropped: untouched under its override")
	assert.ErrorIs(t, r.SetOverride(bg, "other", p5), chanlimit.ErrTooManyOverrides)
	require.NoError(t, r.ClearOverride(bg, "k"), "k holds no state: nothing to adopt")
	require.NoError(t, r.SetOverride(bg, "other", p5))
}
