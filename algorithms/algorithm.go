// Package algorithms holds chanlimit's rate-limiting algorithms, each a plain
// single-threaded state machine, and the registry that names them.
//
// An algorithm is split in two. The rule (a *TokenBucket, say) is made once
// from Params, is immutable and may be shared. The state of one key (a
// TokenBucketState) is a small value whose zero is an untouched key; it is
// owned by one goroutine, a router partition, and is never locked.
//
// Time is an argument, never read: every method takes now, a point on the
// caller's monotonic timeline, given as the time since an origin the caller
// picks (a router partition starts its timeline at 0 and never lets it go
// back). For a now that does go back, every algorithm grants nothing it
// would not grant at the latest instant it has seen. token_bucket,
// sliding_window_log and fixed_window read such a now as that instant, and
// their waits count from the caller's now, so they stay exact; gcra,
// leaky_bucket and sliding_window_counter keep no such instant and read
// their state as it stood at now, which may refuse more and whose waits are
// then not exact. chanlimit's router never relies on any of this.
//
// Arithmetic is exact: integers only, 128 bits wide where products need it,
// so that Limit per Window is honoured to the nanosecond at any ratio
// (3 per second, 7 per 10 seconds) with no drift.
package algorithms

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Decision is the answer to one request for n units on one key.
type Decision struct {
	// Allowed reports whether the request was admitted. A denied request
	// changed nothing.
	Allowed bool

	// Limit is the N in force for this key: requests allowed per Window.
	Limit int

	// Remaining is the number of single-unit requests that would be
	// allowed right now, after this decision. For the buckets it can exceed
	// Limit when Burst does.
	Remaining int

	// RetryAfter is 0 if the request was allowed. Otherwise the same request
	// is allowed at now + RetryAfter, and not at now + RetryAfter - 1ns (if
	// nothing else happens to the key in between).
	RetryAfter time.Duration

	// ResetAfter is the time until the key is back to its full, untouched
	// state if no more requests arrive.
	ResetAfter time.Duration

	// Delay is, for leaky_bucket only, how long an admitted request waits
	// for its turn. Other algorithms leave it 0.
	Delay time.Duration
}

// Errors shared by every algorithm. package chanlimit exports the same
// values, so errors.Is works whichever package a caller names.
var (
	// ErrInvalidCount is returned for a request of n <= 0 units.
	ErrInvalidCount = errors.New("chanlimit: n must be at least 1")

	// ErrExceedsCapacity is returned for a request of more units than the
	// key can ever hold, so that no wait would let it through.
	ErrExceedsCapacity = errors.New("chanlimit: n exceeds capacity")

	// ErrInvalidConfig is wrapped with the name of the bad field and why.
	ErrInvalidConfig = errors.New("chanlimit: invalid config")

	// ErrUnknownAlgorithm is wrapped with the name asked for and the names
	// that are registered.
	ErrUnknownAlgorithm = errors.New("chanlimit: unknown algorithm")
)

// CheckCount returns ErrInvalidCount if n < 1, ErrExceedsCapacity if n >
// capacity, and nil otherwise.
func CheckCount(n, capacity int) error {
	if n >= 1 && n <= capacity {
		return nil // small enough to inline on every request's path
	}
	return countError(n, capacity)
}

func countError(n, capacity int) error {
	if n < 1 {
		return fmt.Errorf("%w (got %d)", ErrInvalidCount, n)
	}
	return fmt.Errorf("%w: n = %d, capacity %d", ErrExceedsCapacity, n, capacity)
}

// Params configure one algorithm: Limit requests per Window, and for the
// algorithms that take one, a Burst (0 means Limit).
type Params struct {
	Limit  int
	Window time.Duration
	Burst  int
}

// Validate checks what every algorithm needs of Params: Limit > 0,
// Window > 0 and Burst >= 0. Errors wrap ErrInvalidConfig and name the
// field. chanlimit.New validates before it calls a Factory, so a Factory
// only sees Params that pass.
func (p Params) Validate() error {
	switch {
	case p.Limit <= 0:
		return invalid("Limit", "must be > 0 (got %d)", p.Limit)
	case p.Window <= 0:
		return invalid("Window", "must be > 0 (got %v)", p.Window)
	case p.Burst < 0:
		return invalid("Burst", "must be >= 0, where 0 means Limit (got %d)", p.Burst)
	}
	return nil
}

// noBurst rejects a Burst for an algorithm whose capacity is its Limit.
func (p Params) noBurst(algorithm string) error {
	if p.Burst != 0 {
		return invalid("Burst", "%s takes no burst: its capacity is Limit (got Burst %d)", algorithm, p.Burst)
	}
	return nil
}

// burst returns Burst, or Limit when Burst is 0.
func (p Params) burst() int {
	if p.Burst == 0 {
		return p.Limit
	}
	return p.Burst
}

// invalid returns an ErrInvalidConfig naming field and the reason.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// Machine is one algorithm's rule, applied to the state S of one key. The
// zero S is an untouched key, and a state must decide exactly as the zero S
// from the ResetAfter of its latest decision on, until its next grant:
// tables rely on it to forget keys, whenever they get round to it.
// Machines are immutable; a state is owned by one goroutine and passed in
// by pointer.
type Machine[S any] interface {
	// Capacity returns the largest n that AllowN can ever allow.
	Capacity() int

	// AllowN decides a request for n units at now. If it allows, it takes
	// the units from s; if it denies or returns an error, s is unchanged.
	AllowN(s *S, now time.Duration, n int) (Decision, error)

	// PeekN returns what AllowN would, and changes nothing.
	PeekN(s *S, now time.Duration, n int) (Decision, error)

	// Refund gives back n units that the AllowN just before it, at the same
	// now, allowed on s: from then on s decides as if that call had not been
	// made. It is how a partition takes back a grant whose caller stopped
	// waiting.
	Refund(s *S, now time.Duration, n int)
}

// Algorithm is a validated rule, ready to make tables of per-key state. A
// Factory returns one; Keyed builds one from a Machine.
type Algorithm interface {
	// Capacity returns the largest n any key can ever be allowed.
	Capacity() int

	// NewTable returns an empty table of keys under this rule.
	NewTable() Table
}

// catchUp reads a now before latest as latest. It returns the instant to
// decide at and how far that is ahead of now.
func catchUp(now, latest time.Duration) (at, ahead time.Duration) {
	if now >= latest {
		return now, 0
	}
	return latest, since(latest, now)
}

// delayedBy returns d as seen from ahead earlier: every wait it gives grows
// by ahead, saturating at the largest Duration.
func (d Decision) delayedBy(ahead time.Duration) Decision {
	if ahead == 0 {
		return d // the common case, small enough to inline
	}
	return d.extendedBy(ahead)
}

func (d Decision) extendedBy(ahead time.Duration) Decision {
	d.RetryAfter = extend(d.RetryAfter, ahead)
	d.ResetAfter = extend(d.ResetAfter, ahead)
	d.Delay = extend(d.Delay, ahead)
	return d
}

// extend returns wait + ahead for a wait > 0, saturating at the largest
// Duration; no wait stays no wait.
func extend(wait, ahead time.Duration) time.Duration {
	switch {
	case wait <= 0:
		return wait
	case wait > math.MaxInt64-ahead:
		return math.MaxInt64
	}
	return wait + ahead
}

// since returns now - then for now >= then, saturated at the largest
// Duration instead of overflowing.
func since(now, then time.Duration) time.Duration {
	if d := now - then; d >= 0 {
		return d
	}
	return time.Duration(math.MaxInt64)
}
