package storeloop

import (
	"math"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// The lines' one timer, from the Clock, set for the earliest line due and
// read only while a line exists, as a partition in memory keeps its own.

// arm sets the timer for the earliest line due, at now on the timeline,
// or stops it if no line is due (every head out). A clock whose timer
// panics fails the waiters, which nothing else would wake.
func (l *loop) arm(now time.Duration) {
	ls := &l.lines
	if len(ls.due) == 0 || ls.due[0].at == math.MaxInt64 {
		l.stopTimer()
		return
	}
	at := ls.due[0].at
	if ls.fired != nil && ls.setAt == at {
		return
	}
	err := l.timerCall(func() {
		made := ls.timer == nil
		if made {
			ls.timer = ls.clock.NewTimer(at - now)
		}
		if t, ok := ls.timer.(clock.AtTimer); ok && l.instants {
			t.ResetAt(l.instant(at, now))
		} else if !made {
			ls.timer.Reset(at - now)
		}
		ls.fired, ls.setAt = ls.timer.C(), at
	})
	if err != nil {
		ls.timer, ls.fired = nil, nil
		l.closeLines(err)
	}
}

// instant returns the clock's time at at on the timeline, where now is:
// the reading now stands for, plus the wait, so that a timer set for it
// fires exactly when the clock reads it.
func (l *loop) instant(at, now time.Duration) time.Time {
	if !l.real {
		if r := l.lines.clock.Since(l.origin); r < l.reading {
			l.reading = r
		}
	}
	return l.origin.Add(l.reading).Add(at - now)
}

// stopTimer stops the timer, if it is set.
func (l *loop) stopTimer() {
	ls := &l.lines
	if ls.fired == nil {
		return
	}
	ls.fired = nil
	if l.timerCall(func() { ls.timer.Stop() }) != nil {
		ls.timer = nil
	}
}

// timerCall calls f, a call on the clock's timer, supervised.
func (l *loop) timerCall(f func()) error {
	l.inflight.clock = true
	err := supervise.Call(actor.ErrClockPanic, f)
	l.inflight.clock = false
	if err != nil {
		l.state.Counts.ClockPanics++
	}
	return err
}
