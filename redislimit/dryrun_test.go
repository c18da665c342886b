package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/redislimit"
)

// TestDryRunWaitNThroughRedis: waiters on a Redis-backed router wait for
// the enforced policy alone, and the dry-run one decides each grant once,
// as in memory: 2 of the 4 grants would have been denied. The waiters
// that must wait are asked again through the script (turns), which never
// takes from the dry-run policy before the grant.
func TestDryRunWaitNThroughRedis(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Clock: clk, Store: st, Policies: []chanlimit.Policy{
		{Name: "second", Limit: 1, Window: time.Second},
		{Name: "shadow", Algorithm: "fixed_window", Limit: 2, Window: time.Hour, DryRun: true},
	}})
	require.NoError(t, err)
	defer r.Close()
	for i := range 4 {
		done := make(chan chanlimit.Decision, 1)
		go func() {
			d, err := r.WaitN(ctx, "k", 1)
			assert.NoError(t, err)
			done <- d
		}()
		var d chanlimit.Decision
		if i > 0 {
			require.NoError(t, clk.BlockUntilContext(ctx, 1)) // the waiter's line is timed
			clk.Advance(time.Second)
		}
		d = <-done
		assert.True(t, d.Allowed, "wait %d", i)
		assert.Equal(t, i >= 2, d.WouldDeny, "wait %d: the shadow's hour holds 2", i)
	}
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, s.WouldDeny)
	assert.Zero(t, s.StoreErrors)
}

// TestDryRunAloneThroughRedis: a key under dry-run policies alone waits
// for nothing, and a request a line refuses is decided by the dry-run
// policies all the same, as in memory.
func TestDryRunAloneThroughRedis(t *testing.T) {
	ctx := context.Background()
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Store: st, Policies: []chanlimit.Policy{
		{Name: "shadow", Limit: 2, Window: time.Hour, DryRun: true},
	}})
	require.NoError(t, err)
	defer r.Close()
	for i := range 3 {
		d, err := r.WaitN(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, chanlimit.Decision{Allowed: true, WouldDeny: i == 2}, d, "wait %d", i)
	}
}

// TestDryRunDecidesWhatALineRefusesThroughRedis: with a caller waiting on
// the key, an AllowN, a batch item and a Peek are refused by the line,
// and the dry-run policy decides each all the same: the first two take
// from it, and then it would deny.
func TestDryRunDecidesWhatALineRefusesThroughRedis(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Clock: clk, Store: st, Policies: []chanlimit.Policy{
		{Name: "hour", Limit: 1, Window: time.Hour},
		{Name: "shadow", Algorithm: "fixed_window", Limit: 3, Window: time.Hour, DryRun: true},
	}})
	require.NoError(t, err)
	defer r.Close()
	_, err = r.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		_, err := r.WaitN(wctx, "k", 1)
		waited <- err
	}()
	require.NoError(t, clk.BlockUntilContext(ctx, 1)) // in line, its turn an hour away
	d, err := r.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "refused by the line")
	assert.Equal(t, "hour", d.Policy)
	assert.False(t, d.WouldDeny, "the shadow's second unit")
	out := make([]chanlimit.Decision, 1)
	require.NoError(t, r.AllowBatch(ctx, []chanlimit.Request{{Key: "k", N: 1}}, out))
	assert.False(t, out[0].WouldDeny, "the shadow's third unit")
	d, err = r.Peek(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.WouldDeny, "Peek: the shadow is spent")
	assert.False(t, d.Allowed)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, s.WouldDeny, "a Peek is not counted")
	cancel()
	require.ErrorIs(t, <-waited, context.Canceled)
}
