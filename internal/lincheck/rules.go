package lincheck

import (
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// A policy's rule, as the model applies it: the rule's Machine from
// package algorithms, on a state kept as the bytes its StateCodec writes,
// so that a model state is a value (compared and hashed as bytes) that
// no step changes in place.
//
// The model takes the rules themselves as the sequential specification:
// they are checked against references of their own (internal/model). What
// it states again, on its own, is everything above them: how several
// policies combine, dry-run policies, lines of waiters, give-backs, and
// a Store's time.

// rule is one policy's rule.
type rule interface {
	capacity() int
	// decide decides n units on st at now, taking them if take and the
	// rule allows, and returns the decision and the state after.
	decide(st saved, now time.Duration, n int, take bool) (algorithms.Decision, saved)
	// refund gives n units back to st at now.
	refund(st saved, now time.Duration, n int) saved
	// resetAfter returns the time from now until st is untouched.
	resetAfter(st saved, now time.Duration) time.Duration
}

// saved is a policy's state: the bytes its StateCodec wrote at at, or
// "" for an untouched state (the zero state, which the model keeps as
// nothing, as a router forgets an untouched key).
type saved struct {
	bytes string
	at    time.Duration
}

// codecMachine is what every built-in rule is.
type codecMachine[S any] interface {
	algorithms.Machine[S]
	algorithms.Expiring[S]
	algorithms.StateCodec[S]
}

// machine is a rule on states of type S.
type machine[S any] struct{ m codecMachine[S] }

func (r machine[S]) capacity() int { return r.m.Capacity() }

// load returns st as the Machine's state, to decide at now. A state is
// saved at the instant it last changed, as the rule then left it, so a
// now before that (a line's head granted at the instant it was due,
// after a dry-run policy took at a later one) is read by the rule as it
// would read it on the state it keeps.
func (r machine[S]) load(st saved, now time.Duration) S {
	var s S
	if st.bytes == "" {
		return s
	}
	if err := r.m.ParseState([]byte(st.bytes), &s, st.at, 0); err != nil {
		panic(fmt.Sprintf("lincheck: a state the rule wrote does not parse: %v", err))
	}
	return s
}

// save returns s as it stands at now: nothing if it is untouched.
func (r machine[S]) save(s *S, now time.Duration) saved {
	if r.m.ResetAfter(s, now) == 0 {
		return saved{}
	}
	return saved{string(r.m.AppendState(nil, s, now)), now}
}

func (r machine[S]) decide(st saved, now time.Duration, n int, take bool) (algorithms.Decision, saved) {
	s := r.load(st, now)
	var d algorithms.Decision
	if !take {
		r.m.PeekN(&s, now, n, &d)
		return d, st
	}
	r.m.AllowN(&s, now, n, &d)
	if !d.Allowed {
		return d, st
	}
	return d, r.save(&s, now)
}

func (r machine[S]) refund(st saved, now time.Duration, n int) saved {
	if st.bytes == "" {
		return st
	}
	s := r.load(st, now)
	r.m.Refund(&s, now, n)
	return r.save(&s, now)
}

func (r machine[S]) resetAfter(st saved, now time.Duration) time.Duration {
	if st.bytes == "" {
		return 0
	}
	s := r.load(st, now)
	return r.m.ResetAfter(&s, now)
}

// ruleOf returns the rule of p, a valid policy of a built-in algorithm.
func ruleOf(p chanlimit.Policy) (rule, error) {
	params := algorithms.Params{Limit: p.Limit, Window: p.Window, Burst: p.Burst}
	alg := p.Algorithm
	if alg == "" {
		alg = chanlimit.DefaultAlgorithm
	}
	switch alg {
	case algorithms.TokenBucketName:
		return machineOf[algorithms.TokenBucketState](algorithms.NewTokenBucket(params))
	case algorithms.GCRAName:
		return machineOf[algorithms.GCRAState](algorithms.NewGCRA(params))
	case algorithms.LeakyBucketName:
		return machineOf[algorithms.GCRAState](algorithms.NewLeakyBucket(params))
	case algorithms.SlidingWindowLogName:
		return machineOf[algorithms.SlidingWindowLogState](algorithms.NewSlidingWindowLog(params))
	case algorithms.FixedWindowName:
		return machineOf[algorithms.FixedWindowState](algorithms.NewFixedWindow(params))
	case algorithms.SlidingWindowCounterName:
		return machineOf[algorithms.SlidingWindowCounterState](algorithms.NewSlidingWindowCounter(params))
	}
	return nil, fmt.Errorf("lincheck: no rule %q", alg)
}

func machineOf[S any, M codecMachine[S]](m M, err error) (rule, error) {
	if err != nil {
		return nil, err
	}
	return machine[S]{m}, nil
}
