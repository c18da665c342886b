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
// another partition's timer.

// armedLate serves a WaitN on a spent window at 0, moves the clock by
// ahead, and only then arms the timer, as the loop does after the burst
// the WaitN came in; it returns the instant the line is due at.
func armedLate(t *testing.T, p *Partition, table Table, ahead func(at time.Duration)) time.Duration {
	t.Helper()
	l := p.loop
	allow(t, table, "k", 0, 2) // the window is spent: the wait is due when it ends
	l.serve(&request{op: opWait, key: "k", n: 1, budget: -1, reply: make(chan reply, 1)}, 0, nil)
	require.Len(t, l.waits.due, 1)
	at := l.waits.due[0].at
	ahead(at)
	l.arm(l.state.Now) // the reading that decided the line: 0
	return at
}

// TestTimerArmedLateFiresAtTheLinesInstant: on a Fake, a timer armed
// after an Advance that passed the line's instant fires at once, and one
// armed after an Advance short of it fires when the clock reaches the
// instant, not that much later.
func TestTimerArmedLateFiresAtTheLinesInstant(t *testing.T) {
	t.Run("passed", func(t *testing.T) {
		p, table := parked(t)
		clk := p.loop.state.clock.(*clock.Fake)
		at := armedLate(t, p, table, func(at time.Duration) { clk.Advance(at) })
		select {
		case <-p.loop.waits.fired:
		default:
			t.Fatalf("the clock reads the line's instant (%v) and the timer armed after it has not fired", at)
		}
	})
	t.Run("short", func(t *testing.T) {
		p, table := parked(t)
		clk := p.loop.state.clock.(*clock.Fake)
		at := armedLate(t, p, table, func(at time.Duration) { clk.Advance(at / 2) })
		clk.Advance(at/2 - 1)
		require.Empty(t, p.loop.waits.fired, "1ns before the line's instant")
		clk.Advance(1)
		select {
		case <-p.loop.waits.fired:
		default:
			t.Fatalf("the clock reads the line's instant (%v) and the timer has not fired", at)
		}
	})
}

// TestTimerArmedAfterAStepBack: a Fake stepped back between the reading
// and the arming: the wait starts over from the earlier time, as the
// timeline counts nothing for the step (tick), and nobody waits the step
// out.
func TestTimerArmedAfterAStepBack(t *testing.T) {
	p, table := parked(t)
	clk := p.loop.state.clock.(*clock.Fake)
	at := armedLate(t, p, table, func(time.Duration) { clk.Advance(-2 * time.Hour) })
	clk.Advance(at - 1)
	require.Empty(t, p.loop.waits.fired, "1ns before the wait is over, from the earlier time")
	clk.Advance(1)
	require.Len(t, p.loop.waits.fired, 1, "the wait is over, from the earlier time: not after 2h more")
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
// time its timers read: its timer fires as the wait ends.
func TestTimerOnAClockOfDurations(t *testing.T) {
	for name, clk := range map[string]interface {
		clock.Clock
		Advance(time.Duration)
	}{
		"skewed an hour": skewed{clock.NewFake(time.Unix(0, 0)), time.Hour},
		"late timers":    &clocktest.Late{Fake: clock.NewFake(time.Unix(0, 0))},
	} {
		t.Run(name, func(t *testing.T) {
			p := newPartition(fixedWindows(t), clk, clk.Now(), 1)
			at := armedLate(t, p, p.loop.state.Table, func(time.Duration) {})
			clk.Advance(at - 1)
			require.Empty(t, p.loop.waits.fired)
			clk.Advance(1)
			require.Len(t, p.loop.waits.fired, 1)
		})
	}
}
