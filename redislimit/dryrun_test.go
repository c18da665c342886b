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
