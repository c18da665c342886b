// Package supervise runs code that chanlimit calls but does not own: a
// rule's methods and constructor, a Clock. Every such call goes through
// Call, so a panic in it is met the same way wherever it happens.
package supervise

import "fmt"

// Call runs f and returns nil, or, if f panics, recovers and returns an
// error that wraps culprit and the panic's value: errors.Is(err, culprit)
// holds, and when the value is an error, errors.Is and errors.As find it
// too. The panic goes no further.
//
// What f was changing may be left half-changed. The caller decides what
// that costs: a partition drops the key whose state a rule was working
// on, and fails the request it was deciding; a router being set up
// refuses its Config.
func Call(culprit error, f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{culprit: culprit, value: v}
		}
	}()
	f()
	return nil
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
