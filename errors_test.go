package chanlimit_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/actor"
)

// A program that drives a partition of its own (package actor) and one
// that uses a Router match the same errors: the router returns actor's
// under the same names, one value each.
func TestTheRoutersErrorsAreActorsOwn(t *testing.T) {
	for name, pair := range map[string][2]error{
		"ErrClosed":          {chanlimit.ErrClosed, actor.ErrClosed},
		"ErrAlgorithmPanic":  {chanlimit.ErrAlgorithmPanic, actor.ErrAlgorithmPanic},
		"ErrClockPanic":      {chanlimit.ErrClockPanic, actor.ErrClockPanic},
		"ErrTooManyKeys":     {chanlimit.ErrTooManyKeys, actor.ErrTooManyKeys},
		"ErrExceedsCapacity": {chanlimit.ErrExceedsCapacity, actor.ErrExceedsCapacity},
		"ErrTooManyWaiters":  {chanlimit.ErrTooManyWaiters, actor.ErrTooManyWaiters},
	} {
		assert.Same(t, pair[1], pair[0], name)
	}
}
