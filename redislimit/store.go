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
// of requests at once, and the store sends it as one pipeline of EVALSHA
// calls: under load, one round trip decides many requests.
//
// The client is the caller's: a single node, Sentinel (failover) or
// Cluster client (each key is one Redis key, so one hash slot). The store
// never closes it.
package redislimit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
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

// Grace is how long a key's Redis string is kept past its ResetAfter, on
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

	// Each call of the script that changes a key leaves a record of its
	// answers in the first key it changes, in case the client sends the
	// call again (see Decide): named by the store's id and the call's
	// number, kept for replay, and let go by the store's later calls
	// once no retry of it can come (flights).
	id      string
	cluster bool
	replay  time.Duration
	flights flights

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
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails
	_, cluster := client.(*redis.ClusterClient)
	return &Store{
		client: client, prefix: prefix, mode: opts.FailMode, pause: pause,
		id: hex.EncodeToString(id), cluster: cluster, replay: replayWindow(client),
	}, nil
}

// FailMode returns the store's FailMode.
func (s *Store) FailMode() FailMode { return s.mode }

// Exact is the largest value the script computes with: Lua's numbers are
// doubles, exact for integers up to 2^53, and Check keeps every product
// below 2^50.
const exact = 1 << 50

// exactTime bounds the times the script takes (µs since 1970): a double
// holds integers exactly below 2^53.
const exactTime = 1 << 53

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
	case 4, 6:
		// The counts, as the log's entries, are at most the Limit.
		if limit > exact {
			return fmt.Errorf("its Limit %d is too large for Redis's arithmetic (at most 2^50)", limit)
		}
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

// policySet is the script's arguments for a set of policies: its numbers
// (how many policies, then for each its algorithm, limit, window in µs,
// capacity, the bucket's units refilled per µs and units in a token) and
// its fields ("algorithm|name"). Routers hand the store the same slice
// for a set of policies each time, so they are made once per set.
type policySet struct {
	nums   []float64
	fields []any
}

// policyArgs returns the script's arguments for policies.
func (s *Store) policyArgs(policies []chanlimit.Policy) *policySet {
	id := &policies[0]
	if a, ok := s.args.Load(id); ok {
		return a.(*policySet)
	}
	set := &policySet{nums: make([]float64, 0, 1+6*len(policies))}
	set.nums = append(set.nums, float64(len(policies)))
	for _, p := range policies {
		w := uint64(p.Window / time.Microsecond)
		capacity := p.Limit
		if p.Burst > 0 {
			capacity = p.Burst
		}
		perUs, perToken := perUnits(uint64(p.Limit), w)
		set.nums = append(set.nums, float64(algorithms[p.Algorithm]), float64(p.Limit), float64(w), float64(capacity), float64(perUs), float64(perToken))
		set.fields = append(set.fields, p.Algorithm+"|"+p.Name)
	}
	if s.cached.Add(1) > 1024 { // sets let go (SetOverride, SetPolicies) are not kept for ever
		s.args.Clear()
		s.cached.Store(0)
	}
	s.args.Store(id, set)
	return set
}

// MaxPerCall is the most requests one call of the script decides: a
// burst larger than that goes as several calls in its pipeline, so that
// no call holds Redis long.
const MaxPerCall = 128

// maxAnswers is the most numbers one call answers (1 + 6 per policy for
// each allow or peek): Lua moves at most about 8,000 values at once.
const maxAnswers = 4096

// answers returns how many numbers the script answers op with.
func answers(op *chanlimit.StoreOp) int {
	if op.Kind == chanlimit.StoreRefund || op.Kind == chanlimit.StoreReset {
		return 0
	}
	return 1 + perPolicy*len(op.Policies)
}

// perPolicy is how many numbers the script answers for each policy of a
// request: allowed, remaining, retry after, reset after, delay (µs), and
// by how many ns the retry after was rounded up.
const perPolicy = 6

// call is one script call of a pipeline: the requests it decides, by
// their index in the burst, and its number among the store's calls.
type call struct {
	ops     []int
	answers int // the numbers the script answers them with
	seq     uint64
	keys    []string
	args    []any
	cmd     *redis.Cmd
}

