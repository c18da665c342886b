package algorithms_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	. "github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/model"
)

// What every built-in rule does, checked through the exported API as a
// router uses it. These tests share the harness of schedule_test.go
// (construct), so they are external tests too.

func TestBurstOnlyWhereTaken(t *testing.T) {
	p := Params{Limit: 3, Window: s, Burst: 5}
	_, err := NewTokenBucket(p)
	require.NoError(t, err, "token_bucket takes a burst")
	for _, name := range []string{model.SlidingWindowLog, model.FixedWindow, model.SlidingWindowCounter} {
		_, err := construct(name, p)
		require.ErrorIs(t, err, ErrInvalidParams, name)
		assert.Contains(t, err.Error(), "Burst")
		assert.Contains(t, err.Error(), name)
	}
}

// TestAllowNPanicsOnABadN: an n outside [1, Capacity()] is the caller's
// bug, never a silent answer: every rule panics, saying so, and leaves the
// state as it was.
func TestAllowNPanicsOnABadN(t *testing.T) {
	for _, name := range builtins {
		for _, n := range []int{0, -1, math.MinInt, 4, math.MaxInt} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				alg, err := construct(name, Params{Limit: 3, Window: s})
				require.NoError(t, err)
				_, err = alg.allowN(0, 1)
				require.NoError(t, err)
				before := alg.snapshot()
				for _, call := range []func(){
					func() { alg.machineAllowN(100*ms, n) },
					func() { alg.machinePeekN(100*ms, n) },
					func() { alg.refund(0, n) },
				} {
					assert.PanicsWithValue(t, fmt.Sprintf("algorithms: n = %d outside [1, Capacity() = 3]: the caller must check n", n), call)
					assert.Equal(t, before, alg.snapshot(), "the state is as it was")
				}
			})
		}
	}
}

// TestDeniedLeavesStateUntouched checks, on the state itself, that a denied
// request and any PeekN change nothing, for every algorithm.
func TestDeniedLeavesStateUntouched(t *testing.T) {
	for _, name := range builtins {
		t.Run(name, func(t *testing.T) {
			alg, err := construct(name, Params{Limit: 3, Window: s})
			require.NoError(t, err)
			for i := range 3 {
				d, err := alg.allowN(time.Duration(i)*100*ms, 1)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			// At 250ms the log and the windows are full and the buckets
			// hold 3/4 of a token.
			at := 250 * ms
			before := alg.snapshot()
			for _, n := range []int{2, 3} {
				d, _ := alg.allowN(at, n)
				require.False(t, d.Allowed, "n=%d", n)
				assert.Equal(t, before, alg.snapshot(), "AllowN(t+%v, %d) changed the state", at, n)
			}
			// PeekN changes nothing either, even when it says yes.
			for _, later := range []time.Duration{at, 1100 * ms, 10 * s} {
				_, _ = alg.peekN(later, 1)
				assert.Equal(t, before, alg.snapshot(), "PeekN(t+%v, 1) changed the state", later)
			}
		})
	}
}

// TestRefundUndoesTheGrant checks that AllowN followed by Refund decides
// every later request as if neither call had been made, also when the
// AllowN came with a now behind the state's latest instant.
func TestRefundUndoesTheGrant(t *testing.T) {
	type request struct {
		at time.Duration
		n  int
	}
	p := Params{Limit: 3, Window: s}
	history := []call{{dt: 0, n: 1}, {dt: 300 * ms, n: 1}}
	probes := []request{{at: 400 * ms, n: 1}, {at: 400 * ms, n: 1}, {at: 400 * ms, n: 1}, {at: 1100 * ms, n: 2}, {at: 1400 * ms, n: 3}}
	for _, name := range builtins {
		for _, refunded := range []request{{at: 300 * ms, n: 1}, {at: 350 * ms, n: 1}, {at: 100 * ms, n: 1}} {
			t.Run(fmt.Sprintf("%s/At%v", name, refunded.at), func(t *testing.T) {
				plain, _ := construct(name, p)
				withRefund, _ := construct(name, p)
				now := time.Duration(0)
				for _, c := range history {
					now += c.dt
					_, _ = plain.allowN(now, c.n)
					_, _ = withRefund.allowN(now, c.n)
				}
				d, err := withRefund.allowN(refunded.at, refunded.n)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				withRefund.refund(refunded.at, refunded.n)
				for i, p := range probes {
					want, _ := plain.allowN(p.at, p.n)
					got, _ := withRefund.allowN(p.at, p.n)
					assert.Equal(t, want, got, "probe %d: AllowN(t+%v, %d)", i, p.at, p.n)
				}
			})
		}
	}
}
