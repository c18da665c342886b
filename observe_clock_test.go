package chanlimit_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/internal/clocktest"
)

// TestObserveAClockThatExitsEndsNoCaller: a clock that calls
// runtime.Goexit fails only the request it was read for, with Observe set
// as without, though a wait's time is measured on the router's clock: the
// caller's goroutine never reads a clock that may end it. (It failed
// before: with Observe, WaitN read the clock on the caller's goroutine,
// and the Goexit ended it; WaitN never returned.)
func TestObserveAClockThatExitsEndsNoCaller(t *testing.T) {
	for _, observe := range []bool{false, true} {
		clk := clocktest.NewRigged(epoch)
		cfg := chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 1, Clock: clk}
		if observe {
			cfg.Observe = func(context.Context, chanlimit.Event) {}
		}
		r, err := chanlimit.New(cfg)
		require.NoError(t, err)
		clk.Rig(runtime.Goexit)
		returned := make(chan error, 1)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			_, err := r.WaitN(context.Background(), "k", 1)
			returned <- err
		}()
		<-ended
		clk.Rig(nil)
		select {
		case err := <-returned:
			require.ErrorIs(t, err, chanlimit.ErrClockPanic, "observe=%v", observe)
		default:
			t.Errorf("observe=%v: WaitN never returned: the clock's Goexit ended the caller's goroutine", observe)
		}
		require.NoError(t, r.Close())
	}
}
