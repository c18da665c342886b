package algorithms_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/model"
)

// Step tables of Refund at a later instant than the grant, each rule at
// Limit 3 per second, with probes a nanosecond either side of the instants
// where a refunded unit counts or stops counting. A third of a second is
// 333,333,333.3 ns: a wait of one token rounds up to 333333334 ns.

// refundStep is one step: at at, give n back (refund), or ask for n and
// want the decision want (PeekN with peek, else AllowN).
type refundStep struct {
	at     time.Duration
	refund bool
	peek   bool
	n      int
	want   Decision
}

func give(at time.Duration, n int) refundStep { return refundStep{at: at, refund: true, n: n} }

func allow(at time.Duration, n int, want Decision) refundStep {
	return refundStep{at: at, n: n, want: want}
}

func peek(at time.Duration, n int, want Decision) refundStep {
	return refundStep{at: at, peek: true, n: n, want: want}
}

// yes and no are decisions under Limit 3.
func yes(remaining int, reset, delay time.Duration) Decision {
	return Decision{Allowed: true, Limit: 3, Remaining: remaining, ResetAfter: reset, Delay: delay}
}

func no(remaining int, retry, reset time.Duration) Decision {
	return Decision{Limit: 3, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

const third = 333333334 * time.Nanosecond // a token's refill, rounded up

func TestRefundSteps(t *testing.T) {
	// The buckets: tokens come back at once, up to the capacity.
	bucket := []refundStep{
		allow(0, 3, yes(0, s, 0)),
		give(0, 1),
		peek(0, 1, yes(0, s, 0)),
		peek(0, 2, no(1, third, 2*third-1)),
		give(100*ms, 5), // more than it took: full, not above
		peek(100*ms, 3, yes(0, s, 0)),
		allow(100*ms, 3, yes(0, s, 0)),
		allow(100*ms, 1, no(0, third, s)),
		// At 200 ms the bucket holds 0.3 tokens; one back makes 1.3, and 2
		// fit once 0.7 more refill, 233333333.3 ns later.
		give(200*ms, 1),
		peek(200*ms, 1, yes(0, 900*ms, 0)),
		peek(200*ms+233333333, 2, no(1, 1, third)),
		peek(200*ms+233333334, 2, yes(0, s, 0)),
	}
	// The leaky bucket: its queue shrinks, so later admissions wait less.
	leaky := []refundStep{
		allow(0, 1, Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: third}),
		allow(0, 1, Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 2*third - 1, Delay: third}),
		allow(0, 1, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s, Delay: 2*third - 1}),
		give(0, 2),
		allow(0, 1, Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 2*third - 1, Delay: third}),
		give(0, 9), // the queue empties, no further
		allow(0, 1, Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: third}),
	}
	fixed := []refundStep{
		allow(0, 3, yes(0, s, 0)),
		give(500*ms, 1),
		peek(500*ms, 1, yes(0, 500*ms, 0)),
		peek(500*ms, 2, no(1, 500*ms, 500*ms)),
		give(s-1, 1), // the window's last nanosecond
		peek(s-1, 3, no(2, 1, 1)),
		peek(s-1, 2, yes(0, 1, 0)),
		give(s, 1), // the window has ended: nothing to give back
		peek(s, 3, yes(0, s, 0)),
		allow(s, 3, yes(0, s, 0)),
		// Emptied, a window is none: the next grant opens one at its
		// instant, as on an untouched key.
		give(1200*ms, 3),
		allow(1900*ms, 3, yes(0, s, 0)),
		allow(2500*ms, 1, no(0, 400*ms, 400*ms)),
		allow(2900*ms-1, 1, no(0, 1, 1)),
		allow(2900*ms, 3, yes(0, s, 0)),
	}
	log := []refundStep{
		allow(0, 1, yes(2, s, 0)),
		allow(100*ms, 1, yes(1, s, 0)),
		allow(200*ms, 1, yes(0, s, 0)),
		// The two newest go: what is left is the unit at 0.
		give(300*ms, 2),
		peek(300*ms, 2, yes(0, s, 0)),
		peek(300*ms, 3, no(2, 700*ms, 700*ms)),
		// The unit at 0 counts until 1 s - 1 ns; then nothing is left to
		// give back, and the log is as an untouched one.
		allow(s-1, 1, yes(1, s, 0)),
		give(s-1, 1), // the newest, at 1 s - 1 ns
		peek(s-1, 3, no(2, 1, 1)),
		give(s, 3), // the unit at 0 has left the window
		peek(s, 3, yes(0, s, 0)),
		// Several entries, newest first, within the window only.
		allow(3*s, 1, yes(2, s, 0)),
		allow(3*s+300*ms, 1, yes(1, s, 0)),
		allow(3*s+600*ms, 1, yes(0, s, 0)),
		give(4*s+100*ms, 3), // the unit at 3 s has left: two go, at 3.6 s and 3.3 s
		peek(4*s+100*ms, 3, yes(0, s, 0)),
	}
	// The sliding window counter: the current window loses units; the
	// previous one, ended, keeps them.
	counter := []refundStep{
		allow(0, 3, yes(0, 2*s, 0)),
		give(500*ms, 1),
		peek(500*ms, 1, yes(0, 1500*ms, 0)),
		peek(500*ms, 2, no(1, 500*ms, 1500*ms)),
		// At 1 s the window of 2 units is the previous one: it weighs
		// floor(2 × (1 s - 1 ns) / 1 s) = 1 unit, and a refund finds nothing
		// in the current one.
		give(s, 1),
		peek(s, 2, yes(0, 2*s, 0)),
		peek(s, 3, no(2, 500*ms, s)),
		allow(s, 1, yes(1, 2*s, 0)),
		give(s, 5), // the current window's unit, and no more
		peek(s, 3, no(2, 500*ms, s)),
		peek(s+500*ms, 3, yes(0, 2*s-500*ms, 0)),
	}
	tables := map[string][]refundStep{
		model.TokenBucket:          bucket,
		model.GCRA:                 bucket,
		model.LeakyBucket:          leaky,
		model.FixedWindow:          fixed,
		model.SlidingWindowLog:     log,
		model.SlidingWindowCounter: counter,
	}
	for _, name := range builtins {
		t.Run(name, func(t *testing.T) {
			p := Params{Limit: 3, Window: s}
			alg, err := construct(name, p)
			require.NoError(t, err)
			m := model.New(name, p)
			for i, st := range tables[name] {
				if st.refund {
					refundBoth(alg, m, st.at, st.n)
					continue
				}
				ask, modelAsk, what := alg.allowN, m.AllowN, "AllowN"
				if st.peek {
					ask, modelAsk, what = alg.peekN, m.PeekN, "PeekN"
				}
				got, err := ask(st.at, st.n)
				require.NoError(t, err)
				want, err := modelAsk(st.at, st.n)
				require.NoError(t, err)
				where := fmt.Sprintf("step %d: %s(t+%v, %d)", i, what, st.at, st.n)
				require.Equal(t, st.want, got, where)
				require.Equal(t, want, got, "%s: the model's", where)
			}
		})
	}
}

// TestRefundUntouched checks that a refund leaves an untouched key
// untouched, and never gives a key more room than an untouched key has,
// whatever it gives back.
func TestRefundUntouched(t *testing.T) {
	for _, name := range builtins {
		t.Run(name, func(t *testing.T) {
			p := Params{Limit: 3, Window: s}
			alg, err := construct(name, p)
			require.NoError(t, err)
			alg.refund(5*s, 3)
			require.Zero(t, alg.resetAfter(5*s))
			d, err := alg.peekN(5*s, 1)
			require.NoError(t, err)
			require.Equal(t, 2, d.Remaining, "a refunded untouched key: %+v", d)
			_, err = alg.allowN(6*s, 1)
			require.NoError(t, err)
			alg.refund(6*s, 3)
			d, err = alg.peekN(6*s, 3)
			require.NoError(t, err)
			require.True(t, d.Allowed, "%+v", d)
			_, err = alg.allowN(6*s, 3)
			require.NoError(t, err)
			d, err = alg.allowN(6*s, 1)
			require.NoError(t, err)
			require.False(t, d.Allowed, "a fourth unit after a refund of 3 on 1: %+v", d)
		})
	}
}
