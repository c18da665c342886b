package algorithms

import "time"

// What the external tests (package algorithms_test) need of the internal
// ones. The external tests drive the rules beside their reference models,
// and internal/model imports this package, so they cannot be internal
// tests themselves.

// The errors Ask and Peek give for an n a router never passes to a Machine.
var (
	ErrInvalidCount    = errInvalidCount
	ErrExceedsCapacity = errExceedsCapacity
)

// Ask decides n on s at now as a router asks a Machine: see ask.
func Ask[S any](m Machine[S], s *S, now time.Duration, n int) (Decision, error) {
	return ask(m, s, now, n)
}

// Peek is Ask for PeekN.
func Peek[S any](m Machine[S], s *S, now time.Duration, n int) (Decision, error) {
	return peek(m, s, now, n)
}