// ReplayWindow is how long Redis keeps a call's answers, in case the
// client sends the call again (go-redis sends a pipeline again after a
// read timeout, and a stalled Redis runs every attempt once it wakes),
// for a client whose options the store cannot read. For a redis.Client
// or redis.ClusterClient it is as long as the client could send a call
// again after it first sent it: its attempts' timeouts and the backoffs
// between them (58 s with go-redis's defaults). The key that holds a
// call's answers lives at least that long; the answers go with the
// store's next call on the key once no attempt of theirs can come.
const ReplayWindow = time.Minute

// replayWindow returns how long client may send a call again after it
// first sent it: its first attempt's write and read timeouts, then for
// each retry a backoff and a dial, write and read; at least a second.
func replayWindow(client redis.UniversalClient) time.Duration {
	var retries int
	var dial, write, read, backoff time.Duration
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		retries, dial, write, read, backoff = o.MaxRetries, o.DialTimeout, o.WriteTimeout, o.ReadTimeout, o.MaxRetryBackoff
	case *redis.ClusterClient:
		o := c.Options()
		retries, dial, write, read, backoff = o.MaxRetries, o.DialTimeout, o.WriteTimeout, o.ReadTimeout, o.MaxRetryBackoff
	default:
		return ReplayWindow
	}
	dial, write, read, backoff = max(dial, 0), max(write, 0), max(read, 0), max(backoff, 0)
	retries = max(retries, 0)
	window := write + read + time.Duration(retries)*(backoff+dial+write+read)
	return max(window, time.Second)
}

// Key returns the Redis key that holds key's state: Prefix, then key.
func (s *Store) Key(key string) string { return s.prefix + key }

// Decide serves ops as one pipeline of script calls, each deciding up to
// MaxPerCall of them whose keys share a hash slot (on a Cluster; all of
// them on a single node). Each call is decided once however often the
// client sends it: a call that changes a key leaves its answers there,
// for an attempt of it that comes again to find. Calls whose script Redis
// did not have (NOSCRIPT: a node restarted, failed over, or had its
// scripts flushed) are sent again with the script itself. An op whose
// round trip failed otherwise gets an error wrapping ErrStoreUnavailable,
// since Redis may or may not have run it; so does an op whose key holds
// a value the script did not write, alone: the other keys of its call
// are decided.
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
	for i := range ops {
		if t := ops[i].Now; !t.IsZero() && (t.UnixMicro() < 0 || t.UnixMicro() >= exactTime) {
			ops[i].Err = unavailable(fmt.Errorf("redislimit: the request's time, %v, is not between 1970 and 2255, as times in Redis are (Config.Clock)", t))
		}
	}
	calls := s.calls(ops)
	if len(calls) == 0 {
		return
	}
	s.build(ops, calls)
	s.send(ctx, calls, false)
	s.notePause(calls)
	var again []call // those answered NOSCRIPT, by value: calls keeps every call, for land
	var at []int
	for k, c := range calls {
		if isNoScript(c.cmd.Err()) {
			again, at = append(again, c), append(at, k)
			continue
		}
		s.answer(ops, c)
	}
	if len(again) > 0 {
		s.send(ctx, again, true) // EVAL: no NOSCRIPT, however often scripts are flushed
		for k, c := range again {
			s.answer(ops, c)
			calls[at[k]] = c
		}
	}
	s.flights.land(calls, s.replay)
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

// notePause pauses the store if every call of a round trip failed for
// want of a connection (no answer from Redis, not even an error).
func (s *Store) notePause(calls []call) {
	if s.pause < 0 {
		return
	}
	var failure error
	for _, c := range calls {
		err := c.cmd.Err()
		var redisErr redis.Error
		if err == nil || errors.As(err, &redisErr) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return // Redis answered, or the caller's context ended first
		}
		failure = err
	}
	s.failure.Store(&failure)
	s.pausedUntil.Store(time.Now().Add(s.pause).UnixNano())
}

// calls groups ops into the script's calls: in order, by hash slot on a
// Cluster, at most MaxPerCall a call, and at most maxAnswers numbers.
func (s *Store) calls(ops []chanlimit.StoreOp) []call {
	var calls []call
	open := map[uint16]int{} // the call of each slot still open to more ops; one slot on a single node
	for i := range ops {
		if ops[i].Err != nil { // answered already: not sent
			continue
		}
		var slot uint16
		if s.cluster {
			slot = hashSlot(s.Key(ops[i].Key))
		}
		c, ok := open[slot]
		if !ok || len(calls[c].ops) == MaxPerCall || calls[c].answers+answers(&ops[i]) > maxAnswers {
			c = len(calls)
			calls = append(calls, call{})
			open[slot] = c
		}
		calls[c].ops = append(calls[c].ops, i)
		calls[c].answers += answers(&ops[i])
	}
	return calls
}

