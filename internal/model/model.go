// Package model holds reference models of chanlimit's built-in
// rate-limiting rules, for tests only: nothing outside tests imports it.
//
// A model is one rule written as plainly as we can, for one key: it keeps
// the full list of what it admitted and computes in math/big, so it is slow
// and exact. It shares no code with package algorithms beyond its Decision
// and Params types, so that a test driving a rule (or a router built on
// rules) and its model through the same schedule, and requiring identical
// answers, checks the rule against a second, independent statement of it.
//
//   - New makes the model of a rule by the name chanlimit registers it
//     under (Names lists them), for Params that the rule's constructor
//     accepts.
//   - A model answers as a router does: an n outside [1, Capacity()] gets
//     ErrInvalidCount or ErrExceedsCapacity and a zero Decision, and
//     changes nothing.
//   - A model's now never goes back: every call takes a now at or after
//     the latest now AllowN was given. (The rules tolerate a now that goes
//     back; a model does not say what they then answer.)
//   - Admitted lists every admission, so that tests can check what the
//     rules promise over any span of time (CheckWindowInvariant,
//     CheckSpacing).
package model

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// Model is a reference model of one rule for one key. It is not safe for
// concurrent use.
type Model interface {
	// AllowN decides a request for n units at now, as the rule's Machine
	// would after a router checked n: an n outside [1, Capacity()] gets
	// the zero Decision and ErrInvalidCount or ErrExceedsCapacity. If it
	// allows, the admission is recorded; if it denies, nothing changes.
	AllowN(now time.Duration, n int) (algorithms.Decision, error)

	// PeekN returns what AllowN would, and changes nothing.
	PeekN(now time.Duration, n int) (algorithms.Decision, error)

	// Refund gives n units back at now, as chanlimit's Router.Refund
	// promises: a bucket gains n tokens, up to its capacity; a window or a
	// log counts n fewer of the units it counts at now, newest first, down
	// to none, and units that have left it are not touched. An untouched
	// key stays untouched. An n below 1 changes nothing.
	Refund(now time.Duration, n int)

	// Remaining returns the single units that would be allowed at now, as
	// the state stands: what a decision at now that is denied reports as
	// its Remaining.
	Remaining(now time.Duration) int

	// ResetAfter returns the time from now until the key is untouched, as
	// the state stands: what a decision at now that is denied reports as
	// its ResetAfter. It is 0 if the key already is untouched.
	ResetAfter(now time.Duration) time.Duration

	// Capacity returns the largest n the rule can ever allow.
	Capacity() int

	// Admitted returns every admission so far, oldest first. The caller
	// must not change it.
	Admitted() []Admission
}

// The errors of an n that a router never passes to a rule. They match
// (errors.Is) nothing of package algorithms or chanlimit: a test maps its
// own sentinels onto these.
var (
	ErrInvalidCount    = errors.New("model: n < 1")
	ErrExceedsCapacity = errors.New("model: n > Capacity()")
)

// The names chanlimit registers the built-in rules under.
const (
	TokenBucket          = algorithms.TokenBucketName
	GCRA                 = algorithms.GCRAName
	LeakyBucket          = algorithms.LeakyBucketName
	SlidingWindowLog     = algorithms.SlidingWindowLogName
	FixedWindow          = algorithms.FixedWindowName
	SlidingWindowCounter = algorithms.SlidingWindowCounterName
)

// Names returns the names of the rules New has a model of.
func Names() []string {
	return []string{TokenBucket, GCRA, LeakyBucket, SlidingWindowLog, FixedWindow, SlidingWindowCounter}
}

// New returns a fresh model, an untouched key, of the named rule for p. p
// must be Params the rule's constructor accepts. New panics for a name
// that is not one of Names: a test asking for the model of another rule is
// a bug in the test. The model of sliding_window_counter is a *Counter.
func New(name string, p algorithms.Params) Model {
	switch name {
	case TokenBucket, GCRA:
		return newBucket(p, false)
	case LeakyBucket:
		return newBucket(p, true)
	case SlidingWindowLog:
		return &slidingLog{limit: p.Limit, window: p.Window}
	case FixedWindow:
		return &fixed{limit: p.Limit, window: p.Window}
	case SlidingWindowCounter:
		return &Counter{limit: p.Limit, window: p.Window}
	}
	panic(fmt.Sprintf("model: no model of %q", name))
}

// Admission is one allowed request: its instant, its units, and how long
// its work waits to start (leaky_bucket's Delay; 0 for other rules).
type Admission struct {
	At, Delay time.Duration
	N         int
}

// Start returns when a's work starts: At + Delay, which may pass the
// largest Duration.
func (a Admission) Start() *big.Int {
	return new(big.Int).Add(big.NewInt(int64(a.At)), big.NewInt(int64(a.Delay)))
}

// UnitsIn returns the units admitted at instants t with from < t <= to.
func UnitsIn(adm []Admission, from, to time.Duration) int {
	units := 0
	for _, a := range adm {
		if a.At > from && a.At <= to {
			units += a.N
		}
	}
	return units
}

// history is the part every model shares: the list of admissions.
type history struct{ list []Admission }

// Admitted returns the admissions, oldest first.
func (h *history) Admitted() []Admission { return h.list }

// admit records n units admitted at now, and delay for their work.
func (h *history) admit(now, delay time.Duration, n int) {
	h.list = append(h.list, Admission{At: now, Delay: delay, N: n})
}

// takeBack takes up to n units off the newest admissions that counted
// says are counted, newest first, and drops an admission left with none.
func (h *history) takeBack(n int, counted func(at time.Duration) bool) {
	for i := len(h.list) - 1; i >= 0 && n > 0; i-- {
		a := &h.list[i]
		if !counted(a.At) {
			continue
		}
		take := min(n, a.N)
		a.N -= take
		n -= take
		if a.N == 0 {
			h.list = slices.Delete(h.list, i, i+1)
		}
	}
}

// copied returns a copy of h that shares nothing with it.
func (h history) copied() history { return history{slices.Clone(h.list)} }

// checkCount returns the error a router gives for n, if any.
func checkCount(n, capacity int) error {
	switch {
	case n < 1:
		return ErrInvalidCount
	case n > capacity:
		return ErrExceedsCapacity
	}
	return nil
}

// fit reports whether count + n <= limit, without overflow.
func fit(count, n, limit int) bool {
	sum := new(big.Int).Add(big.NewInt(int64(count)), big.NewInt(int64(n)))
	return sum.Cmp(big.NewInt(int64(limit))) <= 0
}

func rat(x int64) *big.Rat { return new(big.Rat).SetInt64(x) }

// ceilDur returns x rounded up, as a Duration.
func ceilDur(x *big.Rat) time.Duration {
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return time.Duration(q.Int64())
}

// floorInt returns x >= 0 rounded down.
func floorInt(x *big.Rat) int {
	return int(new(big.Int).Quo(x.Num(), x.Denom()).Int64())
}

// firstWait returns the least w in [1, limit] with ok(now+w), for an ok
// that only turns from false to true as time passes.
func firstWait(now, limit time.Duration, ok func(time.Duration) bool) time.Duration {
	lo, hi := time.Duration(1), limit
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(now + mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
