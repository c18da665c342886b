package chanlimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// lineRefusals plays, on r (whose key k is under an enforced policy of 1
// per hour and a dry-run fixed_window of 3 per hour), requests that a
// line of waiters refuses, and checks that the dry-run policy decides
// each all the same: AllowN and a batch item take from it, a Peek takes
// nothing, and the third unit would be denied.
func lineRefusals(t *testing.T, r *Router) {
	ctx := context.Background()
	d, err := r.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	require.Equal(t, Decision{Allowed: true, Limit: 1, ResetAfter: time.Hour, Policy: "hour"}, d)
	waited := make(chan error, 1)
	go func() {
		_, err := r.WaitN(ctx, "k", 1)
		waited <- err
	}()
	synctest.Wait()
	refused := func(d Decision, wouldDeny bool, what string) {
		t.Helper()
		assert.False(t, d.Allowed, what)
		assert.Equal(t, "hour", d.Policy, what)
		assert.Equal(t, wouldDeny, d.WouldDeny, what)
	}
	d, err = r.AllowN(ctx, "k", 1) // the shadow's second unit
	require.NoError(t, err)
	refused(d, false, "AllowN in line")
	out := make([]Decision, 1)
	require.NoError(t, r.AllowBatch(ctx, []Request{{"k", 1}}, out)) // its third
	refused(out[0], false, "a batch item in line")
	d, err = r.Peek(ctx, "k", 1)
	require.NoError(t, err)
	refused(d, true, "Peek in line: the shadow is spent")
	d, err = r.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	refused(d, true, "AllowN in line: the shadow is spent")
	st, err := r.Stats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, st.WouldDeny, "the AllowN; not the Peek")
	assert.Equal(t, 1, st.Waiting)
}

func lineRefusalPolicies() []Policy {
	return []Policy{
		{Name: "hour", Limit: 1, Window: time.Hour},
		{Name: "shadow", Algorithm: "fixed_window", Limit: 3, Window: time.Hour, DryRun: true},
	}
}

// TestDryRunDecidesWhatALineRefuses: a request refused because callers
// wait on its key is decided by the key's dry-run policies all the same,
// in memory and through a Store.
func TestDryRunDecidesWhatALineRefuses(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, err := New(Config{Policies: lineRefusalPolicies(), Clock: clock.NewFake(storeStart)})
			require.NoError(t, err)
			defer r.Close()
			lineRefusals(t, r)
		})
	})
	t.Run("store", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			clk := clock.NewFake(storeStart)
			st := newMemStore(clk, FailClosed)
			defer close(st.quit)
			r, err := New(Config{Policies: lineRefusalPolicies(), Clock: clk, Store: st})
			require.NoError(t, err)
			defer r.Close()
			lineRefusals(t, r)
		})
	})
}

// TestStoreDryRunAlone: a key under dry-run policies alone waits for
// nothing and, when the store fails under FailOpen, is allowed as memory
// allows it: neither asks for a tightest policy it does not have.
func TestStoreDryRunAlone(t *testing.T) {
	ctx := context.Background()
	policies := []Policy{{Name: "shadow", Limit: 2, Window: time.Hour, DryRun: true}}
	for _, mode := range []FailMode{FailClosed, FailOpen, FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := clock.NewFake(storeStart)
			st := newMemStore(clk, mode)
			r, err := New(Config{Policies: policies, Clock: clk, Store: st})
			require.NoError(t, err)
			defer r.Close()
			for i := range 3 {
				d, err := r.WaitN(ctx, "k", 1)
				require.NoError(t, err)
				assert.Equal(t, Decision{Allowed: true, WouldDeny: i == 2}, d, "wait %d", i)
			}
			st.down.Store(true)
			d, err := r.AllowN(ctx, "k", 1)
			if mode == FailClosed {
				require.ErrorIs(t, err, ErrStoreUnavailable)
				return
			}
			require.NoError(t, err)
			assert.True(t, d.Allowed)
		})
	}
}

// TestDryRunLeavesTheWaitsResetAfter: a wait refused for its deadline
// says the ResetAfter of the enforced policies, as a router without the
// dry-run one does.
func TestDryRunLeavesTheWaitsResetAfter(t *testing.T) {
	ctx := context.Background()
	mk := func(ps ...Policy) *Router {
		r, err := New(Config{Policies: ps, Clock: clock.NewFake(storeStart)})
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		return r
	}
	hour := Policy{Name: "hour", Limit: 1, Window: time.Hour}
	shadow := Policy{Name: "shadow", Algorithm: "fixed_window", Limit: 100, Window: 10 * time.Hour, DryRun: true}
	var ds []Decision
	for _, r := range []*Router{mk(hour), mk(hour, shadow)} {
		_, err := r.AllowN(ctx, "k", 1)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		d, err := r.WaitN(wctx, "k", 1)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		d.WouldDeny = false
		ds = append(ds, d)
	}
	assert.Equal(t, ds[0], ds[1])
	assert.Equal(t, time.Hour, ds[1].ResetAfter)
}
