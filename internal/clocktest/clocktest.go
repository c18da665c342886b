// Package clocktest holds clocks that chanlimit's own tests use to check
// how the router meets a misbehaving clock.
package clocktest

import (
	"sync/atomic"
	"time"

	"github.com/chanlimit/chanlimit/clock"
)

// Flaky is a clock.Fake whose readings (Now, Since) panic, with the value
// "the clock is broken", while Panics is set.
type Flaky struct {
	*clock.Fake
	Panics atomic.Bool
}

var _ clock.Clock = (*Flaky)(nil)

// NewFlaky returns a Flaky clock that reads start until it is moved.
func NewFlaky(start time.Time) *Flaky { return &Flaky{Fake: clock.NewFake(start)} }

// Now returns the fake time, or panics while Panics is set.
func (c *Flaky) Now() time.Time {
	if c.Panics.Load() {
		panic("the clock is broken")
	}
	return c.Fake.Now()
}

// Since returns Now().Sub(t).
func (c *Flaky) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

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
