package chanlimit

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// stopPanicClock is a Fake whose timers' Stop panics while panicStop is set.
type stopPanicClock struct {
	*clock.Fake
	panicStop *atomic.Bool
}

type stopPanicTimer struct {
	clock.Timer
	panicStop *atomic.Bool
}

func (c stopPanicClock) NewTimer(d time.Duration) clock.Timer {
	return stopPanicTimer{c.Fake.NewTimer(d), c.panicStop}
}

func (t stopPanicTimer) Stop() bool {
	if t.panicStop.Load() {
		panic("timer Stop")
	}
	return t.Timer.Stop()
}

// TestStoreATimerStopThatPanicsFailsNoWaiter: a line's head is asked
// again after a Refund while its timer is set, and stopping the timer
// panics. Nothing needs the timer (the head is out, and its trip wakes
// the line), so the waiter is granted by its head's trip. Before, any
// error of the timer closed the lines, and the waiter got ErrClockPanic.
func TestStoreATimerStopThatPanicsFailsNoWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var panicStop atomic.Bool
		clk := stopPanicClock{clock.NewFake(time.Unix(1000, 0)), &panicStop}
		st := newMemStore(clk, FailClosed)
		r := routerOn(t, st, st, Config{Limit: 1, Window: time.Hour, Partitions: 1, Clock: clk})
		ctx := context.Background()
		require.True(t, r.Allow("k"))
		got := make(chan error, 1)
		go func() { _, err := r.WaitN(ctx, "k", 1); got <- err }()
		synctest.Wait() // denied: its line waits an hour, on the timer
		panicStop.Store(true)
		require.NoError(t, r.Refund(ctx, "k", 1)) // the head is asked again at once
		synctest.Wait()
		panicStop.Store(false)
		select {
		case err := <-got:
			assert.NoError(t, err, "the head's ask, out when Stop panicked, granted it")
		default:
			t.Fatal("the waiter was never answered")
		}
	})
}
