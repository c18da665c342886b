// Package clock is where chanlimit reads the time. Code that needs the time
// takes a Clock instead of calling time.Now, so that tests can use a Fake
// and move time only when they choose to.
package clock

import "time"

// Clock tells the time and makes timers. Implementations are safe for
// simultaneous use by many goroutines.
type Clock interface {
	// Now returns the current time. The instants a Clock returns are meant
	// to be compared with Time.Sub, which uses the monotonic reading when
	// both instants carry one.
	Now() time.Time

	// Since returns the time elapsed since t, Now().Sub(t). The real clock
	// reads only its monotonic clock for it, which is cheaper than Now.
	Since(t time.Time) time.Duration

	// NewTimer returns a Timer that sends the time on its channel once d
	// has passed on this clock. A d <= 0 fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a single event on a Clock, like time.Timer. Stop and Reset leave
// no stale value in the channel: after either returns, a receive sees only a
// firing that happens later.
type Timer interface {
	// C returns the channel the firing time is delivered on. It has a
	// buffer of one, so the clock never blocks while firing.
	C() <-chan time.Time

	// Stop prevents the timer from firing. It reports whether the call
	// stopped a pending timer: one that had not fired, or whose firing had
	// not been received (as time.Timer since Go 1.23).
	Stop() bool

	// Reset stops the timer and starts it again to fire after d. It
	// reports whether the timer was pending before the call, as Stop does.
	Reset(d time.Duration) bool
}

// AtTimer is a Timer that can also be set for an instant of its clock
// rather than for a duration: the clock tells, as the timer is set,
// whether the instant has passed, and then it fires at once. The instant
// is read on the clock that made the timer. A Fake's timers are AtTimers,
// and so are the real clock's. A partition on a *Fake or on Real, whose
// timers read the very time it reads, sets its lines' timer so: a
// duration worked out from an earlier reading fires late by as much as
// the clock moved forward since, which is nothing to speak of on the real
// clock, but on a Fake a whole Advance made in between. On any other
// Clock (one that wraps a Fake, say, and may read another time than its
// timers do) it sets durations.
type AtTimer interface {
	Timer

	// ResetAt stops the timer and starts it again to fire once its clock
	// reads t or later. It reports whether the timer was pending before
	// the call, as Stop does.
	ResetAt(t time.Time) bool
}

// Real returns the system clock. Its readings carry Go's monotonic clock, so
// a step of the wall clock (NTP, a person setting the date) neither grants
// nor withholds quota: durations are measured on the monotonic clock.
func Real() Clock { return realClock{} }

type realClock struct{}

var _ Clock = realClock{}

// Now returns time.Now(), monotonic reading included.
func (realClock) Now() time.Time { return time.Now() }

// Since returns time.Since(t): for a t from Now, a reading of the monotonic
// clock alone.
func (realClock) Since(t time.Time) time.Duration { return time.Since(t) }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// realTimer adapts *time.Timer, whose channel is a field, to Timer. Since
// Go 1.23 a stopped or reset time.Timer delivers no stale value.
type realTimer struct{ t *time.Timer }

var _ AtTimer = realTimer{}

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// ResetAt resets the timer for the time until t: measured on the
// monotonic clock when t carries its reading (an instant worked out from
// Now does).
func (r realTimer) ResetAt(t time.Time) bool { return r.t.Reset(time.Until(t)) }
