// Package redislimit is a chanlimit Store in Redis: routers in many
// processes, each with a Store on the same Redis, share one quota.
//
//	st, err := redislimit.NewStore(client, redislimit.Options{})
//	r, err := chanlimit.New(chanlimit.Config{Limit: 100, Window: time.Minute, Store: st})
//
// Each key's state, under all its policies, is one Redis hash, decided
// atomically by one Lua script (decide.lua) that applies chanlimit's
// in-memory rules to whole microseconds: the same decisions as a router
// in memory for the same schedule, every wait rounded up to the next
// microsecond. A partition of the router hands the store its whole burst
// of requests at once, and the store sends it as one pipeline of EVALSHA
// calls: under load, one round trip decides many requests.
//
// The client is the caller's: a single node, Sentinel (failover) or
// Cluster client (each key is one Redis key, so one hash slot). The store
// never closes it.
package redislimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chanlimit/chanlimit"
)

// FailMode is what a router does with a request Redis could not answer:
// FailClosed (the default), FailOpen or FailLocal. README, "Many
// instances: Redis", says which to choose when.
type FailMode = chanlimit.FailMode

// The FailModes.
const (
	FailClosed = chanlimit.FailClosed // the request fails with ErrStoreUnavailable; Allow is false
	FailOpen   = chanlimit.FailOpen   // the request is allowed
	FailLocal  = chanlimit.FailLocal  // the request is decided by the router's own in-memory tables
)

// ErrStoreUnavailable wraps the client's error for a request Redis could
// not answer (FailClosed); it is chanlimit.ErrStoreUnavailable.
var ErrStoreUnavailable = chanlimit.ErrStoreUnavailable

// DefaultPrefix is the prefix of the Redis keys when Options.Prefix is "".
const DefaultPrefix = "chanlimit:"

// Options configures a Store.
type Options struct {
	// Prefix is put before each key to make its Redis key; "" means
	// DefaultPrefix. Routers that share a quota use the same Prefix.
	Prefix string

	// FailMode is what a router does with a request Redis could not
	// answer in time: FailClosed (the default), FailOpen or FailLocal.
	FailMode FailMode

	// Pause is how long the store leaves Redis alone once a round trip
	// has failed for want of a connection: meanwhile it answers every
	// request at once as Redis unavailable (for the FailMode to decide),
	// instead of making each wait for the client's dial timeout. 0 means
	// DefaultPause; below 0, every request tries Redis.
	Pause time.Duration
}

// DefaultPause is Options.Pause when it is 0.
const DefaultPause = 200 * time.Millisecond

// Grace is how long a key's Redis hash is kept past its ResetAfter, on
// Redis's clock: its TTL is set to ResetAfter plus Grace on every
// request that changes it. With Config.Clock set (a clock Redis does not
// share, a test's), the TTL is ResetAfter plus ClockGrace instead, so that
// a state is not lost while that clock runs slower than Redis's.
const (
	Grace      = time.Second
	ClockGrace = time.Hour
)

//go:embed decide.lua
var decideLua string

var decideScript = redis.NewScript(decideLua)

// Store is a chanlimit.Store in Redis. Its methods are safe for
// simultaneous use.
type Store struct {
	client redis.UniversalClient
	prefix string
	mode   FailMode
	pause  time.Duration
	args   sync.Map     // the script's arguments for a set of policies, by its first policy's address: see policyArgs
	cached atomic.Int64 // sets in args

	// pausedUntil is when the pause after a failed round trip ends, on
	// the wall clock (UnixNano; 0: none), and failure the error that
	// started it.
	pausedUntil atomic.Int64
	failure     atomic.Pointer[error]
}

var _ chanlimit.Store = (*Store)(nil)

// NewStore returns a Store on client, which it does not call: it connects
// when the first request comes, so a router with FailOpen or FailLocal
// starts while Redis is down. It returns an error for a nil client or an
// unknown FailMode.
func NewStore(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redislimit: NewStore: the client is nil")
	}
	if opts.FailMode > FailLocal {
		return nil, fmt.Errorf("redislimit: NewStore: unknown %v", opts.FailMode)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	pause := opts.Pause
	if pause == 0 {
		pause = DefaultPause
	}
	return &Store{client: client, prefix: prefix, mode: opts.FailMode, pause: pause}, nil
}

// FailMode returns the store's FailMode.
func (s *Store) FailMode() FailMode { return s.mode }

// Exact is the largest value the script computes with: Lua's numbers are
// doubles, exact for integers up to 2^53, and Check keeps every product
// below 2^50.
const exact = 1 << 50

