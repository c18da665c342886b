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
