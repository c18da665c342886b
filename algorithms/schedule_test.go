package algorithms_test

// These tests are external: they drive the rules beside their reference
// models, and internal/model imports this package. They reach the rules
// through the exported API, which the dot import lets them name as the
// internal tests do, and what else they need of the internal tests through
// export_test.go.

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/model"
)

// Model tests: random schedules (random Params, random n, clock steps of
// zero, one nanosecond, about a token, about a Window, and years), each
// played on the real algorithm and on its reference model (internal/model).
// Every decision must match, PeekN must agree with AllowN, the rule's state
// must report what the model's does, and what was admitted must keep the
// algorithm's window invariant.

const (
	ms = time.Millisecond
	s  = time.Second

	century = 100 * 365 * 24 * time.Hour
)

// builtins are the algorithms with a model.
var builtins = model.Names()

// bound is one algorithm and a state of its own.
type bound struct {
	allowN, peekN func(now time.Duration, n int) (Decision, error) // as a router asks: n checked first

	// machineAllowN and machinePeekN call the Machine with any n.
	machineAllowN, machinePeekN func(now time.Duration, n int) Decision

	refund   func(now time.Duration, n int)
	snapshot func() string // the state, deeply, as text
	capacity int

	// resetAfter is the rule's Expiring.ResetAfter on the state.
	resetAfter func(now time.Duration) time.Duration

	// reload saves the state at then and loads it back in its place at
	// now, as a snapshot taken at then and restored now-then later would.
	reload func(then, now time.Duration) error
}

func bind[S any](m Machine[S]) bound {
	var s S
	return bound{
		allowN: func(now time.Duration, n int) (Decision, error) { return Ask(m, &s, now, n) },
		peekN:  func(now time.Duration, n int) (Decision, error) { return Peek(m, &s, now, n) },
		machineAllowN: func(now time.Duration, n int) (d Decision) {
			m.AllowN(&s, now, n, &d)
			return d
		},
		machinePeekN: func(now time.Duration, n int) (d Decision) {
			m.PeekN(&s, now, n, &d)
			return d
		},
		refund:   func(now time.Duration, n int) { m.Refund(&s, now, n) },
		snapshot: func() string { return fmt.Sprintf("%#v", s) },
		capacity: m.Capacity(),
		resetAfter: func(now time.Duration) time.Duration {
			return any(m).(Expiring[S]).ResetAfter(&s, now)
		},
		reload: func(then, now time.Duration) error {
			codec := any(m).(StateCodec[S])
			saved := codec.AppendState(nil, &s, then)
			var loaded S
			if err := codec.ParseState(saved, &loaded, now, now-then); err != nil {
				return fmt.Errorf("ParseState(%x) of %#v: %w", saved, s, err)
			}
			s = loaded
			return nil
		},
	}
}

// construct makes the named algorithm for p, with a fresh state.
func construct(name string, p Params) (bound, error) {
	var (
		b   bound
		err error
	)
	switch name {
	case model.TokenBucket:
		var m *TokenBucket
		if m, err = NewTokenBucket(p); err == nil {
			b = bind(m)
		}
	case model.GCRA:
		var m *GCRA
		if m, err = NewGCRA(p); err == nil {
			b = bind(m)
		}
	case model.LeakyBucket:
		var m *LeakyBucket
		if m, err = NewLeakyBucket(p); err == nil {
			b = bind(m)
		}
	case model.SlidingWindowLog:
		var m *SlidingWindowLog
		if m, err = NewSlidingWindowLog(p); err == nil {
			b = bind(m)
		}
	case model.FixedWindow:
		var m *FixedWindow
		if m, err = NewFixedWindow(p); err == nil {
			b = bind(m)
		}
	case model.SlidingWindowCounter:
		var m *SlidingWindowCounter
		if m, err = NewSlidingWindowCounter(p); err == nil {
			b = bind(m)
		}
	default:
		err = fmt.Errorf("no such algorithm %q", name)
	}
	return b, err
}

func takesBurst(name string) bool {
	return name == model.TokenBucket || name == model.GCRA || name == model.LeakyBucket
}

// call is one request of a schedule: advance the clock by dt, ask for n,
// or with refund, give n back (as Router.Refund does: an n below 1 is
// refused, one above the capacity gives back the capacity).
type call struct {
	dt     time.Duration
	n      int
	refund bool
}