// algorithms numbers the algorithms the script knows.
var algorithms = map[string]int{
	"token_bucket":           1,
	"gcra":                   2,
	"leaky_bucket":           3,
	"sliding_window_log":     4,
	"sliding_window_counter": 5,
	"fixed_window":           6,
}

// Check returns nil if the script can decide exactly under policies (which
// chanlimit has validated): the six algorithms of chanlimit, a Window of
// whole microseconds, and values whose arithmetic stays exact in Lua.
func (s *Store) Check(policies []chanlimit.Policy) error {
	for _, p := range policies {
		if err := check(p); err != nil {
			return fmt.Errorf("policy %q: %w", p.Name, err)
		}
	}
	return nil
}

func check(p chanlimit.Policy) error {
	alg, ok := algorithms[p.Algorithm]
	if !ok {
		return fmt.Errorf("redislimit has no script for algorithm %q: it has one for each algorithm of chanlimit", p.Algorithm)
	}
	if p.Window%time.Microsecond != 0 {
		return fmt.Errorf("its Window, %v, is not a whole number of microseconds, as times in Redis are", p.Window)
	}
	w := uint64(p.Window / time.Microsecond)
	if w > exact {
		return fmt.Errorf("its Window, %v, is too long for Redis's arithmetic (at most %v)", p.Window, time.Duration(exact)*time.Microsecond)
	}
	limit, capacity := uint64(p.Limit), uint64(p.Limit)
	if p.Burst > 0 {
		capacity = uint64(p.Burst)
	}
	switch alg {
	case 1, 2, 3:
		// A full bucket holds capacity × perToken units.
		if _, perToken := perUnits(limit, w); capacity > exact/perToken {
			return fmt.Errorf("its Burst %d at Limit %d per %v is too large for Redis's arithmetic (Burst × Window / gcd(Limit, Window in µs) must be below 2^50)", capacity, limit, p.Window)
		}
	case 5:
		if limit > exact/w || limit > 1000*w {
			return fmt.Errorf("its Limit %d per %v is too large for Redis's arithmetic (Limit × Window in µs must be below 2^50, and Limit at most Window in ns)", limit, p.Window)
		}
	}
	return nil
}

// perUnits returns the units a bucket refills per microsecond, and the
// units in a token, for limit per w microseconds.
func perUnits(limit, w uint64) (perUs, perToken uint64) {
	a, b := limit, w
	for b != 0 {
		a, b = b, a%b
	}
	return limit / a, w / a
}

// policyArgs returns the script's arguments for policies: for each, its
// algorithm, its field in the key's hash, limit, window (µs), capacity,
// and the bucket's units. Routers hand the store the same slice for a set
// of policies each time, so they are made once per set.
func (s *Store) policyArgs(policies []chanlimit.Policy) []any {
	id := &policies[0]
	if a, ok := s.args.Load(id); ok {
		return a.([]any)
	}
	args := make([]any, 0, 7*len(policies))
	for _, p := range policies {
		w := uint64(p.Window / time.Microsecond)
		capacity := p.Limit
		if p.Burst > 0 {
			capacity = p.Burst
		}
		perUs, perToken := perUnits(uint64(p.Limit), w)
		args = append(args, algorithms[p.Algorithm], p.Algorithm+"|"+p.Name, p.Limit, w, capacity, perUs, perToken)
	}
	if s.cached.Add(1) > 1024 { // sets let go (SetOverride, SetPolicies) are not kept for ever
		s.args.Clear()
		s.cached.Store(0)
	}
	s.args.Store(id, args)
	return args
}

// Key returns the Redis key of key's hash: Prefix, then key.
func (s *Store) Key(key string) string { return s.prefix + key }

// Decide serves ops as one pipeline of EVALSHA calls. Ops whose script
// Redis did not have (NOSCRIPT: a node restarted, failed over, or never
// saw it) are sent again once the script is loaded on every node; an op
// whose round trip failed otherwise gets an error wrapping
// ErrStoreUnavailable, since Redis may or may not have run it.
func (s *Store) Decide(ctx context.Context, ops []chanlimit.StoreOp) {
	if err := s.paused(); err != nil {
		for i := range ops {
			ops[i].Err = err
		}
		return
	}
	cmds := make([]*redis.Cmd, len(ops))
	s.send(ctx, ops, cmds, func(int) bool { return true })
	s.notePause(cmds)
	retry := false
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			retry = true
			continue
		}
		s.answer(&ops[i], cmd)
	}
	if !retry {
		return
	}
	if err := decideScript.Load(ctx, s.client).Err(); err != nil {
		for i, cmd := range cmds {
			if isNoScript(cmd.Err()) {
				ops[i].Err = unavailable(err)
			}
		}
		return
	}
	again := make([]*redis.Cmd, len(ops))
	s.send(ctx, ops, again, func(i int) bool { return isNoScript(cmds[i].Err()) })
	for i, cmd := range again {
		if cmd != nil {
			s.answer(&ops[i], cmd)
		}
	}
}

