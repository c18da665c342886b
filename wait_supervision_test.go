package chanlimit_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// failsLater is a fixed window that, once failing is set, fails every
// request for 2 units: it panics, or with exit, runs runtime.Goexit.
type failsLater struct {
	*algorithms.FixedWindow
	failing *atomic.Bool
	exit    bool
}

func (m failsLater) AllowN(s *algorithms.FixedWindowState, now time.Duration, n int, d *chanlimit.Decision) {
	if n == 2 && m.failing.Load() {
		if m.exit {
			runtime.Goexit()
		}
		panic("two, later")
	}
	m.FixedWindow.AllowN(s, now, n, d)
}

// TestAWaiterWhoseRuleFailsGetsTheErrorAndTheLineGoesOn: the rule fails
// on the head of a line when its turn comes: the head is answered with
// ErrAlgorithmPanic, the key is dropped, and the waiter behind it is
// granted on the fresh key.
func TestAWaiterWhoseRuleFailsGetsTheErrorAndTheLineGoesOn(t *testing.T) {
	for _, exit := range []bool{false, true} {
		t.Run(map[bool]string{false: "Panic", true: "Goexit"}[exit], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var failing atomic.Bool
				name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) failsLater {
					return failsLater{fw, &failing, exit}
				})
				r, clk := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Partitions: 1})
				exhaust(t, r, "k", 3)
				head := goWait(context.Background(), r, "k", 2)
				next := goWait(context.Background(), r, "k", 1)
				failing.Store(true)
				advance(clk, time.Second)

				w, done := answer(head)
				require.True(t, done)
				assert.ErrorIs(t, w.err, chanlimit.ErrAlgorithmPanic)
				w, done = answer(next)
				require.True(t, done, "the line goes on")
				require.NoError(t, w.err)
				assert.Equal(t, 2, w.d.Remaining, "on the fresh key")
				assert.Zero(t, waiting(t, r))
				assert.Equal(t, uint64(1), stats(t, r).Panicked)
			})
		})
	}
}
