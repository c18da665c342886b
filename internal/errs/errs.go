// Package errs defines the errors that more than one of chanlimit's
// packages return. Package chanlimit exports each one under its own name
// and documents it there; this package only gives each a single value.
package errs

import "errors"

var (
	ErrClosed           = errors.New("chanlimit: router closed")      // chanlimit.ErrClosed
	ErrAlgorithmPanic   = errors.New("chanlimit: algorithm panicked") // chanlimit.ErrAlgorithmPanic
	ErrClockPanic       = errors.New("chanlimit: clock panicked")     // chanlimit.ErrClockPanic
	ErrTooManyKeys      = errors.New("chanlimit: too many keys")      // chanlimit.ErrTooManyKeys
	ErrBadSnapshot      = errors.New("chanlimit: bad snapshot")       // chanlimit.ErrBadSnapshot
	ErrExceedsCapacity  = errors.New("chanlimit: n exceeds capacity") // chanlimit.ErrExceedsCapacity
	ErrTooManyWaiters   = errors.New("chanlimit: too many waiters")   // chanlimit.ErrTooManyWaiters
	ErrStoreUnavailable = errors.New("chanlimit: store unavailable")  // chanlimit.ErrStoreUnavailable
)