// paused returns the error that paused the store, while the pause lasts,
// and otherwise nil.
func (s *Store) paused() error {
	until := s.pausedUntil.Load()
	// The pause is on the wall clock, as the client's timeouts are: it
	// spares requests a dial, it decides nothing.
	if until == 0 || time.Now().UnixNano() >= until {
		return nil
	}
	if err := s.failure.Load(); err != nil {
		return fmt.Errorf("%w (Redis was left alone for %v after: %w)", ErrStoreUnavailable, s.pause, *err)
	}
	return nil
}

// notePause pauses the store if every command of a round trip failed for
// want of a connection (no answer from Redis, not even an error).
func (s *Store) notePause(cmds []*redis.Cmd) {
	if s.pause < 0 {
		return
	}
	var failure error
	for _, cmd := range cmds {
		err := cmd.Err()
		var redisErr redis.Error
		if err == nil || errors.As(err, &redisErr) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return // Redis answered, or the caller's context ended first
		}
		failure = err
	}
	s.failure.Store(&failure)
	s.pausedUntil.Store(time.Now().Add(s.pause).UnixNano())
}

// send sends the ops that pick picks as one pipeline, each command into
// cmds.
func (s *Store) send(ctx context.Context, ops []chanlimit.StoreOp, cmds []*redis.Cmd, pick func(int) bool) {
	pipe := s.client.Pipeline()
	for i := range ops {
		if !pick(i) {
			continue
		}
		op := &ops[i]
		now, grace := int64(-1), Grace
		if !op.Now.IsZero() {
			now, grace = op.Now.UnixMicro(), ClockGrace
		}
		policies := s.policyArgs(op.Policies)
		args := make([]any, 0, 5+len(policies))
		args = append(args, int(op.Kind), op.N, now, grace.Milliseconds(), len(op.Policies))
		args = append(args, policies...)
		cmds[i] = pipe.EvalSha(ctx, decideScript.Hash(), []string{s.Key(op.Key)}, args...)
	}
	_, _ = pipe.Exec(ctx) // each command holds its own error
}

// answer writes cmd's answer into op.
func (s *Store) answer(op *chanlimit.StoreOp, cmd *redis.Cmd) {
	vals, err := cmd.Int64Slice()
	switch {
	case err != nil:
		op.Err = unavailable(err)
		return
	case op.Kind == chanlimit.StoreRefund || op.Kind == chanlimit.StoreReset:
		return
	case len(vals) != 1+5*len(op.Policies):
		op.Err = unavailable(fmt.Errorf("redislimit: the script answered %d numbers for %d policies", len(vals), len(op.Policies)))
		return
	}
	op.Decision = combine(op.Policies, vals[0] == 1, vals[1:])
}

// combine returns the decision of the policies whose decisions are vals
// (five numbers each: allowed, remaining, retry after, reset after, delay,
// in µs), as chanlimit combines them: Remaining the smallest, ResetAfter
// (and, allowed, Delay) the largest, RetryAfter the largest wait of the
// policies that denied; the policy that decided is, on a denial, the
// denying one with the longest wait, and otherwise the one with the fewest
// Remaining, the first on a tie.
func combine(policies []chanlimit.Policy, allowed bool, vals []int64) chanlimit.Decision {
	d := chanlimit.Decision{Allowed: allowed, Remaining: int(vals[1])}
	by := -1
	for j := range policies {
		v := vals[5*j : 5*j+5]
		remaining, reset := int(v[1]), micro(v[3])
		d.Remaining = min(d.Remaining, remaining)
		d.ResetAfter = max(d.ResetAfter, reset)
		switch {
		case allowed:
			d.Delay = max(d.Delay, micro(v[4]))
			if by < 0 || remaining < int(vals[5*by+1]) {
				by = j
			}
		case v[0] == 0 && (by < 0 || v[2] > vals[5*by+2]):
			by = j
		}
	}
	if !allowed {
		d.RetryAfter = micro(vals[5*by+2])
	}
	d.Limit, d.Policy = policies[by].Limit, policies[by].Name
	return d
}

// micro returns us microseconds as a Duration.
func micro(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// unavailable returns err wrapping ErrStoreUnavailable.
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
}
