package algorithms

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	ns = time.Nanosecond
	ms = time.Millisecond
	s  = time.Second
)

// The names chanlimit registers the built-in rules under.
const (
	tokenBucket          = "token_bucket"
	gcra                 = "gcra"
	leakyBucket          = "leaky_bucket"
	slidingWindowLog     = "sliding_window_log"
	fixedWindow          = "fixed_window"
	slidingWindowCounter = "sliding_window_counter"
)

// The errors a router gives for an n it never passes to a Machine.
var (
	errInvalidCount    = errors.New("n < 1")
	errExceedsCapacity = errors.New("n > Capacity()")
)

// checkCount returns the error a router gives for n, if any.
func checkCount(n, capacity int) error {
	switch {
	case n < 1:
		return errInvalidCount
	case n > capacity:
		return errExceedsCapacity
	}
	return nil
}

// ask decides n on s at now as a router asks a Machine: it checks n, and
// only then has AllowN write the answer.
func ask[S any](m Machine[S], s *S, now time.Duration, n int) (Decision, error) {
	if err := checkCount(n, m.Capacity()); err != nil {
		return Decision{}, err
	}
	var d Decision
	m.AllowN(s, now, n, &d)
	return d, nil
}

// peek is ask for PeekN.
func peek[S any](m Machine[S], s *S, now time.Duration, n int) (Decision, error) {
	if err := checkCount(n, m.Capacity()); err != nil {
		return Decision{}, err
	}
	var d Decision
	m.PeekN(s, now, n, &d)
	return d, nil
}

// step is one call in a step table: AllowN(at, n) must return want, or an
// error that is err.
type step struct {
	at   time.Duration
	n    int
	want Decision
	err  error
}

// run plays steps against a fresh state of m. After each step it also checks
// that the decision's RetryAfter and ResetAfter are exact, by replaying the
// steps so far onto fresh states and probing one nanosecond either side.
func run[S any](t *testing.T, m Machine[S], steps []step) {
	t.Helper()
	var st S
	for i, c := range steps {
		peeked, peekErr := peek(m, &st, c.at, c.n)
		got, err := ask(m, &st, c.at, c.n)
		if peeked != got || (peekErr == nil) != (err == nil) {
			t.Errorf("step %d: PeekN(t+%v, %d) = %+v, %v but AllowN = %+v, %v", i, c.at, c.n, peeked, peekErr, got, err)
		}
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("step %d: AllowN(t+%v, %d) error = %v, want %v", i, c.at, c.n, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: AllowN(t+%v, %d) error = %v", i, c.at, c.n, err)
		}
		if got != c.want {
			t.Errorf("step %d: AllowN(t+%v, %d) = %+v, want %+v", i, c.at, c.n, got, c.want)
			continue
		}
		checkExact(t, m, steps[:i+1])
	}
}

// replay plays steps onto a fresh state and returns it.
func replay[S any](m Machine[S], steps []step) *S {
	var st S
	for _, c := range steps {
		_, _ = ask(m, &st, c.at, c.n)
	}
	return &st
}

// allowedAt reports whether AllowN(at, n) allows after history.
func allowedAt[S any](t *testing.T, m Machine[S], history []step, at time.Duration, n int) bool {
	t.Helper()
	d, err := ask(m, replay(m, history), at, n)
	require.NoError(t, err)
	return d.Allowed
}

