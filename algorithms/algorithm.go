// Package algorithms holds chanlimit's rate-limiting rules, each a plain
// single-threaded state machine.
//
// A rule is split in two. The Machine (a *TokenBucket, say) is made once
// from Params, is immutable and may be shared. The state of one key (a
// TokenBucketState) is a small value whose zero is an untouched key: one
// never seen. A state is owned by one goroutine, a router partition, and
// is never locked.
//
// Time is an argument, never read: every method takes now, a point on the
// caller's monotonic timeline, given as the time since an origin the caller
// picks (a router partition starts its timeline at 0 and never lets it go
// back). For a now that does go back, every rule grants nothing it would
// not grant at the latest instant it has seen. token_bucket,
// sliding_window_log and fixed_window read such a now as that instant, and
// their waits count from the caller's now, so they stay exact; gcra,
// leaky_bucket and sliding_window_counter keep no such instant and read
// their state as it stood at now, which may refuse more and whose waits are
// then not exact. chanlimit's router never decides at a now that goes
// back; it does ask ResetAfter about earlier times (see Expiring).
//
// Arithmetic is exact: integers only, 128 bits wide where products need it,
// so that Limit per Window is honoured to the nanosecond at any ratio
// (3 per second, 7 per 10 seconds) with no drift.
//
// A rule of your own is a Machine too: chanlimit.Register gives it a name
// that Config.Algorithm accepts.
package algorithms

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// The names of the six rules of this package, as chanlimit's
// Config.Algorithm and Policy.Algorithm take them: each is written here
// alone, for the router's registry, the Redis store and the errors.
const (
	TokenBucketName          = "token_bucket"
	GCRAName                 = "gcra"
	LeakyBucketName          = "leaky_bucket"
	FixedWindowName          = "fixed_window"
	SlidingWindowCounterName = "sliding_window_counter"
	SlidingWindowLogName     = "sliding_window_log"
)

// Decision is the answer to one request for n units on one key.
type Decision struct {
	// Allowed reports whether the request was admitted. A denied request
	// changed nothing.
	Allowed bool

	// WouldDeny reports that a dry-run policy of the key would have denied
	// the request (chanlimit.Policy.DryRun): the router sets it; a rule
	// leaves it false. It lies in Allowed's padding: a Decision is no
	// larger for it.
	WouldDeny bool

	// Limit is the N in force for this key: requests allowed per Window;
	// under several policies, the deciding policy's (see Policy).
	Limit int

	// Remaining is the number of single-unit requests that would be
	// allowed right now, after this decision. For the buckets it can exceed
	// Limit when Burst does.
	Remaining int

	// RetryAfter is 0 if the request was allowed. Otherwise the same request
	// is allowed at now + RetryAfter, and not at now + RetryAfter - 1ns (if
	// nothing else happens to the key in between).
	RetryAfter time.Duration

	// ResetAfter is the time until the key is untouched again, as if never
	// seen, if no more requests arrive.
	ResetAfter time.Duration

	// Delay is, for leaky_bucket only, how long an admitted request waits
	// for its turn. Other rules leave it 0.
	Delay time.Duration

	// Policy names the policy that decided, of the key's policies (see
	// chanlimit.Policy): the router sets it; a rule leaves it "".
	Policy string
}

// ErrInvalidParams is matched (errors.Is) by the error of a constructor
// given Params it cannot honour, which names the field and the reason.
var ErrInvalidParams = errors.New("algorithms: invalid params")

// Params configure one rule: Limit requests per Window, and for the rules
// that take one, a Burst (0 means Limit).
type Params struct {
	Limit  int
	Window time.Duration
	Burst  int
}

// Validate checks what every rule needs of Params: Limit > 0, Window > 0
// and Burst >= 0. Its error wraps ErrInvalidParams and names the field.
// The built-in constructors call it first; a rule of your own may too.
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