// refundBoth gives n back at now on the algorithm and on its model.
func refundBoth(alg bound, m model.Model, now time.Duration, n int) {
	if n < 1 {
		return
	}
	alg.refund(now, min(n, alg.capacity))
	m.Refund(now, n)
}

// refunded reports whether m is a bucket that a Refund gave tokens back:
// its admissions then pass its rate, and no invariant bounds them.
func refunded(m model.Model) bool {
	r, ok := m.(interface{ Refunded() bool })
	return ok && r.Refunded()
}

// play runs calls on the algorithm and its model. It returns the first
// disagreement or broken invariant. Before every third call it saves the
// algorithm's state and loads it back after the clock step, as a snapshot
// and a restore would, which must change no decision. Before every call,
// and after the last, the state must report the Remaining and ResetAfter
// the model's does (sameState).
func play(name string, p Params, calls []call) error {
	alg, err := construct(name, p)
	if err != nil {
		return err
	}
	m := model.New(name, p)
	maxNow := time.Duration(math.MaxInt64) - 2*p.Window // room for the models' sums
	now := time.Duration(0)
	for i, c := range calls {
		if c.dt < 0 || c.dt > maxNow-now {
			c.dt = 0
		}
		then := now
		now += c.dt
		if i%3 == 2 {
			if err := alg.reload(then, now); err != nil {
				return fmt.Errorf("call %d: reload from t+%v at t+%v: %w", i, then, now, err)
			}
		}
		if err := sameState(alg, m, now); err != nil {
			return fmt.Errorf("call %d: before AllowN(t+%v, %d): %w", i, now, c.n, err)
		}
		if c.refund {
			refundBoth(alg, m, now, c.n)
			if err := sameState(alg, m, now); err != nil {
				return fmt.Errorf("call %d: after Refund(t+%v, %d): %w", i, now, c.n, err)
			}
			continue
		}
		peek, peekErr := alg.peekN(now, c.n)
		modelPeek, modelPeekErr := m.PeekN(now, c.n)
		got, err := alg.allowN(now, c.n)
		want, wantErr := m.AllowN(now, c.n)
		switch {
		case !sameError(err, wantErr):
			return fmt.Errorf("call %d: AllowN(t+%v, %d) error = %v, want %v", i, now, c.n, err, wantErr)
		case got != want:
			return fmt.Errorf("call %d: AllowN(t+%v, %d) = %+v, want %+v", i, now, c.n, got, want)
		case peek != got || !sameError(peekErr, err):
			return fmt.Errorf("call %d: PeekN(t+%v, %d) = %+v, %v; AllowN = %+v, %v", i, now, c.n, peek, peekErr, got, err)
		case modelPeek != want || !sameError(modelPeekErr, wantErr):
			return fmt.Errorf("call %d: the model's PeekN(t+%v, %d) = %+v, %v; its AllowN = %+v, %v", i, now, c.n, modelPeek, modelPeekErr, want, wantErr)
		}
		if err != nil {
			if got != (Decision{}) {
				return fmt.Errorf("call %d: AllowN(t+%v, %d) = %+v with error %v, want the zero Decision", i, now, c.n, got, err)
			}
			continue
		}
		if err := checkDecision(got, alg.capacity); err != nil {
			return fmt.Errorf("call %d: AllowN(t+%v, %d) = %+v: %w", i, now, c.n, got, err)
		}
		if wait := alg.resetAfter(now); wait != got.ResetAfter {
			return fmt.Errorf("call %d: after AllowN(t+%v, %d) = %+v, ResetAfter(state) = %v", i, now, c.n, got, wait)
		}
	}
	if err := sameState(alg, m, now); err != nil {
		return fmt.Errorf("after the last call, at t+%v: %w", now, err)
	}
	if refunded(m) {
		return nil // what a refunded bucket admitted passes its rate, as it should
	}
	if name == model.LeakyBucket {
		return model.CheckSpacing(p, m.Admitted())
	}
	return model.CheckWindowInvariant(name, p, m.Admitted())
}