// checkExact checks the last step of history: a denied request is allowed at
// now + RetryAfter and not a nanosecond before; the key is untouched at
// now + ResetAfter (it decides like a key never seen) and not a nanosecond
// before.
func checkExact[S any](t *testing.T, m Machine[S], history []step) {
	t.Helper()
	last := history[len(history)-1]
	before := history[:len(history)-1]
	if d := last.want; !d.Allowed {
		if d.RetryAfter <= 0 {
			t.Errorf("AllowN(t+%v, %d) denied with RetryAfter %v, want > 0", last.at, last.n, d.RetryAfter)
		}
		if allowedAt(t, m, before, last.at+d.RetryAfter-ns, last.n) {
			t.Errorf("AllowN(t+%v, %d): allowed 1ns before RetryAfter %v", last.at, last.n, d.RetryAfter)
		}
		if !allowedAt(t, m, before, last.at+d.RetryAfter, last.n) {
			t.Errorf("AllowN(t+%v, %d): not allowed at RetryAfter %v", last.at, last.n, d.RetryAfter)
		}
	}
	reset := last.want.ResetAfter
	if !untouchedAt(m, history, last.at+reset) {
		t.Errorf("after AllowN(t+%v, %d): not untouched at ResetAfter %v", last.at, last.n, reset)
	}
	if reset > 0 && untouchedAt(m, history, last.at+reset-ns) {
		t.Errorf("after AllowN(t+%v, %d): untouched 1ns before ResetAfter %v", last.at, last.n, reset)
	}
}

// untouchedAt reports whether the key, after history, decides a few probing
// requests from at on exactly as a key never seen would: the whole capacity
// at at, then single units half a window apart.
func untouchedAt[S any](m Machine[S], history []step, at time.Duration) bool {
	w := time.Second
	switch r := any(m).(type) {
	case *SlidingWindowCounter:
		w = r.window
	case *SlidingWindowLog:
		w = r.window
	case *FixedWindow:
		w = r.window
	}
	seen, fresh := replay(m, history), new(S)
	for i, n := range []int{m.Capacity(), 1, 1, 1} {
		offset := time.Duration(i) * (w / 2)
		if at > math.MaxInt64-offset {
			break // past the end of the timeline
		}
		a, _ := ask(m, seen, at+offset, n)
		b, _ := ask(m, fresh, at+offset, n)
		if a != b {
			return false
		}
	}
	return true
}

func TestParamsValidation(t *testing.T) {
	tests := []struct {
		name  string
		give  Params
		field string
	}{
		{"ZeroLimit", Params{Limit: 0, Window: s}, "Limit"},
		{"NegativeLimit", Params{Limit: -1, Window: s}, "Limit"},
		{"ZeroWindow", Params{Limit: 1, Window: 0}, "Window"},
		{"NegativeWindow", Params{Limit: 1, Window: -s}, "Window"},
		{"NegativeBurst", Params{Limit: 1, Window: s, Burst: -1}, "Burst"},
	}
	constructors := map[string]func(Params) error{
		tokenBucket:      func(p Params) error { _, err := NewTokenBucket(p); return err },
		slidingWindowLog: func(p Params) error { _, err := NewSlidingWindowLog(p); return err },
		fixedWindow:      func(p Params) error { _, err := NewFixedWindow(p); return err },
	}
	for _, tt := range tests {
		for name, construct := range constructors {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				err := construct(tt.give)
				require.ErrorIs(t, err, ErrInvalidParams)
				assert.Contains(t, err.Error(), tt.field)
			})
		}
	}
}

func TestBurstOnlyWhereTaken(t *testing.T) {
	p := Params{Limit: 3, Window: s, Burst: 5}
	_, err := NewTokenBucket(p)
	require.NoError(t, err, "token_bucket takes a burst")
	for _, name := range []string{slidingWindowLog, fixedWindow, slidingWindowCounter} {
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
	p := Params{Limit: 3, Window: s}
	history := []call{{0, 1}, {300 * ms, 1}}
	probes := []step{{at: 400 * ms, n: 1}, {at: 400 * ms, n: 1}, {at: 400 * ms, n: 1}, {at: 1100 * ms, n: 2}, {at: 1400 * ms, n: 3}}
	for _, name := range builtins {
		for _, refunded := range []step{{at: 300 * ms, n: 1}, {at: 350 * ms, n: 1}, {at: 100 * ms, n: 1}} {
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
