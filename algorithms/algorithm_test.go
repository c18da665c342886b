package algorithms

import (
	"errors"
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

	century = 100 * 365 * 24 * time.Hour
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
