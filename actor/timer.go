package actor

import (
	"math"
	"time"
)

// The one timer of a partition's lines: its Timeline's, set for the
// earliest line due.

// arm sets the timer for the earliest line due, or stops it if there is
// none; now is the partition's latest reading of the clock (state.Now).
// The timer is the Clock's: if setting it panics, every waiter is
// answered with its error, since nothing would wake them.
func (l *loop) arm(now time.Duration) {
	if len(l.waits.due) == 0 || l.waits.due[0].at == math.MaxInt64 {
		l.stopTimer() // nothing needs it: a panic there fails nobody
		return
	}
	at := l.waits.due[0].at
	if err := l.clockCall(func() error { return l.timeline.Arm(at, now) }); err != nil {
		l.closeLines(err)
	}
}

// stopTimer stops the timer, if it is set.
func (l *loop) stopTimer() { _ = l.clockCall(l.timeline.Disarm) } // a panic drops the timer, and is counted

// clockCall runs f, a call on the Clock that is not the burst's reading,
// noting it for carryOn, and counts a panic.
func (l *loop) clockCall(f func() error) error {
	l.state.calling = callingClock
	err := f()
	l.state.calling = callingNone
	if err != nil {
		l.state.Counts.ClockPanics++
	}
	return err
}