// noBurst rejects a Burst for a rule whose capacity is its Limit.
func (p Params) noBurst(rule string) error {
	if p.Burst != 0 {
		return invalid("Burst", "%s takes no burst: its capacity is Limit (got Burst %d)", rule, p.Burst)
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

// invalid returns an ErrInvalidParams naming field and the reason.
func invalid(field, format string, args ...any) error {
	return &paramsError{field + ": " + fmt.Sprintf(format, args...)}
}

// paramsError is a field of Params a rule cannot honour, and why.
type paramsError struct{ why string }

func (e *paramsError) Error() string { return "algorithms: " + e.why }

func (e *paramsError) Is(target error) bool { return target == ErrInvalidParams }

// Machine is a rule, applied to the state S of one key. The zero S is an
// untouched key. A Machine is immutable; a state is owned by one goroutine
// and passed in by pointer.
//
// Every n a Machine is given lies in [1, Capacity()]: the caller checks it
// (chanlimit's router answers ErrInvalidCount or ErrExceedsCapacity
// instead), and the built-in rules panic on any other n. A Machine writes
// its answer into a Decision the caller owns, rather than returning one, so
// that the answer is not copied again at every call it passes through.
type Machine[S any] interface {
	// Capacity returns the largest n that AllowN can ever allow.
	Capacity() int

	// AllowN decides a request for n units on s at now and writes the
	// answer into d, every field of it. If it allows, it takes the units
	// from s; if it denies, s is unchanged.
	AllowN(s *S, now time.Duration, n int, d *Decision)

	// PeekN writes into d what AllowN would, and changes nothing.
	PeekN(s *S, now time.Duration, n int, d *Decision)

	// Refund gives back n units to s at now, as far as the rule can: a
	// bucket gains n tokens, up to its capacity; a window or a log counts n
	// fewer of the units it still counts at now, down to none (units that
	// have left it are not touched). It never leaves s with more room than
	// the zero S has, and leaves an untouched key untouched. Right after an
	// AllowN at the same now that allowed n, it undoes that call: s then
	// decides as if it had not been made (how a partition takes back a
	// grant whose caller stopped waiting). Its n lies in [1, Capacity()],
	// as AllowN's does.
	Refund(s *S, now time.Duration, n int)
}

// Expiring is a Machine that can tell when a state is untouched again, so
// that a partition can let go of the key then. Without it, a partition
// takes a state to be untouched from the ResetAfter of its latest grant
// on, and keeps the key until then even if a Refund gave the grant back.
// Every built-in rule is Expiring.
type Expiring[S any] interface {
	// ResetAfter returns the time from now until s is untouched, 0 if it
	// already is. It is the ResetAfter of a denied decision on s at now,
	// and after a decision d at now it is d.ResetAfter until something
	// else happens to s. From then on s must decide exactly as the zero S,
	// until its next grant: a partition lets go of the key, whenever it
	// gets round to it, and one that says 0 early lets the key's requests
	// through as if never seen.
	//
	// now may be earlier than the latest now s was decided at: a partition
	// asks about times up to a grace period behind. The answer must then
	// still point at the same instant: now + ResetAfter(s, now) is when s
	// is untouched, whatever now is asked about.
	ResetAfter(s *S, now time.Duration) time.Duration
}

// StateCodec is a Machine whose states can be saved in a snapshot and
// loaded again, maybe in another process. Times are saved relative to the
// now of the snapshot, so they mean the same on any timeline. A router
// snapshots a rule's keys only if its Machine is both a StateCodec and
// Expiring; every built-in rule is.
type StateCodec[S any] interface {
	// AppendState appends s, as it stands at now, to dst.
	AppendState(dst []byte, s *S, now time.Duration) []byte

	// ParseState sets s to the state src holds, as it stands at now after
	// age more has passed since it was saved. It returns an error, and
	// leaves s as it was, if src is not a state AppendState could have
	// written for this rule.
	ParseState(src []byte, s *S, now, age time.Duration) error
}

// Adopter is a Machine that can take over the state of a key that another
// Machine of its algorithm, made from other Params, kept. It is how a key's
// Params change while the key holds state: the Machine made from the new
// Params adopts the state the old one kept, rather than the key starting
// again untouched. A bucket (token_bucket, gcra) keeps its tokens, whole
// and fractional, capped at the new capacity; a queue (leaky_bucket) keeps
// the work it admitted, which drains when it would have, capped at the
// new capacity; a window
// (fixed_window, sliding_window_log, sliding_window_counter) keeps its log
// or counts, capped at the new Limit, and reads them under the new Limit
// and Window from the moment of the change. Every built-in rule is an
// Adopter. Like the other methods, Adopt is called by the one goroutine
// that owns the state.
type Adopter[S any] interface {
	// Adopt turns s, a state that from kept, into the state this Machine
	// keeps for the same key at now. It reads from and writes s, and
	// changes nothing else.
	//
	// now is on the timeline of from's calls on s. A router never passes
	// a now earlier than the latest one from decided s at; an earlier one
	// is read as each rule reads one in AllowN (see the package doc):
	// token_bucket, sliding_window_log and fixed_window read it as the
	// latest instant they keep, sliding_window_counter a now before its
	// current window's start as that start, and gcra and leaky_bucket read
	// the state as it stood at now (a now before 0 as 0).
	//
	// from must be a Machine of the receiver's own concrete type (a
	// *TokenBucket for a *TokenBucket): only that one's state can be read.
	// Given any other from (a *GCRA to a *TokenBucket or to a
	// *LeakyBucket, a type that wraps the receiver's, a nil pointer), s
	// becomes the zero S: untouched.
	//
	// After Adopt, s is a state the receiver could have reached itself:
	// every bound its arithmetic and its StateCodec rely on holds (a
	// bucket never more than empty; a window's counts, and a log's total
	// and number of entries, never over the new Limit), so that
	// AppendState then ParseState round-trips it and every later decision
	// is in range. s carries over no more than from counted at now: a
	// bucket at most the tokens it held (its units rounded down to the
	// receiver's), a queue no less work than it held (but for the cap), a
	// window at most the units it held. What s then grants
	// is the receiver's rule applied to them.
	//
	// Adopting from a Machine made from equal Params changes no decision at
	// now or later: s may be normalised (a bucket's instant moved to now,
	// what has left the window dropped), but decides exactly as before.
	Adopt(s *S, from Machine[S], now time.Duration)
}

// checkN panics unless 1 <= n <= capacity; see Machine.
func checkN(n, capacity int) {
	if n < 1 || n > capacity {
		badN(n, capacity) // apart, so that checkN inlines
	}
}

func badN(n, capacity int) {
	panic(fmt.Sprintf("algorithms: n = %d outside [1, Capacity() = %d]: the caller must check n", n, capacity))
}

// catchUp reads a now before latest as latest. It returns the instant to
// decide at and how far that is ahead of now.
func catchUp(now, latest time.Duration) (at, ahead time.Duration) {
	if now >= latest {
		return now, 0
	}
	return latest, since(latest, now)
}

// delay makes d as seen from ahead earlier: every wait it gives grows by
// ahead, saturating at the largest Duration.
func (d *Decision) delay(ahead time.Duration) {
	if ahead == 0 {
		return // the common case, small enough to inline
	}
	d.extend(ahead)
}

func (d *Decision) extend(ahead time.Duration) {
	d.RetryAfter = extend(d.RetryAfter, ahead)
	d.ResetAfter = extend(d.ResetAfter, ahead)
	d.Delay = extend(d.Delay, ahead)
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
