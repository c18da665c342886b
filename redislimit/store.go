// Package redislimit is a chanlimit Store in Redis: routers in many
// processes, each with a Store on the same Redis, share one quota.
//
//	st, err := redislimit.NewStore(client, redislimit.Options{})
//	r, err := chanlimit.New(chanlimit.Config{Limit: 100, Window: time.Minute, Store: st})
//
// Each key's state, under all its policies, is one Redis string, decided
// atomically by one Lua script (decide.lua) that applies chanlimit's
// in-memory rules to whole microseconds: the same decisions as a router
// in memory for the same schedule, every wait rounded up to the next
// microsecond. A partition of the router hands the store its whole burst
// of requests at once, and the store sends it as one pipeline of calls of
// the script (as a Redis Function, where Redis has them: function.go),
// with the bursts of other partitions that came while its round trips
// were out (combine.go): under load, one round trip decides many
// requests, however many partitions the router has.
//
// The client is the caller's: a single node, Sentinel (failover) or
// Cluster client (each key is one Redis key, so one hash slot). The store
// never closes it.
package redislimit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// FailMode is what a router does with a request Redis could not answer:
// FailClosed (the default), FailOpen or FailLocal. docs/redis.md, in the
// repository, says which to choose when.
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

	// RoundTrips is the most round trips to Redis the store has out at
	// once: the Decides that come while they are all out wait, and go
	// together in the next that has room, so that under load each round
	// trip decides many requests, whatever the number of the router's
	// partitions. 0 (the default) lets the store find the number itself:
	// it starts at DefaultRoundTrips, then keeps more out while their
	// time does not grow with them, and fewer while fewer decide as many
	// requests a second, up to MaxRoundTrips, so that a Redis whose CPU
	// is the bound gets a few, each deciding many requests, and a distant
	// one as many as still shorten the wait for one (lanes.go;
	// docs/redis.md). A positive value, at most MaxFixedRoundTrips, is a
	// fixed number.
	RoundTrips int
}

// DefaultPause is Options.Pause when it is 0.
const DefaultPause = 200 * time.Millisecond

// Grace is how long a key's Redis string is kept past its ResetAfter, on
// Redis's clock: its TTL is set to ResetAfter plus Grace on every
// request that changes it. With Config.Clock set (a clock Redis does not
// share, a test's), the TTL is ResetAfter plus ClockGrace instead, so that
// a state is not lost while that clock runs slower than Redis's.
const (
	Grace      = time.Second
	ClockGrace = time.Hour
)

// decide.lua's numbers for the request kinds and the algorithms are Go's
// (luaconsts_test.go):
//
//go:generate go test -run TestDecideLuaConstants -update-lua .
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
	args   sync.Map     // the script's argument for each set of policies, by its slice (setKey): see policyArgs
	cached atomic.Int64 // sets in args

	// Each call of the script that changes a key leaves a record of its
	// answers in the first key it changes, in case the client sends the
	// call again (see Decide): named by the store's id and the call's
	// number, kept for replay, and let go by the store's later calls
	// once no retry of it can come (flights).
	id      string
	idArg   any // id, as an argument: made once
	cluster bool
	replay  time.Duration
	flights flights

	// scripts is set once Redis has said it has no functions for this
	// client (function.go): the store calls decide.lua as a script from
	// then on.
	scripts atomic.Bool

	// pausedUntil is when the pause after a failed round trip ends, on
	// the wall clock (UnixNano; 0: none), and failure the error that
	// started it.
	pausedUntil atomic.Int64
	failure     atomic.Pointer[error]

	combiner combiner // the round trips out, and the Decides waiting for one (combine.go)
}

var _ chanlimit.Store = (*Store)(nil)

