package model_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/model"
)

// The models are checked against the rules themselves in package
// algorithms (TestModels and the fuzz targets there). These tests check a
// model alone: a few steps whose answers the rules' own step tables give,
// and what every model promises of its methods.

const (
	ns = time.Nanosecond
	ms = time.Millisecond
	s  = time.Second
)

type decision = algorithms.Decision

// step is one call in a step table: AllowN(at, n) must return want, or the
// error err.
type step struct {
	at   time.Duration
	n    int
	want decision
	err  error
}

// run plays steps on m. At every step, PeekN must answer what AllowN then
// does; a denied decision must report the Remaining and ResetAfter of the
// state before it, and an allowed one those of the state after it; an
// error or a denial must admit nothing.
func run(t *testing.T, m model.Model, steps []step) {
	t.Helper()
	for i, c := range steps {
		before := len(m.Admitted())
		remaining, reset := m.Remaining(c.at), m.ResetAfter(c.at)
		peeked, peekErr := m.PeekN(c.at, c.n)
		got, err := m.AllowN(c.at, c.n)
		if peeked != got || peekErr != err {
			t.Errorf("step %d: PeekN(t+%v, %d) = %+v, %v but AllowN = %+v, %v", i, c.at, c.n, peeked, peekErr, got, err)
		}
		if err != c.err || got != c.want {
			t.Errorf("step %d: AllowN(t+%v, %d) = %+v, %v, want %+v, %v", i, c.at, c.n, got, err, c.want, c.err)
			continue
		}
		admitted := len(m.Admitted()) - before
		switch {
		case !got.Allowed && admitted != 0:
			t.Errorf("step %d: AllowN(t+%v, %d) = %+v, %v admitted %d", i, c.at, c.n, got, err, admitted)
		case got.Allowed && admitted != 1:
			t.Errorf("step %d: AllowN(t+%v, %d) allowed, admitted %d", i, c.at, c.n, admitted)
		case err == nil && !got.Allowed && (got.Remaining != remaining || got.ResetAfter != reset):
			t.Errorf("step %d: AllowN(t+%v, %d) = %+v, but the state had Remaining %d, ResetAfter %v", i, c.at, c.n, got, remaining, reset)
		case got.Allowed && (got.Remaining != m.Remaining(c.at) || got.ResetAfter != m.ResetAfter(c.at)):
			t.Errorf("step %d: AllowN(t+%v, %d) = %+v, but the state has Remaining %d, ResetAfter %v", i, c.at, c.n, got, m.Remaining(c.at), m.ResetAfter(c.at))
		}
	}
}

// The steps below are those of the rules' own step tables in package
// algorithms, for the same Params.

func TestTokenBucketThreePerSecond(t *testing.T) {
	for _, name := range []string{"token_bucket", "gcra"} {
		t.Run(name, func(t *testing.T) {
			run(t, model.New(name, algorithms.Params{Limit: 3, Window: s}), []step{
				{at: 0, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 333333334 * ns}},
				{at: 0, n: 2, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
				{at: 0, n: 1, want: decision{Limit: 3, RetryAfter: 333333334 * ns, ResetAfter: s}},
				{at: 333333333 * ns, n: 1, want: decision{Limit: 3, RetryAfter: 1 * ns, ResetAfter: 666666667 * ns}},
				{at: 333333334 * ns, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
				{at: 1333333334 * ns, n: 3, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
				{at: 1833333334 * ns, n: 2, want: decision{Limit: 3, Remaining: 1, RetryAfter: 166666667 * ns, ResetAfter: 500 * ms}},
				{at: 1833333334 * ns, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 833333334 * ns}},
				{at: 5 * s, n: 4, err: model.ErrExceedsCapacity},
				{at: 5 * s, n: 0, err: model.ErrInvalidCount},
				{at: 5 * s, n: 3, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
			})
		})
	}
}

func TestLeakyBucketThreePerSecond(t *testing.T) {
	run(t, model.New("leaky_bucket", algorithms.Params{Limit: 3, Window: s}), []step{
		{at: 0, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 333333334 * ns}},
		{at: 0, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 666666667 * ns, Delay: 333333334 * ns}},
		{at: 0, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s, Delay: 666666667 * ns}},
		{at: 0, n: 1, want: decision{Limit: 3, RetryAfter: 333333334 * ns, ResetAfter: s}},
		{at: 500 * ms, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 833333334 * ns, Delay: 500 * ms}},
		{at: 5 * s, n: 3, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 5 * s, n: 4, err: model.ErrExceedsCapacity},
	})
}

