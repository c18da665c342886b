package actor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// TestTurn: a waiter is granted by an allowance with no Delay; one with a
// Delay is given back and asked again after it; a denial is asked again
// after its RetryAfter, or, a store's turn that must wait (not allowed,
// no RetryAfter, a Delay), after its Delay, with nothing to give back.
func TestTurn(t *testing.T) {
	for _, tc := range []struct {
		name              string
		d                 algorithms.Decision
		granted, giveBack bool
		wait              time.Duration
	}{
		{"allowed", algorithms.Decision{Allowed: true, ResetAfter: time.Second}, true, false, 0},
		{"allowed, its turn to come", algorithms.Decision{Allowed: true, Delay: 300 * time.Millisecond}, false, true, 300 * time.Millisecond},
		{"denied", algorithms.Decision{RetryAfter: 2 * time.Second, Delay: time.Hour}, false, false, 2 * time.Second},
		{"denied, nothing to wait for", algorithms.Decision{}, false, false, 0},
		{"a store's turn to come, nothing taken", algorithms.Decision{Delay: 300 * time.Millisecond}, false, false, 300 * time.Millisecond},
	} {
		granted, giveBack, wait := actor.Turn(&tc.d)
		assert.Equal(t, tc.granted, granted, tc.name)
		assert.Equal(t, tc.giveBack, giveBack, tc.name)
		assert.Equal(t, tc.wait, wait, tc.name)
	}
}
