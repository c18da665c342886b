package actor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/clocktest"
)

// The lines' timer, armed on a parked partition (see
// partition_internal_test.go) after its clock moved on from the reading
// that decided the line: a goroutine slow to arm it on the real clock, or
// an Advance of a Fake made between the two by a test that waited for
// another partition's timer, or a clock stepped back meanwhile.

// mover is a clock a test moves: a Fake, or a Clock that wraps one.
type mover interface {
	clock.Clock
	Advance(time.Duration)
}

// armedLate serves a WaitN on a spent window at 0, runs between (which
// moves the clock), and only then arms the timer, as the loop does after
// the burst the WaitN came in. It returns the wait's reply channel and
// the instant of the partition's timeline the line is due at.
func armedLate(t *testing.T, p *Partition, between func(at time.Duration)) (chan reply, time.Duration) {
	t.Helper()
	l := p.loop
	allow(t, l.state.Table, "k", 0, 2) // the window is spent: the wait is due when it ends
	ch := make(chan reply, 1)
	l.serve(&Message{kind: KindWait, key: "k", n: 1, reply: ch}, 0, nil)
	require.Len(t, l.waits.due, 1)
	at := l.waits.due[0].at
	between(at)
	l.arm(l.state.Now) // the reading that decided the line: 0
	return ch, at
}

// granted moves clk by d, serves the timer if it fired, as run does
// (wake), and reports whether the wait has its grant.
func granted(t *testing.T, p *Partition, clk mover, d time.Duration, ch chan reply) bool {
	t.Helper()
	clk.Advance(d)
	select {
	case <-p.loop.timeline.Fired():
		p.loop.timeline.Spent() // as receive does
		p.loop.wake()
	default:
	}
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		require.True(t, r.d.Allowed)
		return true
	default:
		return false
	}
}

// TestTimerArmedLateGrantsOnTime: on a Fake, the wait is granted exactly
// when the clock reaches the line's instant, however far an Advance made
// before the timer was armed had moved it; after a step back made
// meanwhile, exactly the wait after the earlier time, which the timeline
// goes on from.
func TestTimerArmedLateGrantsOnTime(t *testing.T) {
	for _, tt := range []struct {
		name    string
		between func(clk *clock.Fake, at time.Duration)
		wait    func(at time.Duration) time.Duration // from the arming to the grant
	}{
		{"an Advance past the instant", func(clk *clock.Fake, at time.Duration) { clk.Advance(at + time.Hour) }, func(time.Duration) time.Duration { return 0 }},
		{"an Advance to the instant", func(clk *clock.Fake, at time.Duration) { clk.Advance(at) }, func(time.Duration) time.Duration { return 0 }},
		{"an Advance short of it", func(clk *clock.Fake, at time.Duration) { clk.Advance(at / 4) }, func(at time.Duration) time.Duration { return at - at/4 }},
		{"a step back longer than the wait", func(clk *clock.Fake, _ time.Duration) { clk.Advance(-2 * time.Hour) }, func(at time.Duration) time.Duration { return at }},
		{"a step back shorter than the wait", func(clk *clock.Fake, at time.Duration) { clk.Advance(-at / 2) }, func(at time.Duration) time.Duration { return at }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := parked(t)
			clk := p.loop.state.clock.(*clock.Fake)
			ch, at := armedLate(t, p, func(at time.Duration) { tt.between(clk, at) })
			wait := tt.wait(at)
			if wait > 0 {
				require.False(t, granted(t, p, clk, wait-1, ch), "1ns before the wait is over")
			}
			require.True(t, granted(t, p, clk, min(wait, 1), ch), "the wait is over: %v after the arming", wait)
		})
	}
}

// skewed reads its Fake an offset ahead (a Clock that tells a server's or
// another zone's time) and makes the Fake's timers.
type skewed struct {
	*clock.Fake
	off time.Duration
}

func (c skewed) Now() time.Time                  { return c.Fake.Now().Add(c.off) }
func (c skewed) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// TestTimerOnAClockOfDurations: a Clock whose readings are not its
// timers' time, or whose timers are not AtTimers (clocktest.Late), is
// given a duration from the partition's reading, which holds whatever
// time its timers read: the wait is granted as it ends.
func TestTimerOnAClockOfDurations(t *testing.T) {
	for name, clk := range map[string]mover{
		"skewed an hour": skewed{clock.NewFake(time.Unix(0, 0)), time.Hour},
		"late timers":    &clocktest.Late{Fake: clock.NewFake(time.Unix(0, 0))},
	} {
		t.Run(name, func(t *testing.T) {
			p := newPartition(fixedWindows(t), clk, clk.Now(), 1)
			ch, at := armedLate(t, p, func(time.Duration) {})
			require.False(t, granted(t, p, clk, at-1, ch))
			require.True(t, granted(t, p, clk, 1, ch))
		})
	}
}