// sameState checks that the algorithm's state reports at now what the
// model's does: the same ResetAfter (Expiring), and the same Remaining, the
// single units that would be allowed, which the rule tells through a
// PeekN(now, 1): its Remaining, plus the unit it takes if it allows.
func sameState(alg bound, m model.Model, now time.Duration) error {
	if got, want := alg.resetAfter(now), m.ResetAfter(now); got != want {
		return fmt.Errorf("ResetAfter(state, t+%v) = %v, the model's %v", now, got, want)
	}
	d, err := alg.peekN(now, 1)
	if err != nil {
		return fmt.Errorf("PeekN(t+%v, 1): %w", now, err)
	}
	got := d.Remaining
	if d.Allowed {
		got++
	}
	if want := m.Remaining(now); got != want {
		return fmt.Errorf("PeekN(t+%v, 1) = %+v: %d units remain, the model's %d", now, d, got, want)
	}
	return nil
}

// sameError reports whether a and b are the same error (both nil
// included): they match the same sentinel. The model's sentinels match
// those Ask gives for the same n.
func sameError(a, b error) bool { return sentinel(a) == sentinel(b) }

func sentinel(err error) error {
	for _, same := range [][]error{
		{ErrInvalidCount, model.ErrInvalidCount},
		{ErrExceedsCapacity, model.ErrExceedsCapacity},
		{ErrInvalidParams},
	} {
		for _, e := range same {
			if errors.Is(err, e) {
				return same[0]
			}
		}
	}
	return err
}

// playBackwards plays calls on the algorithm alone, stepping the clock back
// on every third call, and checks what holds for any now: no panic, sane
// decisions, and that a now behind the latest grants nothing that the
// latest instant would not.
func playBackwards(name string, p Params, calls []call) error {
	alg, err := construct(name, p)
	if err != nil {
		return err
	}
	now, latest := time.Duration(0), time.Duration(0)
	maxNow := time.Duration(math.MaxInt64) - 2*p.Window
	for i, c := range calls {
		switch {
		case i%3 == 2:
			now -= min(c.dt, now) // back, but not before 0
		case c.dt >= 0 && c.dt <= maxNow-now:
			now += c.dt
		}
		latest = max(latest, now)
		if c.refund {
			if c.n >= 1 {
				alg.refund(now, min(c.n, alg.capacity))
			}
			if err := checkRoom(alg, now); err != nil {
				return fmt.Errorf("call %d: after Refund(t+%v, %d): %w", i, now, c.n, err)
			}
			continue
		}
		atLatest, _ := alg.peekN(latest, c.n)
		got, err := alg.allowN(now, c.n)
		if err != nil {
			continue
		}
		if err := checkDecision(got, alg.capacity); err != nil {
			return fmt.Errorf("call %d: AllowN(t+%v, %d) = %+v: %w", i, now, c.n, got, err)
		}
		if wait := alg.resetAfter(now); wait != got.ResetAfter {
			return fmt.Errorf("call %d: after AllowN(t+%v, %d) = %+v, ResetAfter(state) = %v", i, now, c.n, got, wait)
		}
		if got.Allowed && !atLatest.Allowed {
			return fmt.Errorf("call %d: AllowN(t+%v, %d) allowed, behind t+%v, which would refuse it", i, now, c.n, latest)
		}
	}
	return nil
}

// checkRoom checks that the state at now has no more room than an
// untouched key: a PeekN of the whole capacity decides as on a fresh state,
// or denies.
func checkRoom(alg bound, now time.Duration) error {
	d, err := alg.peekN(now, 1)
	if err != nil {
		return err
	}
	if err := checkDecision(d, alg.capacity); err != nil {
		return fmt.Errorf("PeekN(t+%v, 1) = %+v: %w", now, d, err)
	}
	return nil
}

// checkDecision checks what holds of any decision.
func checkDecision(d Decision, capacity int) error {
	switch {
	case d.Remaining < 0 || d.Remaining > capacity:
		return fmt.Errorf("Remaining outside [0, %d]", capacity)
	case d.Allowed && d.RetryAfter != 0:
		return errors.New("allowed with a RetryAfter")
	case !d.Allowed && d.RetryAfter <= 0:
		return errors.New("denied without a RetryAfter")
	case d.ResetAfter < 0 || d.Delay < 0:
		return errors.New("negative wait")
	}
	return nil
}

