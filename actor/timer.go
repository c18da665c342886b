package actor

import (
	"math"
	"time"

	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// The one timer of a partition's lines, from its Clock, under supervision.

// arm sets the timer for the earliest line due, or stops it if there is
// none; now is the partition's latest reading of the clock (state.Now).
// The timer is the Clock's: its calls are supervised, and if one panics,
// every waiter is answered with its error, since nothing would wake them.
//
// On clock.Real and a *clock.Fake, whose timers read the very time the
// partition reads, the timer is set for the line's instant (AtTimer), so
// that it fires when the clock reaches it however far the clock moved
// forward since now was read: a test's Advance while the partition served
// its burst. Any other Clock's timer, for the duration from now, which
// holds whatever time its timers read (a Clock that tells another zone's
// time on a Fake's timers, say).
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
		made := w.timer == nil
		if made {
			w.timer = l.state.clock.NewTimer(at - now)
		}
		if t, ok := w.timer.(clock.AtTimer); ok && l.instants {
			t.ResetAt(l.instant(at, now))
		} else if !made {
			w.timer.Reset(at - now)
		}
		w.fired, w.setAt = w.timer.C(), at
	})
	if err != nil {
		w.timer, w.fired = nil, nil
		l.closeLines(err)
	}
}

// instant returns the clock's instant at which the partition's timeline,
// at now at the latest reading, reaches at. A Fake that has stepped back
// since that reading is read again, and the step counted as tick counts
// it, for nothing: the timeline goes on from the earlier reading, so the
// wait is counted from there and nobody waits out the step (the timer,
// and the tick of its wake, agree). The real clock never steps back.
func (l *loop) instant(at, now time.Duration) time.Time {
	if !l.real {
		if r := l.state.clock.Since(l.origin); r < l.reading {
			l.reading = r
		}
	}
	return l.origin.Add(l.reading).Add(at - now)
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
	err := supervise.Call(ErrClockPanic, f)
	l.state.calling = callingNone
	if err != nil {
		l.state.Counts.ClockPanics++
	}
	return err
}
