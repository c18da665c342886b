// Package supervise runs code that chanlimit calls but does not own: a
// rule's methods and constructor, a Clock. Every such call goes through
// Call, so a panic in it is met the same way wherever it happens.
package supervise

import "fmt"

// Call runs f and returns nil, or, if f panics, recovers and returns an
// error that wraps culprit and the panic's value: errors.Is(err, culprit)
// holds, and when the value is an error, errors.Is and errors.As find it
// too. The panic goes no further. A panic(nil) is one too, even where
// GODEBUG=panicnil=1 makes recover return nil for it.
//
// What f was changing may be left half-changed. The caller decides what
// that costs: a partition drops the key whose state a rule was working
// on, and fails the request it was deciding; a router being set up
// refuses its Config.
//
// If f calls runtime.Goexit, nothing stops it: Call returns no error, the
// goroutine's deferred calls run, and it ends. Its caller must be ready for
// that (a partition answers the request in flight and goes on in a new
// goroutine).
func Call(culprit error, f func()) (err error) {
	returned := false
	defer func() {
		if !returned { // a panic, whatever recover says of its value
			err = &panicError{culprit: culprit, value: recover()}
		}
	}()
	f()
	returned = true
	return nil
}

// Panicked reports whether err is an error that Call returned for a panic.
// It looks at err itself, not at what err wraps: the panic's value is the
// panicking code's, and so are its methods (Is, Unwrap), which chanlimit
// never calls.
func Panicked(err error) bool {
	_, ok := err.(*panicError)
	return ok
}

// panicError is a panic met by Call.
type panicError struct {
	culprit error
	value   any
}

func (e *panicError) Error() string { return fmt.Sprintf("%v: %v", e.culprit, e.value) }

func (e *panicError) Unwrap() []error {
	if v, ok := e.value.(error); ok {
		return []error{e.culprit, v}
	}
	return []error{e.culprit}
}
