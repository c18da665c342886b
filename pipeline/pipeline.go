// Package pipeline holds channel stages that rate-limit the items flowing
// through a pipeline, per key, with a chanlimit Router:
//
//   - Throttle is a shaper: it passes each item on once its key's quota
//     admits it, waiting for it (Router.WaitN), as a worker that must not
//     drop work does.
//   - Police is a policer: it decides each item at once, many in one
//     Router.AllowBatch, and passes it on with its decision, allowed or
//     not, as a worker that sheds what is over the limit does.
//
// Both stages keep the promises of the Go blog's pipelines: every item read
// from in comes out exactly once, as a Result, with its Decision or the
// error that kept it out; the output is closed once in is closed and every
// item has come out, or once ctx has ended and the items the stage still
// held have come out with ctx's error; no goroutine of the stage outlives
// the output's close. The reader must read the output until it is closed:
// a stage waits for room there, as any stage does.
//
// The key and Weight functions run on the stage's goroutine. One that
// panics on an item fails that item alone (its Result's Err wraps
// ErrPanic). One must not call runtime.Goexit (t.FailNow in a test does):
// nothing can stop it from ending the stage's goroutine, and then the
// items the stage holds are lost and its output may never close.
package pipeline

import (
	"errors"
	"fmt"

	"github.com/chanlimit/chanlimit"
)

// ErrPanic is wrapped in the Err of a Result whose item made the stage's
// key or Weight function panic: that item fails alone, with the panic's
// value in the error's text (and, when it is an error, in its chain), and
// the stage goes on with the others.
var ErrPanic = errors.New("pipeline: panic")

// Result is one item that went through a stage, with its decision or the
// error that kept it out. Every item read from in comes out as exactly one
// Result.
type Result[T any] struct {
	Item     T
	Decision chanlimit.Decision
	Err      error
}

// Options tune a stage. The zero Options are fine.
type Options[T any] struct {
	Weight     func(T) int // units an item takes; nil means 1
	MaxPending int         // Throttle: items held waiting at once; 0 means DefaultMaxPending
	MaxBatch   int         // Police: items decided in one AllowBatch; 0 means DefaultMaxBatch
}

// Defaults of Options.
const (
	DefaultMaxPending = 1024
	DefaultMaxBatch   = 64
)

// The errors of the items whose key or Weight function panicked: each
// wraps ErrPanic, and says which function it was.
var (
	errKeyPanicked    = fmt.Errorf("%w in key", ErrPanic)
	errWeightPanicked = fmt.Errorf("%w in Weight", ErrPanic)
)

// weigh returns the units item takes (1 with no Weight), and the error
// of a weight below 1, as the Router's for such an n. Weight runs
// unguarded: its caller's sweep catches a panic.
func (o *Options[T]) weigh(item T) (n int, err error) {
	if o.Weight == nil {
		return 1, nil
	}
	if n = o.Weight(item); n < 1 {
		return n, fmt.Errorf("pipeline: Weight: %w (got %d)", chanlimit.ErrInvalidCount, n)
	}
	return n, nil
}

// A sweeper calls the caller's functions (key, Weight) on a run of items,
// one item a step, for sweep.
type sweeper interface {
	// step calls the functions on item i, noting which one runs, for
	// panicked.
	step(i int)
	// panicked fails item i alone: the function running on it panicked,
	// with v.
	panicked(i int, v any)
}

// sweep calls s.step(i) for each i in [0, n), in order. A step that
// panics fails its item alone (s.panicked) and the sweep goes on after
// it: the panic goes no further. One deferred recover guards the whole
// run, not one per call, since the stages call the functions on every
// item (a guard a call cost Police a tenth of its time). A function that
// runs runtime.Goexit ends the stage's goroutine: nothing can stop it.
func sweep(s sweeper, n int) {
	for i := 0; i < n; {
		i = sweepFrom(s, i, n)
	}
}

// sweepFrom is sweep from item i to the end, or to an item that
// panicked, and returns the index after the last item it stepped on.
func sweepFrom(s sweeper, i, n int) (next int) {
	finished := false
	defer func() {
		if !finished { // whatever recover says of the value: panic(nil) is a panic too
			s.panicked(next, recover())
			next++
		}
	}()
	for next = i; next < n; next++ {
		s.step(next)
	}
	finished = true
	return next
}

// panicError returns the error of a panic whose value is v, its text
// read once, here. A value whose Error or String method panics in turn is
// told by its type.
func panicError(culprit error, v any) (err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("%w: a %T, whose Error or String method panicked", culprit, v)
		}
	}()
	if e, ok := v.(error); ok {
		return fmt.Errorf("%w: %w", culprit, e)
	}
	return fmt.Errorf("%w: %v", culprit, v)
}

// maxOut is the most room a stage's output has: a batch goes out without a
// hand-off per item, and no buffer is sized from an option before items
// arrive.
const maxOut = 64
