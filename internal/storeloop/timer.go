package storeloop

import (
	"math"
	"time"
)

// The lines' one timer: the Timeline's, set for the earliest line due.

// arm sets the timer for the earliest line due, at now on the timeline,
// or stops it if no line is due (every head out: its trip wakes the
// line). A clock whose timer panics as it is set fails the waiters, which
// nothing else would wake.
func (l *loop) arm(now time.Duration) {
	if len(l.lines.due) == 0 || l.lines.due[0].at == math.MaxInt64 {
		l.stopTimer() // nothing needs it: a panic there fails nobody
		return
	}
	at := l.lines.due[0].at
	if err := l.clockCall(func() error { return l.timeline.Arm(at, now) }); err != nil {
		l.closeLines(err)
	}
}

// stopTimer stops the timer, if it is set.
func (l *loop) stopTimer() { _ = l.clockCall(l.timeline.Disarm) } // a panic drops the timer, and is counted

// clockCall runs f, a call on the clock's timer, noting it for carryOn,
// and counts a panic.
func (l *loop) clockCall(f func() error) error {
	l.inflight.clock = true
	err := f()
	l.inflight.clock = false
	if err != nil {
		l.state.Counts.ClockPanics++
	}
	return err
}
