package clock_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// received returns what c holds right now, without waiting.
func received(c <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestFakeNowMovesOnlyWhenTold(t *testing.T) {
	f := clock.NewFake(epoch)
	assert.Equal(t, epoch, f.Now())
	assert.Equal(t, epoch, f.Now(), "reading the clock must not move it")

	f.Advance(1500 * time.Millisecond)
	assert.Equal(t, epoch.Add(1500*time.Millisecond), f.Now())

	f.Advance(0)
	assert.Equal(t, epoch.Add(1500*time.Millisecond), f.Now())
	assert.Equal(t, 1500*time.Millisecond, f.Since(epoch))
}

func TestFakeJumpBackwards(t *testing.T) {
	f := clock.NewFake(epoch)
	timer := f.NewTimer(time.Second)

	f.Advance(-time.Hour)
	assert.Equal(t, epoch.Add(-time.Hour), f.Now())
	_, fired := received(timer.C())
	assert.False(t, fired, "a backward step fires nothing")

	f.Set(epoch.Add(-2 * time.Hour))
	assert.Equal(t, epoch.Add(-2*time.Hour), f.Now())

	f.Set(epoch.Add(time.Second))
	got, fired := received(timer.C())
	require.True(t, fired, "the timer is due once the clock reaches its deadline again")
	assert.Equal(t, epoch.Add(time.Second), got)
}

func TestFakeTimersFireWithTheirDeadlines(t *testing.T) {
	f := clock.NewFake(epoch)
	var timers []clock.Timer
	for _, d := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second, time.Second} {
		timers = append(timers, f.NewTimer(d))
	}
	assert.Equal(t, 4, f.Waiters())

	// One Advance past every deadline fires them all, each with its own
	// deadline as the time sent, and leaves the clock at the target.
	f.Advance(10 * time.Second)
	var fires []time.Time
	for i, tm := range timers {
		got, ok := received(tm.C())
		require.True(t, ok, "timer %d did not fire", i)
		fires = append(fires, got)
	}
	assert.Equal(t, []time.Time{
		epoch.Add(3 * time.Second), epoch.Add(time.Second),
		epoch.Add(2 * time.Second), epoch.Add(time.Second),
	}, fires)
	assert.Equal(t, epoch.Add(10*time.Second), f.Now())
	assert.Equal(t, 0, f.Waiters())
}

func TestFakeAdvanceFiresOnlyWhatIsDue(t *testing.T) {
	f := clock.NewFake(epoch)
	late := f.NewTimer(2 * time.Second)
	early := f.NewTimer(time.Second)

	f.Advance(time.Second)
	_, lateFired := received(late.C())
	got, earlyFired := received(early.C())
	assert.False(t, lateFired, "a timer must not fire before its deadline")
	require.True(t, earlyFired)
	assert.Equal(t, epoch.Add(time.Second), got)

	f.Advance(time.Second - time.Nanosecond)
	_, lateFired = received(late.C())
	assert.False(t, lateFired, "1ns before its deadline the timer is still waiting")

	f.Advance(time.Nanosecond)
	got, lateFired = received(late.C())
	require.True(t, lateFired)
	assert.Equal(t, epoch.Add(2*time.Second), got)
}

func TestFakeTimerNonPositiveFiresAtOnce(t *testing.T) {
	f := clock.NewFake(epoch)
	for _, d := range []time.Duration{0, -time.Second} {
		tm := f.NewTimer(d)
		got, ok := received(tm.C())
		require.True(t, ok, "NewTimer(%v) must fire at once", d)
		assert.Equal(t, epoch, got)
		assert.False(t, tm.Stop(), "a fired and read timer is not pending")
	}
	assert.Equal(t, 0, f.Waiters())
}

// TestFakeStopMatchesRealTimer: Stop and Reset report the same as a
// time.Timer for a timer that fired and was not read. The real timer runs in
// a synctest bubble, whose clock is fake: its Sleep takes no wall time.
func TestFakeStopMatchesRealTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := clock.NewFake(epoch)
		fake := f.NewTimer(time.Second)
		real := time.NewTimer(time.Second)
		f.Advance(2 * time.Second)
		time.Sleep(2 * time.Second) // synctest time: the real timer fires, unread
		assert.Equal(t, real.Stop(), fake.Stop(), "Stop of a fired, unread timer")

		fake.Reset(time.Second)
		real.Reset(time.Second)
		f.Advance(2 * time.Second)
		time.Sleep(2 * time.Second) // synctest time again
		assert.Equal(t, real.Reset(time.Hour), fake.Reset(time.Hour), "Reset of a fired, unread timer")
		assert.Equal(t, real.Stop(), fake.Stop(), "Stop of a reset, waiting timer")
	})
}

func TestFakeFiringNeverBlocks(t *testing.T) {
	f := clock.NewFake(epoch)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second) // fills the buffer of one; nobody reads it
	tm.Reset(time.Second)  // Reset empties the channel ...
	_, stale := received(tm.C())
	assert.False(t, stale, "Reset must leave no stale value")

	// ... and a firing into a full channel is dropped, not blocked on.
	other := f.NewTimer(time.Second)
	f.Advance(time.Second)
	f.Advance(time.Second)
	_, ok := received(tm.C())
	assert.True(t, ok)
	_, ok = received(other.C())
	assert.True(t, ok)
}