// randomParams draws Params with awkward ratios, tiny and huge rates.
func randomParams(rng *rand.Rand, name string) Params {
	limits := []int{1, 2, 3, 7, 10, 1000, 1e9, math.MaxInt}
	windows := []time.Duration{1, 7, time.Microsecond, time.Second, 10 * time.Second, 1000 * time.Hour, century}
	p := Params{Limit: limits[rng.IntN(len(limits))], Window: windows[rng.IntN(len(windows))]}
	if rng.IntN(3) == 0 {
		p.Limit = 1 + rng.IntN(50)
	}
	if takesBurst(name) {
		switch rng.IntN(4) {
		case 0:
			p.Burst = 1
		case 1:
			p.Burst = 1 + rng.IntN(2*min(p.Limit, 50))
		case 2:
			p.Burst = rng.IntN(math.MaxInt)
		}
	}
	return p
}

// randomCalls draws a schedule for p on an algorithm of the given
// capacity; with refunds, about one call in five is a refund.
func randomCalls(rng *rand.Rand, p Params, capacity, count int, refunds bool) []call {
	token := max(p.Window/time.Duration(min(p.Limit, math.MaxInt64)), 1)
	calls := make([]call, count)
	for i := range calls {
		var dt time.Duration
		switch r := rng.IntN(20); {
		case r < 6:
			dt = 0
		case r < 8:
			dt = 1
		case r < 12:
			dt = 1 + durN(rng, 2*token)
		case r < 16:
			dt = p.Window + time.Duration(rng.IntN(3)) - 1
			if rng.IntN(2) == 0 {
				dt = 1 + durN(rng, 2*p.Window)
			}
		case r < 19:
			dt = 1 + durN(rng, p.Window)
		default:
			dt = 1 + durN(rng, 50*365*24*time.Hour)
		}
		var n int
		switch r := rng.IntN(20); {
		case r < 12:
			n = 1 + rng.IntN(min(capacity, 4))
		case r < 15:
			n = capacity
		case r < 18:
			n = 1 + rng.IntN(capacity)
		case r < 19:
			n = -rng.IntN(2)
		default:
			n = capacity + 1 // ErrExceedsCapacity, or MinInt's wrap at MaxInt
		}
		calls[i] = call{dt: dt, n: n, refund: refunds && rng.IntN(5) == 0}
	}
	return calls
}

// durN returns a random Duration in [0, d), or 0 if d <= 0.
func durN(rng *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(d)))
}

// schedules returns how many random schedules each algorithm plays:
// CHANLIMIT_SCHEDULES overrides the default.
func schedules(t *testing.T, def int) int {
	if v := os.Getenv("CHANLIMIT_SCHEDULES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("CHANLIMIT_SCHEDULES=%q: %v", v, err)
		}
		return n
	}
	return def
}

func TestModels(t *testing.T) {
	count := schedules(t, 500)
	for _, name := range builtins {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i := range count {
				seed := uint64(i)
				rng := rand.New(rand.NewPCG(seed, uint64(len(name))))
				p := randomParams(rng, name)
				alg, err := construct(name, p)
				if err != nil {
					if !errors.Is(err, ErrInvalidParams) || !refillTooLong(p) {
						t.Fatalf("schedule %d: %+v refused: %v", i, p, err)
					}
					continue
				}
				plays := []bool{false}
				if i%2 == 0 {
					plays = append(plays, true) // every other schedule again, with refunds
				}
				for _, refunds := range plays {
					calls := randomCalls(rng, p, alg.capacity, 60, refunds)
					if err := play(name, p, calls); err != nil {
						t.Fatalf("schedule %d (refunds %v), %+v: %v", i, refunds, p, err)
					}
					if err := playBackwards(name, p, calls); err != nil {
						t.Fatalf("schedule %d (refunds %v), %+v, stepping back: %v", i, refunds, p, err)
					}
				}
			}
		})
	}
}

// refillTooLong reports whether refilling a whole bucket of p takes longer
// than the largest Duration: the one config a bucket refuses that
// randomParams makes.
func refillTooLong(p Params) bool {
	burst := p.Burst
	if burst == 0 {
		burst = p.Limit
	}
	x := new(big.Int).Mul(big.NewInt(int64(burst)), big.NewInt(int64(p.Window)))
	x.Add(x, big.NewInt(int64(p.Limit)-1))
	return !x.Quo(x, big.NewInt(int64(p.Limit))).IsInt64()
}