func TestSlidingWindowLogThreePerSecond(t *testing.T) {
	run(t, model.New("sliding_window_log", algorithms.Params{Limit: 3, Window: s}), []step{
		{at: 0, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: s}},
		{at: 100 * ms, n: 2, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 200 * ms, n: 1, want: decision{Limit: 3, RetryAfter: 800 * ms, ResetAfter: 900 * ms}},
		{at: s - ns, n: 1, want: decision{Limit: 3, RetryAfter: ns, ResetAfter: 100*ms + ns}},
		{at: s, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: s, n: 1, want: decision{Limit: 3, RetryAfter: 100 * ms, ResetAfter: s}},
		{at: 1100 * ms, n: 2, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 1500 * ms, n: 3, want: decision{Limit: 3, RetryAfter: 600 * ms, ResetAfter: 600 * ms}},
		{at: 5 * s, n: 3, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 5 * s, n: 4, err: model.ErrExceedsCapacity},
		{at: 5 * s, n: -1, err: model.ErrInvalidCount},
	})
}

func TestFixedWindowThreePerSecond(t *testing.T) {
	run(t, model.New("fixed_window", algorithms.Params{Limit: 3, Window: s}), []step{
		{at: 500 * ms, n: 2, want: decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: s}},
		{at: 1200 * ms, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 300 * ms}},
		{at: 1300 * ms, n: 1, want: decision{Limit: 3, RetryAfter: 200 * ms, ResetAfter: 200 * ms}},
		{at: 1500*ms - ns, n: 1, want: decision{Limit: 3, RetryAfter: ns, ResetAfter: ns}},
		{at: 1500 * ms, n: 3, want: decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		{at: 2500*ms - ns, n: 1, want: decision{Limit: 3, RetryAfter: ns, ResetAfter: ns}},
		{at: 2500 * ms, n: 1, want: decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: s}},
		{at: 2500 * ms, n: 4, err: model.ErrExceedsCapacity},
		{at: 2500 * ms, n: 0, err: model.ErrInvalidCount},
	})
}

func TestSlidingWindowCounterFourPerSecond(t *testing.T) {
	run(t, model.New("sliding_window_counter", algorithms.Params{Limit: 4, Window: s}), []step{
		{at: 0, n: 4, want: decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * s}},
		{at: 500 * ms, n: 1, want: decision{Limit: 4, RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
		{at: s, n: 1, want: decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * s}},
		{at: s, n: 1, want: decision{Limit: 4, RetryAfter: 250 * ms, ResetAfter: 2 * s}},
		{at: 1250 * ms, n: 1, want: decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1750 * ms}},
		{at: 1500 * ms, n: 1, want: decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1500 * ms}},
		{at: 1750 * ms, n: 2, want: decision{Limit: 4, Remaining: 1, RetryAfter: 250 * ms, ResetAfter: 1250 * ms}},
		{at: 1750*ms + ns, n: 2, want: decision{Limit: 4, Remaining: 1, RetryAfter: 250*ms - ns, ResetAfter: 1250*ms - ns}},
		{at: 5 * s, n: 4, want: decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * s}},
		{at: 5 * s, n: 5, err: model.ErrExceedsCapacity},
		{at: 5 * s, n: 0, err: model.ErrInvalidCount},
	})
}