func TestFakeStopAndReset(t *testing.T) {
	f := clock.NewFake(epoch)
	tm := f.NewTimer(time.Second)
	assert.Equal(t, 1, f.Waiters())

	assert.True(t, tm.Stop(), "Stop of a pending timer reports true")
	assert.False(t, tm.Stop(), "a second Stop reports false")
	assert.Equal(t, 0, f.Waiters())
	f.Advance(time.Hour)
	_, fired := received(tm.C())
	assert.False(t, fired, "a stopped timer never fires")

	assert.False(t, tm.Reset(time.Second), "Reset of a stopped timer reports false")
	assert.True(t, tm.Reset(2*time.Second), "Reset of a pending timer reports true")
	f.Advance(time.Second)
	_, fired = received(tm.C())
	assert.False(t, fired, "Reset replaced the earlier deadline")
	f.Advance(time.Second)
	got, fired := received(tm.C())
	require.True(t, fired)
	assert.Equal(t, epoch.Add(time.Hour+2*time.Second), got)

	tm.Reset(time.Second)
	f.Advance(time.Second)
	assert.True(t, tm.Stop(), "a firing nobody read still counts as pending, as with time.Timer")
	_, fired = received(tm.C())
	assert.False(t, fired, "Stop drains a firing nobody read")
	assert.False(t, tm.Stop(), "now it is neither waiting nor unread")
}

// TestFakeResetAt: a Fake's timer set for an instant fires once the
// clock reads it, with that instant, or at once with the clock's time if
// the clock has passed it; ResetAt reports what Reset does.
func TestFakeResetAt(t *testing.T) {
	f := clock.NewFake(epoch)
	tm := f.NewTimer(time.Hour).(clock.AtTimer)
	assert.True(t, tm.ResetAt(epoch.Add(2*time.Second)), "ResetAt of a pending timer reports true")
	assert.Equal(t, 1, f.Waiters(), "the deadline replaced, not added")
	f.Advance(2*time.Second - 1)
	_, fired := received(tm.C())
	assert.False(t, fired, "1ns before the instant")
	f.Advance(1)
	got, fired := received(tm.C())
	require.True(t, fired)
	assert.Equal(t, epoch.Add(2*time.Second), got)

	f.Advance(time.Minute)
	assert.False(t, tm.ResetAt(epoch.Add(time.Second)), "ResetAt of a fired and read timer reports false")
	got, fired = received(tm.C())
	require.True(t, fired, "an instant the clock has passed fires at once")
	assert.Equal(t, epoch.Add(time.Minute+2*time.Second), got, "with the clock's time")
	assert.False(t, tm.ResetAt(f.Now()), "an instant the clock reads: at once too")
	_, fired = received(tm.C())
	assert.True(t, fired)
	assert.Equal(t, 0, f.Waiters())
}

func TestFakeBlockUntilContext(t *testing.T) {
	f := clock.NewFake(epoch)
	got := make(chan time.Time)
	go func() {
		tm := f.NewTimer(time.Minute)
		got <- <-tm.C()
	}()

	require.NoError(t, f.BlockUntilContext(context.Background(), 1))
	f.Advance(time.Minute)
	assert.Equal(t, epoch.Add(time.Minute), <-got)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, f.BlockUntilContext(ctx, 1), context.Canceled,
		"no timer waits now, so only the context can end the wait")
}

func TestFakeConcurrentUse(t *testing.T) {
	f := clock.NewFake(epoch)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				tm := f.NewTimer(time.Millisecond)
				_ = f.Now()
				tm.Stop()
			}
		})
	}
	for range 100 {
		f.Advance(time.Millisecond)
	}
	wg.Wait()
	assert.Equal(t, epoch.Add(100*time.Millisecond), f.Now())
	assert.Equal(t, 0, f.Waiters())
}

func TestRealClock(t *testing.T) {
	c := clock.Real()
	a := c.Now()
	b := c.Now()
	assert.GreaterOrEqual(t, b.Sub(a), time.Duration(0), "the monotonic reading never goes back")
	assert.GreaterOrEqual(t, c.Since(a), b.Sub(a))

	tm := c.NewTimer(0)
	<-tm.C()
	tm = c.NewTimer(time.Hour)
	assert.True(t, tm.Stop())
	assert.False(t, tm.Reset(time.Hour))
	assert.True(t, tm.Stop())
}

// TestRealResetAt: the real clock's timer set for an instant fires when
// the monotonic clock reaches it, and at once for one passed. In a
// synctest bubble, whose clock moves only when every goroutine waits.
func TestRealResetAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := clock.Real()
		start := c.Now()
		tm := c.NewTimer(time.Hour).(clock.AtTimer)
		assert.True(t, tm.ResetAt(start.Add(2*time.Second)), "a pending timer")
		time.Sleep(2*time.Second - time.Nanosecond) // synctest time
		_, fired := received(tm.C())
		assert.False(t, fired, "1ns before the instant")
		time.Sleep(time.Nanosecond) // synctest time
		synctest.Wait()
		_, fired = received(tm.C())
		assert.True(t, fired)
		tm.ResetAt(start)
		synctest.Wait()
		_, fired = received(tm.C())
		assert.True(t, fired, "an instant passed fires at once")
	})
}
