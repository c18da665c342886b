package actor

import (
	"math"
	"time"

	"github.com/chanlimit/chanlimit/internal/errs"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// The one timer of a partition's lines, from its Clock, under supervision.

// arm sets the timer for the earliest line due, or stops it if there is
// none. The timer is the Clock's: its calls are supervised, and if one
// panics, every waiter is answered with its error, since nothing would
// wake them.
func (l *loop) arm(now time.Duration) {
	w := &l.waits
	if len(w.due) == 0 || w.due[0].at == math.MaxInt64 {
		l.stopTimer()
		return
	}
	at := w.due[0].at
	if w.fired != nil && w.setAt == at {
		return
	}
	err := l.timerCall(func() {
		if w.timer == nil {
			w.timer = l.state.clock.NewTimer(at - now)
		} else {
			w.timer.Reset(at - now)
		}
		w.fired, w.setAt = w.timer.C(), at
	})
	if err != nil {
		w.timer, w.fired = nil, nil
		l.closeLines(err)
	}
}

// stopTimer stops the timer, if it is set.
func (l *loop) stopTimer() {
	w := &l.waits
	if w.fired == nil {
		return
	}
	w.fired = nil
	if l.timerCall(func() { w.timer.Stop() }) != nil {
		w.timer = nil
	}
}

// timerCall runs f, which calls the Clock's timer, under supervision.
func (l *loop) timerCall(f func()) error {
	l.state.calling = callingClock
	err := supervise.Call(errs.ErrClockPanic, f)
	l.state.calling = callingNone
	if err != nil {
		l.state.Counts.ClockPanics++
	}
	return err
}
