// Package supervise runs code that chanlimit calls but does not own: a
// rule's methods and constructor, a Clock. Every such call goes through
// Call, so a panic in it is met the same way wherever it happens; and what
// such code hands back (a panic's value, an error) is read once, under
// supervision, never asked anything again.
package supervise

import "fmt"

// Call runs f and returns nil, or, if f panics, recovers and returns an
// error that wraps culprit and the panic's value: errors.Is(err, culprit)
// holds, and when the value is an error, errors.Is and errors.As find it
// too. The panic goes no further. A panic(nil) is one too, even where
// GODEBUG=panicnil=1 makes recover return nil for it. The error's message
// is the value's, read once, when Call returns.
//
// What f was changing may be left half-changed. The caller decides what
// that costs: a partition drops the key whose state a rule was working
// on, and fails the request it was deciding; a router being set up
// refuses its Config.
//
// If f calls runtime.Goexit, nothing stops it: the goroutine's deferred
// calls run, and it ends. Its caller must be ready for that (a partition
// carries on in a new goroutine).
func Call(culprit error, f func()) (err error) {
	returned := false
	defer func() {
		if !returned { // a panic, whatever recover says of its value
			v := recover()
			err = &panicError{culprit: culprit, value: v, text: culprit.Error() + ": " + describe(v)}
		}
	}()
	f()
	returned = true
	return nil
}

// Exited returns the error of a call into code chanlimit does not own
// that ran runtime.Goexit: Panicked reports true of it, as of a panic's.
func Exited(culprit error) error {
	return &panicError{culprit: culprit, text: culprit.Error() + ": runtime.Goexit"}
}

// Panicked reports whether err is an error that Call returned for a panic,
// or Exited for a Goexit.
// It looks at err itself, not at what err wraps: the panic's value is the
// panicking code's, and so are its methods (Is, Unwrap), which chanlimit
// never calls.
func Panicked(err error) bool {
	_, ok := err.(*panicError)
	return ok
}

// Wrap returns an error that wraps err, an error that code chanlimit does
// not own returned, with err's message read once, now, under supervision:
// chanlimit can then wrap and format it at no risk. It returns nil for nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return &foreignError{err: err, text: describe(err)}
}

// describe formats v as %v does, and if its methods panic or the
// formatting of their panic panics in turn, says so instead.
func describe(v any) (s string) {
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("a %T, whose Error or String method panicked", v)
		}
	}()
	return fmt.Sprint(v)
}

// panicError is a panic met by Call.
type panicError struct {
	culprit error
	value   any
	text    string
}

func (e *panicError) Error() string { return e.text }

func (e *panicError) Unwrap() []error {
	if v, ok := e.value.(error); ok {
		return []error{e.culprit, v}
	}
	return []error{e.culprit}
}

// foreignError is an error that code chanlimit does not own returned.
type foreignError struct {
	err  error
	text string
}

func (e *foreignError) Error() string { return e.text }

func (e *foreignError) Unwrap() error { return e.err }
