package actor

import (
	"math"
	"time"

	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// Timeline is a partition's time, from its Clock: the time since Start,
// read once per burst (Tick), and the one timer that wakes the partition
// for its earliest line (Arm). Its calls on the Clock are supervised: a
// panic comes back as an error wrapping ErrClockPanic. A loop of another
// package keeps its time with one too (server.go).
type Timeline struct {
	clock    clock.Clock
	origin   time.Time     // the clock's reading at Start
	reading  time.Duration // the clock's latest reading, as time since origin
	now      time.Duration // the timeline
	real     bool          // the clock is clock.Real, which is not supervised (Tick)
	instants bool          // the clock is clock.Real or a *clock.Fake, whose timers read the time it reads (Arm)

	timer clock.Timer
	fired <-chan time.Time // the timer's channel while it is set, else nil
	setAt time.Duration    // the instant the timer is set for
}

// NewTimeline returns the timeline of a partition that reads the time
// from clk, taking origin (a reading of clk) as its start.
func NewTimeline(clk clock.Clock, origin time.Time) Timeline {
	_, fake := clk.(*clock.Fake)
	real := clk == clock.Real()
	return Timeline{clock: clk, origin: origin, real: real, instants: real || fake}
}

// Tick reads the clock and returns the timeline: the time since Start,
// counting only forward steps of the clock. A clock that steps back adds
// nothing, and time counts on from its new reading, so a backward step
// neither grants quota nor locks anyone out. The timeline stops at the
// largest Duration, about 292 years after Start. If the clock panics,
// Tick returns its error, and the timeline stays where it was.
//
// The clock is read only when a request arrives. clock.Real is monotonic,
// so this changes nothing for it; for a clock that steps back and then
// forward again (a Fake, a custom Clock), what the forward step counts
// depends on whether a request read the clock in between: if one did, the
// whole forward step counts as time passing.
func (t *Timeline) Tick() (time.Duration, error) {
	var reading time.Duration
	if t.real {
		// The package's own clock: it cannot panic, so it is read without
		// supervision, which costs more than the reading on every burst.
		reading = t.clock.Since(t.origin)
	} else if err := supervise.Call(ErrClockPanic, func() { reading = t.clock.Since(t.origin) }); err != nil {
		return t.now, err
	}
	if reading < t.reading {
		t.setAt = math.MinInt64 // the timer is on the clock's time: set it again (Arm)
	}
	if reading > t.reading {
		d := reading - t.reading // below 0 if the step passed the largest Duration
		if d < 0 || d > math.MaxInt64-t.now {
			t.now = math.MaxInt64
		} else {
			t.now += d
		}
	}
	t.reading = reading
	return t.now, nil
}

// Now returns the timeline at the latest Tick that worked.
func (t *Timeline) Now() time.Duration { return t.now }

// Wall returns the time of day Now stands for, as the clock counted it:
// its reading at Start plus the time it has counted since (State.Wall).
func (t *Timeline) Wall() time.Time { return t.origin.Add(t.reading) }

// Arm sets the timer for at on the timeline, where now is the latest
// Tick's, or stops it if at is the largest Duration (nothing due). If a
// call on the Clock's timer panics, it returns the error, and the timer is
// dropped: the caller answers its waiters, since nothing would wake them.
//
// On clock.Real and a *clock.Fake, whose timers read the very time the
// partition reads, the timer is set for at's instant (AtTimer), so that it
// fires when the clock reaches it however far the clock moved forward
// since now was read: a test's Advance while the partition served its
// burst. Any other Clock's timer, for the duration from now, which holds
// whatever time its timers read (a Clock that tells another zone's time on
// a Fake's timers, say).
func (t *Timeline) Arm(at, now time.Duration) error {
	if at == math.MaxInt64 {
		return t.Disarm()
	}
	if t.fired != nil && t.setAt == at {
		return nil
	}
	err := supervise.Call(ErrClockPanic, func() {
		made := t.timer == nil
		if made {
			t.timer = t.clock.NewTimer(at - now)
		}
		if a, ok := t.timer.(clock.AtTimer); ok && t.instants {
			a.ResetAt(t.instant(at, now))
		} else if !made {
			t.timer.Reset(at - now)
		}
		t.fired, t.setAt = t.timer.C(), at
	})
	if err != nil {
		t.timer, t.fired = nil, nil
	}
	return err
}

// instant returns the clock's time at at on the timeline, where now is.
// A clock that stepped back since its latest reading (a Fake) is read
// again, and the step counted as Tick counts it, for nothing: the
// timeline goes on from the earlier reading, so the wait is counted from
// there and nobody waits out the step (the timer, and the Tick of its
// wake, agree). The real clock never steps back.
func (t *Timeline) instant(at, now time.Duration) time.Time {
	if !t.real {
		if r := t.clock.Since(t.origin); r < t.reading {
			t.reading = r
		}
	}
	return t.origin.Add(t.reading).Add(at - now)
}

// Disarm stops the timer, if it is set. A call that panics returns the
// error, and the timer is dropped.
func (t *Timeline) Disarm() error {
	if t.fired == nil {
		return nil
	}
	t.fired = nil
	err := supervise.Call(ErrClockPanic, func() { t.timer.Stop() })
	if err != nil {
		t.timer = nil
	}
	return err
}

// Fired returns the timer's channel while it is set, or nil: a loop
// selects on it beside its mailbox, and calls Spent once it has fired.
func (t *Timeline) Fired() <-chan time.Time { return t.fired }

// Spent notes that the timer fired: it is set no more.
func (t *Timeline) Spent() { t.fired = nil }