// send sends calls as one pipeline: by the script's hash (EVALSHA), or,
// if eval, with the script itself (EVAL).
func (s *Store) send(ctx context.Context, calls []call, eval bool) {
	pipe := s.client.Pipeline()
	for k := range calls {
		c := &calls[k]
		if eval {
			c.cmd = pipe.Eval(ctx, decideLua, c.keys, c.args...)
		} else {
			c.cmd = pipe.EvalSha(ctx, decideScript.Hash(), c.keys, c.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // each command holds its own error
}

// build numbers calls, and writes into each its keys and the script's
// arguments: the numbers, packed as little-endian doubles in one string
// (every one is an integer below 2^53, exact in a double), then the
// store's id, the call's number and the policies' fields.
func (s *Store) build(ops []chanlimit.StoreOp, calls []call) {
	first, low, keep := s.flights.take(len(calls))
	for k := range calls {
		c := &calls[k]
		c.seq = first + uint64(k)
		c.keys = make([]string, len(c.ops))
		nums := make([]float64, 0, 6+len(keep)+8+4*len(c.ops))
		nums = append(nums, float64(Grace.Milliseconds()), float64(ClockGrace.Milliseconds()), float64(s.replay.Milliseconds()), float64(low), float64(len(keep)))
		for _, seq := range keep {
			nums = append(nums, float64(seq))
		}
		nums = append(nums, 0)
		nsets := len(nums) - 1
		args := []any{nil, s.id, strconv.FormatUint(c.seq, 10)}
		sets := map[*chanlimit.Policy]int{}
		for j, i := range c.ops {
			op := &ops[i]
			c.keys[j] = s.Key(op.Key)
			if _, ok := sets[&op.Policies[0]]; !ok {
				sets[&op.Policies[0]] = len(sets) + 1
				set := s.policyArgs(op.Policies)
				nums = append(nums, set.nums...)
				args = append(args, set.fields...)
			}
		}
		nums[nsets] = float64(len(sets))
		for _, i := range c.ops {
			op := &ops[i]
			now := int64(-1)
			if !op.Now.IsZero() {
				now = op.Now.UnixMicro()
			}
			nums = append(nums, float64(op.Kind), float64(op.N), float64(sets[&op.Policies[0]]), float64(now))
		}
		blob := make([]byte, 8*len(nums))
		for i, v := range nums {
			binary.LittleEndian.PutUint64(blob[8*i:], math.Float64bits(v))
		}
		args[0] = blob
		c.args = args
	}
}

// answer writes the answers of c's ops into them.
func (s *Store) answer(ops []chanlimit.StoreOp, c call) {
	vals, err := c.cmd.Int64Slice()
	if err == nil && len(vals) == 0 {
		err = errors.New("redislimit: the script answered nothing")
	}
	if err != nil {
		for _, i := range c.ops {
			ops[i].Err = unavailable(err)
		}
		return
	}
	vals = vals[1:] // whether the call changed a key
	for _, i := range c.ops {
		op := &ops[i]
		if op.Kind == chanlimit.StoreRefund || op.Kind == chanlimit.StoreReset {
			continue
		}
		if len(vals) > 0 && vals[0] == -1 {
			op.Err = unavailable(fmt.Errorf("redislimit: the Redis key %q holds a value that is not a state the script wrote (Reset drops it)", s.Key(op.Key)))
			vals = vals[1:]
			continue
		}
		size := 1 + perPolicy*len(op.Policies)
		if len(vals) < size {
			op.Err = unavailable(fmt.Errorf("redislimit: the script answered too few numbers for %d requests", len(c.ops)))
			continue
		}
		op.Decision = combine(op.Policies, vals[0] == 1, vals[1:size])
		vals = vals[size:]
	}
}

// flights numbers a store's calls and knows which of them the client
// may still send again: those out (their pipeline has not returned), and
// for ReplayWindow those it gave up on, which Redis may yet run. The
// script lets go of the store's records of the others. The mutex guards
// this bookkeeping of the client's calls, never a key's state, which is
// Redis's.
type flights struct {
	mu   sync.Mutex
	next uint64
	out  []uint64  // the calls out, oldest first
	kept []givenUp // the calls given up on, oldest first
	args []uint64  // kept's numbers, as the script's arguments
}

type givenUp struct {
	seq   uint64
	until time.Time
}

// maxKept is the most calls given up on whose records are kept.
const maxKept = 256

// take numbers n calls, first to first+n-1, and returns with them the
// lowest call out (theirs included) and the calls given up on below it.
func (f *flights) take(n int) (first, low uint64, keep []uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first = f.next + 1
	for k := range n {
		f.out = append(f.out, first+uint64(k))
	}
	f.next += uint64(n)
	now := time.Now() // the client's retries are on the wall clock
	drop := 0
	for drop < len(f.kept) && now.After(f.kept[drop].until) {
		drop++
	}
	if drop > 0 {
		f.kept = append(f.kept[:0], f.kept[drop:]...)
		f.args = nil
	}
	if f.args == nil && len(f.kept) > 0 {
		for _, g := range f.kept {
			f.args = append(f.args, g.seq)
		}
	}
	low = first
	if len(f.out) > 0 {
		low = f.out[0]
	}
	return first, low, f.args // f.args is replaced, never changed: the caller may keep it
}

// land notes that the pipeline of calls has returned: their client sends
// them no more, but a call that failed without an answer from Redis may
// have run, and an attempt of it may run late, for replay.
func (f *flights) land(calls []call, replay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	until := time.Now().Add(replay)
	for _, c := range calls {
		if k := slices.Index(f.out, c.seq); k >= 0 {
			f.out = slices.Delete(f.out, k, k+1)
		}
		var redisErr redis.Error
		if err := c.cmd.Err(); err != nil && !errors.As(err, &redisErr) {
			f.kept = append(f.kept, givenUp{seq: c.seq, until: until})
			f.args = nil
		}
	}
	if len(f.kept) > maxKept {
		f.kept = append(f.kept[:0], f.kept[len(f.kept)-maxKept:]...)
	}
}

// combine returns the decision of the policies whose decisions are vals
// (perPolicy numbers each), as chanlimit combines them: Remaining the
// smallest, ResetAfter (and, allowed, Delay) the largest, RetryAfter the
// largest wait of the policies that denied; the policy that decided is,
// on a denial, the denying one with the longest wait, and otherwise the
// one with the fewest Remaining, the first on a tie. The longest wait is
// the in-memory rules' (their nanoseconds), not the microseconds they
// round up to: waits of 2.5 µs and 3 µs both say 3 µs, and the second is
// the longer.
func combine(policies []chanlimit.Policy, allowed bool, vals []int64) chanlimit.Decision {
	d := chanlimit.Decision{Allowed: allowed, Remaining: int(vals[1])}
	by := -1
	for j := range policies {
		v := vals[perPolicy*j : perPolicy*j+perPolicy]
		remaining, reset := int(v[1]), micro(v[3])
		d.Remaining = min(d.Remaining, remaining)
		d.ResetAfter = max(d.ResetAfter, reset)
		switch {
		case allowed:
			d.Delay = max(d.Delay, micro(v[4]))
			if by < 0 || remaining < int(vals[perPolicy*by+1]) {
				by = j
			}
		case v[0] == 0 && (by < 0 || longer(v, vals[perPolicy*by:])):
			by = j
		}
	}
	if !allowed {
		d.RetryAfter = micro(vals[perPolicy*by+2])
	}
	d.Limit, d.Policy = policies[by].Limit, policies[by].Name
	return d
}

// longer reports whether the wait a policy answered in a is longer than
// the one in b, in nanoseconds: its microseconds, less what was rounded
// up.
func longer(a, b []int64) bool {
	if a[2] != b[2] {
		return a[2] > b[2]
	}
	return a[5] < b[5]
}

// micro returns us microseconds as a Duration.
func micro(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// unavailable returns err wrapping ErrStoreUnavailable.
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
}

// hashSlot returns the Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the part between the first { and the next }, if not empty),
// or of the whole key, modulo 16384.
func hashSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