// NewStore returns a Store on client, which it does not call: it connects
// when the first request comes, so a router with FailOpen or FailLocal
// starts while Redis is down. It returns an error for a nil client or an
// unknown FailMode or a RoundTrips below 0 or above MaxFixedRoundTrips.
func NewStore(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redislimit: NewStore: the client is nil")
	}
	if opts.FailMode > FailLocal {
		return nil, fmt.Errorf("redislimit: NewStore: unknown %v", opts.FailMode)
	}
	if opts.RoundTrips < 0 {
		return nil, fmt.Errorf("redislimit: NewStore: RoundTrips is %d, below 0", opts.RoundTrips)
	}
	if opts.RoundTrips > MaxFixedRoundTrips {
		return nil, fmt.Errorf("redislimit: NewStore: RoundTrips is %d, above %d", opts.RoundTrips, MaxFixedRoundTrips)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	pause := opts.Pause
	if pause == 0 {
		pause = DefaultPause
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails
	_, cluster := client.(*redis.ClusterClient)
	s := &Store{
		client: client, prefix: prefix, mode: opts.FailMode, pause: pause,
		id: hex.EncodeToString(id), cluster: cluster, replay: replayWindow(client),
		combiner: combiner{lanes: newLanes(opts.RoundTrips)},
	}
	s.idArg = s.id
	return s, nil
}

// FailMode returns the store's FailMode.
func (s *Store) FailMode() FailMode { return s.mode }

// Key returns the Redis key that holds key's state: Prefix, then key.
func (s *Store) Key(key string) string { return s.prefix + key }

// Decide serves ops as one pipeline of script calls, each deciding up to
// MaxPerCall of them whose keys share a hash slot (on a Cluster; all of
// them on a single node). Each call is decided once however often the
// client sends it: a call that changes a key leaves its answers there,
// for an attempt of it that comes again to find. Calls are Redis Function
// calls where Redis has them, else script calls (function.go). Calls
// Redis found no function or script for (a node restarted, failed over,
// or had its scripts or functions flushed) ran nothing: they are sent
// again with the script itself, and the library is loaded for the calls
// to come. An op whose
// round trip failed otherwise gets the client's error in its Err, since
// Redis may or may not have run it (the router returns it wrapped in
// ErrStoreUnavailable); so does an op whose key holds a value the script
// did not write, alone: the other keys of its call are decided. An allow,
// a peek or a turn of more units than the key's enforced policies can
// grant at once fails with ErrExceedsCapacity, unsent, as a router
// refuses it.
//
// The store has at most its limit's round trips out at once (lanes.go);
// Decides that come while they are out wait, and go together in the next
// round trip (combine.go). A Decide whose ctx ends while it waits returns
// at once with ctx's error in its ops' Err, and nothing of it is sent.
// Once a round trip carries its ops, it returns with that trip's answers:
// the trip has the deadline of the Decide that makes it, not earlier than
// any it carries, which the client honours if ContextTimeoutEnabled is
// set; otherwise the client's timeouts bound it, as they bound a round
// trip of one Decide. A cancel of ctx does not end a round trip once it
// is out.
func (s *Store) Decide(ctx context.Context, ops []chanlimit.StoreOp) {
	if len(ops) == 0 {
		return
	}
	if err := s.paused(); err != nil {
		for i := range ops {
			ops[i].Err = err
		}
		return
	}
	var checked setKey // the set of the op before, found to be one the script takes
	most := 0          // the most units its enforced policies grant at once
	sent := 0
	for i := range ops {
		op := &ops[i]
		if op.Err != nil { // answered already: not sent
			continue
		}
		if t := op.Now; !t.IsZero() && (t.UnixMicro() < 0 || t.UnixMicro() >= exactTime) {
			op.Err = fmt.Errorf("redislimit: the request's time, %v, is not between 1970 and 2255, as times in Redis are (Config.Clock)", t)
			continue
		}
		switch {
		case len(op.Policies) == 0:
			op.Err = errors.New("redislimit: a request under no policy")
		case keyOf(op.Policies) != checked:
			if set := s.policyArgs(op.Policies); set.err != nil {
				op.Err = set.err
			} else {
				checked, most = keyOf(op.Policies), set.most
			}
		}
		if op.Err == nil && op.N > most && (op.Kind == chanlimit.StoreAllow || op.Kind == chanlimit.StorePeek || op.Kind == chanlimit.StoreTurn) {
			// A router refuses it first; the script could wait for it for ever.
			op.Err = fmt.Errorf("redislimit: %w: %d units, where the key's policies hold %d", chanlimit.ErrExceedsCapacity, op.N, most)
		}
		if op.Err == nil {
			sent++
		}
	}
	if sent > 0 {
		s.combine(ctx, ops)
	}
}

// roundTrip serves ops, checked, in one round trip: a pipeline of the
// script's calls. It returns the time the pipeline took to come back
// (answered, failed or timed out: a Redis too busy to answer in time is
// what the limit on round trips out is to see), or -1 if it was not
// sent: the time a round trip takes, for that limit (lanes.go).
func (s *Store) roundTrip(ctx context.Context, ops []chanlimit.StoreOp) (rtt time.Duration) {
	if err := s.paused(); err != nil { // it may have begun while they waited
		for i := range ops {
			if ops[i].Err == nil {
				ops[i].Err = err
			}
		}
		return -1
	}
	calls := s.calls(ops)
	if len(calls) == 0 {
		return -1
	}
	s.build(ops, calls)
	how := byFunction
	if s.scripts.Load() {
		how = byHash
	}
	start := clock.Real().Now()
	s.send(ctx, calls, how)
	rtt = clock.Real().Since(start)
	s.notePause(calls)
	var again []call // those Redis ran nothing of, by value: calls keeps every call, for land
	var at []int
	load := false
	for k, c := range calls {
		err := c.cmd.Err()
		switch {
		case err == nil:
			s.answer(ops, c)
			continue
		case how == byFunction && noFCALL(err):
			s.noFunctions(err)
		case how == byFunction && isNoFunction(err):
			load = true
		case !isNoScript(err):
			s.answer(ops, c)
			continue
		}
		again, at = append(again, c), append(at, k)
	}
	if load && !s.scripts.Load() { // for the calls to come
		s.noFunctions(s.loadLibrary(ctx))
	}
	if len(again) > 0 {
		s.send(ctx, again, byScript) // EVAL: it finds its script however often scripts or functions are flushed
		for k, c := range again {
			s.answer(ops, c)
			calls[at[k]] = c
		}
	}
	s.flights.land(calls, s.replay)
	return rtt
}

// paused returns the error that paused the store, while the pause lasts,
// and otherwise nil.
func (s *Store) paused() error {
	until := s.pausedUntil.Load()
	// The pause is on the wall clock, as the client's timeouts are: it
	// spares requests a dial, it decides nothing.
	if until == 0 || clock.Real().Now().UnixNano() >= until {
		return nil
	}
	if err := s.failure.Load(); err != nil {
		return fmt.Errorf("redislimit: Redis was left alone for %v after: %w", s.pause, *err)
	}
	return nil
}

// notePause pauses the store if every call of a round trip failed for
// want of a connection (no answer from Redis, not even an error).
func (s *Store) notePause(calls []call) {
	if s.pause < 0 {
		return
	}
	var failure error
	for _, c := range calls {
		err := c.cmd.Err()
		if err == nil || answered(err) {
			return // Redis answered, or the caller's context ended first
		}
		failure = err
	}
	failed := failure // failure itself stays on the stack: a call that answered allocates nothing
	s.failure.Store(&failed)
	s.pausedUntil.Store(clock.Real().Now().Add(s.pause).UnixNano())
}

// answered reports whether err, a call's, is Redis's answer, or the
// caller's context ending first.
func answered(err error) bool {
	var redisErr redis.Error
	return errors.As(err, &redisErr) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// send sends calls as one pipeline, each as how says.
func (s *Store) send(ctx context.Context, calls []call, how callKind) {
	pipe := s.client.Pipeline()
	for k := range calls {
		c := &calls[k]
		switch how {
		case byFunction:
			c.cmd = pipe.FCall(ctx, decideFunction, c.keys, c.args...)
		case byHash:
			c.cmd = pipe.EvalSha(ctx, decideScript.Hash(), c.keys, c.args...)
		default:
			c.cmd = pipe.Eval(ctx, decideLua, c.keys, c.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // each command holds its own error
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }
