// Package clocktest holds clocks that chanlimit's own tests use to check
// how the router meets a misbehaving clock.
package clocktest

import (
	"sync/atomic"
	"time"

	"github.com/chanlimit/chanlimit/clock"
)

// Late is a clock.Fake whose timers fire Lag after they are due, as real
// timers fire a little late: a request that reads the clock between the
// two comes before the partition has heard that its timer is due.
type Late struct {
	*clock.Fake
	Lag time.Duration
}

var _ clock.Clock = (*Late)(nil)

// NewLate returns a Late clock that reads start until it is moved.
func NewLate(start time.Time, lag time.Duration) *Late {
	return &Late{Fake: clock.NewFake(start), Lag: lag}
}

// NewTimer returns a timer that fires once the clock has advanced by d
// plus Lag.
func (c *Late) NewTimer(d time.Duration) clock.Timer {
	return lateTimer{c.Fake.NewTimer(d + c.Lag), c.Lag}
}

// lateTimer is a timer of a Late clock: Reset fires late too.
type lateTimer struct {
	clock.Timer
	lag time.Duration
}

func (t lateTimer) Reset(d time.Duration) bool { return t.Timer.Reset(d + t.lag) }

// Rigged is a clock.Fake whose every reading (Now, Since) first runs the
// function Rig set, if any: a test makes a reading panic (with any value,
// nil included), run runtime.Goexit, or move the clock while it is read.
type Rigged struct {
	*clock.Fake
	rig atomic.Pointer[func()]
}

var _ clock.Clock = (*Rigged)(nil)

// NewRigged returns a Rigged clock that reads start until it is moved,
// with nothing rigged.
func NewRigged(start time.Time) *Rigged { return &Rigged{Fake: clock.NewFake(start)} }

// Rig makes f run at every reading from now on; nil, at none. f may call
// Rig and move the clock.
func (c *Rigged) Rig(f func()) {
	if f == nil {
		c.rig.Store(nil)
		return
	}
	c.rig.Store(&f)
}

// Now runs what is rigged, then returns the fake time.
func (c *Rigged) Now() time.Time {
	if f := c.rig.Load(); f != nil {
		(*f)()
	}
	return c.Fake.Now()
}

// Since returns Now().Sub(t).
func (c *Rigged) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