// TestUntouched: a fresh model, at any now, allows its whole capacity and
// reports nothing to wait for.
func TestUntouched(t *testing.T) {
	for _, name := range model.Names() {
		for _, now := range []time.Duration{0, -s, 7 * s} {
			m := model.New(name, algorithms.Params{Limit: 3, Window: s})
			if got := m.Remaining(now); got != m.Capacity() {
				t.Errorf("%s: Remaining(t+%v) = %d, want Capacity %d", name, now, got, m.Capacity())
			}
			if got := m.ResetAfter(now); got != 0 {
				t.Errorf("%s: ResetAfter(t+%v) = %v, want 0", name, now, got)
			}
			if d, err := m.PeekN(now, m.Capacity()); err != nil || !d.Allowed {
				t.Errorf("%s: PeekN(t+%v, %d) = %+v, %v, want allowed", name, now, m.Capacity(), d, err)
			}
		}
	}
}

// TestPeekNChangesNothing: whatever PeekN answers, the state is as it was,
// and AllowN then answers the same.
func TestPeekNChangesNothing(t *testing.T) {
	for _, name := range model.Names() {
		t.Run(name, func(t *testing.T) {
			m := model.New(name, algorithms.Params{Limit: 3, Window: s})
			for _, at := range []time.Duration{0, 100 * ms, 200 * ms} {
				if d, err := m.AllowN(at, 1); err != nil || !d.Allowed {
					t.Fatalf("AllowN(t+%v, 1) = %+v, %v, want allowed", at, d, err)
				}
			}
			for _, at := range []time.Duration{250 * ms, 1100 * ms, 10 * s} {
				for _, n := range []int{1, 3, 0, 4} {
					adm := slices.Clone(m.Admitted())
					remaining, reset := m.Remaining(at), m.ResetAfter(at)
					peeked, peekErr := m.PeekN(at, n)
					switch {
					case !slices.Equal(adm, m.Admitted()):
						t.Errorf("PeekN(t+%v, %d) admitted %v", at, n, m.Admitted()[len(adm):])
					case m.Remaining(at) != remaining || m.ResetAfter(at) != reset:
						t.Errorf("PeekN(t+%v, %d) changed Remaining %d, ResetAfter %v to %d, %v", at, n, remaining, reset, m.Remaining(at), m.ResetAfter(at))
					}
					if at == 10*s && n == 3 {
						if got, err := m.AllowN(at, n); got != peeked || err != peekErr {
							t.Errorf("AllowN(t+%v, %d) = %+v, %v, but PeekN said %+v, %v", at, n, got, err, peeked, peekErr)
						}
					}
				}
			}
		})
	}
}

func TestNewPanicsOnAnUnknownName(t *testing.T) {
	defer func() {
		if r := recover(); r != `model: no model of "token bucket"` {
			t.Errorf("New(%q) panicked with %v", "token bucket", r)
		}
	}()
	model.New("token bucket", algorithms.Params{Limit: 1, Window: s})
}

func TestCheckWindowInvariant(t *testing.T) {
	p := algorithms.Params{Limit: 2, Window: s}
	adm := []model.Admission{{At: 0, N: 1}, {At: 500 * ms, N: 1}, {At: s, N: 2}}
	tests := []struct {
		give string
		want string // in the error; "" for none
	}{
		{"sliding_window_log", "3 units admitted in the Window ending at 1s, more than 2"},
		{"fixed_window", ""},
		{"sliding_window_counter", ""},
		{"token_bucket", ""},
	}
	for _, tt := range tests {
		err := model.CheckWindowInvariant(tt.give, p, adm)
		if got := fmt.Sprint(err); (err == nil) != (tt.want == "") || !strings.Contains(got, tt.want) {
			t.Errorf("CheckWindowInvariant(%s) = %v, want %q", tt.give, err, tt.want)
		}
	}
}

func TestCheckSpacing(t *testing.T) {
	p := algorithms.Params{Limit: 3, Window: s}
	even := []model.Admission{{At: 0, N: 2}, {At: 0, Delay: 666666666, N: 1}, {At: s, N: 1}}
	if err := model.CheckSpacing(p, even); err != nil {
		t.Errorf("CheckSpacing(%v) = %v", even, err)
	}
	tight := []model.Admission{{At: 0, N: 2}, {At: 0, Delay: 666666665, N: 1}}
	if err := model.CheckSpacing(p, tight); err == nil {
		t.Errorf("CheckSpacing(%v) = nil, want an error", tight)
	}
}