// TestGCRAMatchesTokenBucket: gcra, token_bucket and leaky_bucket (but for
// Delay) give identical decisions on the same schedules.
func TestGCRAMatchesTokenBucket(t *testing.T) {
	for i := range schedules(t, 500) {
		rng := rand.New(rand.NewPCG(uint64(i), 99))
		p := randomParams(rng, model.GCRA)
		tb, err := construct(model.TokenBucket, p)
		if err != nil {
			continue
		}
		g, err := construct(model.GCRA, p)
		if err != nil {
			t.Fatalf("%+v: token_bucket accepts it, model.GCRA says %v", p, err)
		}
		lb, err := construct(model.LeakyBucket, p)
		if err != nil {
			t.Fatalf("%+v: token_bucket accepts it, leaky_bucket says %v", p, err)
		}
		now := time.Duration(0)
		for j, c := range randomCalls(rng, p, tb.capacity, 100, false) {
			if c.dt > math.MaxInt64/2-now {
				c.dt = 0
			}
			now += c.dt
			want, wantErr := tb.allowN(now, c.n)
			got, err := g.allowN(now, c.n)
			if got != want || !sameError(err, wantErr) {
				t.Fatalf("schedule %d, %+v, call %d: gcra AllowN(t+%v, %d) = %+v, %v; token_bucket = %+v, %v", i, p, j, now, c.n, got, err, want, wantErr)
			}
			got, err = lb.allowN(now, c.n)
			got.Delay = 0
			if got != want || !sameError(err, wantErr) {
				t.Fatalf("schedule %d, %+v, call %d: leaky_bucket AllowN(t+%v, %d) = %+v, %v; token_bucket = %+v, %v", i, p, j, now, c.n, got, err, want, wantErr)
			}
		}
	}
}

// TestSlidingWindowCounterWithinItsBound checks the documented bound on
// random schedules: no span of one Window holds 2 × Limit allowed units
// (play checks that), and at every decision the estimate is within the
// previous window's count of the true count.
func TestSlidingWindowCounterWithinItsBound(t *testing.T) {
	for i := range schedules(t, 300) {
		rng := rand.New(rand.NewPCG(uint64(i), 5))
		p := Params{Limit: 1 + rng.IntN(20), Window: s}
		c, err := NewSlidingWindowCounter(p)
		require.NoError(t, err)
		m := model.New(model.SlidingWindowCounter, p).(*model.Counter)
		var st SlidingWindowCounterState
		now := time.Duration(0)
		for j, call := range randomCalls(rng, p, p.Limit, 80, false) {
			now += min(call.dt, 10*s)
			if call.n < 1 || call.n > p.Limit {
				continue
			}
			if elapsed, prev, cur, ok := m.Windows(now); ok {
				// The counter's count against the true count, what the log
				// sees in (now − W, now].
				weighed := prev * int(p.Window-1-elapsed) / int(p.Window) // small: no overflow
				diff := new(big.Rat).SetInt64(int64(weighed + cur - model.UnitsIn(m.Admitted(), now-p.Window, now)))
				// The counter counts floor(prev × (W − 1 − e)/W) + cur; the log
				// counts cur plus between 0 and prev. So
				// −prev × (e + 1)/W − 1 < diff <= prev × (W − 1 − e)/W.
				lower := new(big.Rat).SetFrac64(-int64(prev)*int64(elapsed+1)-int64(p.Window), int64(p.Window))
				upper := new(big.Rat).SetFrac64(int64(prev)*int64(p.Window-1-elapsed), int64(p.Window))
				if diff.Cmp(lower) <= 0 || diff.Cmp(upper) > 0 {
					t.Fatalf("schedule %d, call %d at %v: estimate − true count = %v, outside [%v, %v]", i, j, now, diff, lower, upper)
				}
			}
			want, _ := m.AllowN(now, call.n)
			got, _ := Ask(c, &st, now, call.n)
			require.Equal(t, want, got, "schedule %d, call %d", i, j)
		}
		require.NoError(t, model.CheckWindowInvariant(model.SlidingWindowCounter, p, m.Admitted()), "schedule %d", i)
	}
}
