package actor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

// TestAllowMore: an allowance comes with the time until its key has one
// unit more than it left, as a Peek would answer it then; a denial with
// none, and the denial is AllowN's.
func TestAllowMore(t *testing.T) {
	tb, err := algorithms.NewTokenBucket(algorithms.Params{Limit: 5, Window: time.Second})
	require.NoError(t, err)
	clk := clock.NewFake(epoch)
	p := start(keytable.NewRule(tb).NewTable(), clk, 4)
	defer stop(p)
	ctx := context.Background()
	for i, step := range []struct {
		advance time.Duration
		n       int
		allowed bool
		left    int
		more    time.Duration
	}{
		{0, 1, true, 4, 200 * time.Millisecond}, // 5 units: a token in 200ms
		{0, 3, true, 1, 200 * time.Millisecond},
		{50 * time.Millisecond, 1, true, 0, 150 * time.Millisecond}, // 0.25 of a token made already
		{0, 1, false, 0, 0},
		{150 * time.Millisecond, 1, true, 0, 200 * time.Millisecond},
	} {
		clk.Advance(step.advance)
		peek, err := p.PeekN(ctx, "k", step.n)
		require.NoError(t, err)
		d, more, err := p.AllowMore(ctx, "k", step.n)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, peek, d, "step %d: AllowN's decision", i)
		assert.Equal(t, step.allowed, d.Allowed, "step %d", i)
		assert.Equal(t, step.left, d.Remaining, "step %d", i)
		assert.Equal(t, step.more, more, "step %d", i)
		if d.Allowed {
			next, err := p.PeekN(ctx, "k", d.Remaining+1)
			require.NoError(t, err)
			assert.Equal(t, next.RetryAfter, more, "step %d: a Peek's wait", i)
		}
	}
}
