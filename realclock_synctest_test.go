package chanlimit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// TestRealClockInASynctestBubble: a router on the real clock (the default)
// started inside a testing/synctest bubble runs on the bubble's time, so a
// test of code that builds its own router needs no fake clock to be
// instant and exact (docs/testing.md says so).
func TestRealClockInASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Minute}) // clock.Real()
		require.NoError(t, err)
		defer r.Close()
		ctx := context.Background()

		assert.True(t, r.Allow("ann"))
		assert.True(t, r.Allow("ann"))
		d, err := r.AllowN(ctx, "ann", 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Equal(t, 30*time.Second, d.RetryAfter, "the bubble's clock stands still while goroutines run")

		start := time.Now()
		w, err := r.WaitN(ctx, "ann", 1) // the partition's timer runs on the bubble's clock
		require.NoError(t, err)
		assert.True(t, w.Allowed)
		assert.Equal(t, 30*time.Second, time.Since(start), "granted exactly at its turn")

		time.Sleep(time.Minute) // the bubble's time: the bucket refills, no wall-clock time passes
		d, err = r.Peek(ctx, "ann", 2)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
	})
}
