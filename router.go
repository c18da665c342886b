// Package chanlimit is a per-key rate limiter built the CSP way.
//
// A Router splits keys (users, API keys, IPs, tenants) among partitions by
// hash. Each partition is one goroutine that owns its keys' state and serves
// requests one at a time from a bounded mailbox, answering on a reply
// channel; nothing is locked, because nothing is shared. The rules (package
// algorithms) are plain single-threaded state machines with exact integer
// arithmetic, and time comes from an injected clock (package clock), so a
// test can use clock.Fake and move time only when it chooses to.
//
// Every call returns: with a Decision, with ErrClosed once the router is
// closed (also for calls racing with Close), or with the context's error if
// it is done before the call is answered. A call whose context ends before
// it is answered uses up no quota. After Close returns, no goroutine of the
// router is left.
//
// Code the router calls but does not own (an algorithm, its constructor, a
// Clock) is supervised: a panic in it fails what it was doing, with
// ErrAlgorithmPanic or ErrClockPanic (ErrInvalidConfig in New), and
// nothing else. docs/keys.md says what each case costs.
package chanlimit

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/storeloop"
	"github.com/chanlimit/chanlimit/internal/storetable"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// Config configures a Router: its policies, either as Policies or, for
// one policy, as the single fields Algorithm, Limit, Window and Burst
// (the policy named DefaultPolicyName); every other field has a default.
type Config struct {
	// Algorithm is a registered algorithm name (RegisteredAlgorithms lists
	// them); "" means DefaultAlgorithm, "token_bucket".
	Algorithm string

	// Limit is N, the requests allowed per Window. It must be > 0, unless
	// Policies are given instead.
	Limit int

	// Window is T. It must be > 0, unless Policies are given instead.
	Window time.Duration

	// Burst is the capacity of each key's bucket for the bucket algorithms
	// (token_bucket, gcra, leaky_bucket; 0 means Limit). Setting it for an
	// algorithm whose capacity is its Limit is an ErrInvalidConfig.
	Burst int

	// Partitions is the number of partition goroutines; 0 means
	// DefaultPartitions(), or fewer if MailboxSize is so large that
	// Partitions × MailboxSize would pass MaxQueued, or if MaxKeys is
	// smaller. At most MaxPartitions. More partitions spread contention
	// among many callers; fewer make batches cheaper (docs/performance.md
	// measures both).
	Partitions int

	// MailboxSize is the number of requests each partition queues before
	// callers wait to send; 0 means DefaultMailboxSize. At most
	// MaxMailboxSize, and Partitions × MailboxSize at most MaxQueued: the
	// mailboxes are allocated up front.
	MailboxSize int

	// Clock is where the router reads the time; nil means clock.Real().
	Clock clock.Clock

	// MaxKeys caps the keys held across all partitions; 0 means no cap.
	// Idle keys are let go anyway (docs/keys.md), so the cap matters only
	// against a flood of new keys.
	//
	// Each partition holds at most its share: MaxKeys / Partitions, the
	// remainder spread over the first partitions. When a key's partition
	// is full, the new key takes the place of an idle key of that
	// partition if there is one; otherwise it is refused with
	// ErrTooManyKeys (Allow returns false), and no key held is forgiven, so
	// a flood of random keys can never reset anyone's quota. With EvictLRU
	// it takes the place of the partition's least recently used key
	// instead. Shares keep that rule exact without any partition reading
	// another's keys; the price is that a key can be refused while other
	// partitions have room (keys spread evenly by hash, so by little).
	// Partitions above MaxKeys is an ErrInvalidConfig.
	MaxKeys int

	// EvictLRU chooses availability over strictness when MaxKeys is
	// reached: the least recently used key of the new key's partition is
	// evicted, with its state, and the new key is decided. A key evicted
	// this way starts afresh, so a flood of random keys can reset the
	// quota of a key that has been quiet for a while. It needs MaxKeys.
	EvictLRU bool

	// MaxKeyBytes is the length of the longest key accepted, in bytes; 0
	// means DefaultMaxKeyBytes. A longer key is refused with ErrKeyTooLong
	// before it reaches a partition.
	MaxKeyBytes int

	// Policies are the limits every key is under, all at once, in place
	// of the single fields (setting both is an ErrInvalidConfig). Names
	// are unique; SetPolicies replaces them while the router runs, and
	// SetOverride gives one key policies of its own.
	Policies []Policy

	// MaxOverrides caps the keys with an override (SetOverride) held at
	// once, across all partitions; 0 means no cap. Keys with an override
	// count against it, not against MaxKeys.
	MaxOverrides int

	// MaxWaiters caps the callers waiting on one key (WaitN) at once; 0
	// means no cap. A WaitN beyond it fails at once with
	// ErrTooManyWaiters.
	MaxWaiters int

	// Store keeps the keys' state outside the router, for routers in many
	// processes to share one quota (package redislimit); nil keeps it in
	// the partitions' memory. Every method works the same with a Store but
	// Snapshot and Restore, which return an error wrapping
	// errors.ErrUnsupported; docs/redis.md says what
	// holds across processes. The store decides on its own clock unless
	// Clock is set.
	Store Store

	// Observe, if not nil, is told of each request the router answers,
	// on the caller's goroutine, after the answer came and before the
	// call returns (Event says which calls, and when). It must not block.
	// A panic in it is recovered and counted in Stats.ObservePanics: the
	// call returns its answer as if nothing happened. LogDecisions makes
	// one that logs; nil costs nothing.
	Observe func(ctx context.Context, e Event)
}

// Limits and defaults of Config.
const (
	DefaultAlgorithm   = algorithms.TokenBucketName
	DefaultMailboxSize = 64
	MaxPartitions      = 1 << 16
	MaxMailboxSize     = 1 << 16
	MaxQueued          = 1 << 20 // requests queued across all partitions
	DefaultMaxKeyBytes = 4 << 10
)

// DefaultPartitions returns the number of partitions a Config with
// Partitions 0 gets: one per processor Go may use (GOMAXPROCS), at most
// MaxPartitions.
func DefaultPartitions() int { return min(runtime.GOMAXPROCS(0), MaxPartitions) }

// Decision is the answer to one request; see algorithms.Decision for what
// each field means.
type Decision = algorithms.Decision

// Request is one request of a batch: N units on Key.
type Request struct {
	Key string
	N   int
}

// Router is a per-key rate limiter. It is safe for simultaneous use by many
// goroutines. The zero Router is not usable: call New.
type Router struct {
	parts          []*actor.Partition
	maxKeyBytes    int
	maxKeys        int
	evict          bool
	maxOverrides   int
	clock          clock.Clock
	policies       atomic.Pointer[keytable.Set] // the router's: the partitions' once SetPolicies has switched them all
	overrides      atomic.Int64                 // keys with an override, counted by their partitions
	panicked       atomic.Uint64                // panics met outside the partitions: while Restore loads
	store          Store                        // Config.Store
	observe        func(context.Context, Event) // Config.Observe
	observePanics  atomic.Uint64                // its panics, recovered
	closeOnce      sync.Once
	batches        sync.Pool     // of *batch
	quotas         sync.Pool     // of *keytable.Quota, for a partition to fill in (quota.go)
	policiesToken  chan struct{} // held by SetPolicies, Snapshot and Restore while they run (takeToken)
	overridesToken chan struct{} // held by SetOverride, ClearOverride and Restore while they run (takeToken)
}

// New validates cfg and starts the router's partitions. Every invalid field
// is an error wrapping ErrInvalidConfig that names the field and the reason;
// an algorithm or clock that panics while New sets it up is reported the
// same way, and New then leaves no goroutine behind.
func New(cfg Config) (*Router, error) {
	partitions, mailbox, err := shape(cfg)
	if err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	var origin time.Time
	if err := supervise.Call(ErrClockPanic, func() { origin = clk.Now() }); err != nil {
		return nil, fmt.Errorf("%w: Clock: %w", ErrInvalidConfig, err)
	}
	policies, err := policiesOf(cfg)
	if err != nil {
		return nil, err
	}
	field := "Policies"
	if len(cfg.Policies) == 0 {
		field = "" // the single fields: errors name just the field
	}
	set, err := compile(field, policies)
	if err != nil {
		return nil, err
	}
	if err := checkStore(cfg.Store, field, policiesFrom(set)); err != nil {
		return nil, err
	}

	r := &Router{
		parts:          make([]*actor.Partition, partitions),
		maxKeyBytes:    cmp.Or(cfg.MaxKeyBytes, DefaultMaxKeyBytes),
		maxKeys:        cfg.MaxKeys,
		evict:          cfg.EvictLRU,
		maxOverrides:   cfg.MaxOverrides,
		clock:          clk,
		store:          cfg.Store,
		observe:        cfg.Observe,
		policiesToken:  make(chan struct{}, 1),
		overridesToken: make(chan struct{}, 1),
	}
	r.policies.Store(set)
	r.batches.New = func() any {
		return &batch{
			items:   make([][]keytable.Item, partitions),
			at:      make([][]int, partitions),
			pending: make([]actor.Pending, partitions),
		}
	}
	r.quotas.New = func() any { return new(keytable.Quota) }
	for i := range r.parts {
		keys := keytable.NewKeys(set)
		keys.Bound(r.keyLimit(i))
		if cfg.Store == nil {
			r.parts[i] = actor.Start(keys, clk, origin, mailbox, cfg.MaxWaiters)
			continue
		}
		table := storetable.New(decider{cfg.Store}, storetable.Mode(cfg.Store.FailMode()), keys, cfg.Clock != nil, origin)
		r.parts[i] = storeloop.Start(table, clk, origin, mailbox, cfg.MaxWaiters)
	}
	return r, nil
}

// shape checks the fields of cfg that shape the router, and returns its
// partitions and mailbox size.
func shape(cfg Config) (partitions, mailbox int, err error) {
	partitions, mailbox = cfg.Partitions, cfg.MailboxSize
	switch {
	case partitions < 0 || partitions > MaxPartitions:
		return 0, 0, fmt.Errorf("%w: Partitions: must be between 0 (the default) and %d (got %d)", ErrInvalidConfig, MaxPartitions, partitions)
	case mailbox < 0 || mailbox > MaxMailboxSize:
		return 0, 0, fmt.Errorf("%w: MailboxSize: must be between 0 (the default) and %d (got %d)", ErrInvalidConfig, MaxMailboxSize, mailbox)
	}
	if mailbox == 0 {
		mailbox = DefaultMailboxSize
	}
	if partitions == 0 {
		// The default never makes a config invalid, whatever the machine.
		partitions = min(DefaultPartitions(), MaxQueued/mailbox)
		if cfg.MaxKeys > 0 {
			partitions = min(partitions, cfg.MaxKeys)
		}
	}
	switch {
	case int64(partitions)*int64(mailbox) > MaxQueued:
		return 0, 0, fmt.Errorf("%w: Partitions × MailboxSize: must be at most %d (got %d × %d)", ErrInvalidConfig, MaxQueued, partitions, mailbox)
	case cfg.MaxKeys < 0:
		return 0, 0, fmt.Errorf("%w: MaxKeys: must be >= 0, where 0 means no cap (got %d)", ErrInvalidConfig, cfg.MaxKeys)
	case cfg.MaxKeys > 0 && cfg.MaxKeys < partitions:
		return 0, 0, fmt.Errorf("%w: MaxKeys: each partition needs a share of at least one key: at least Partitions (%d), or 0 for no cap (got %d)", ErrInvalidConfig, partitions, cfg.MaxKeys)
	case cfg.EvictLRU && cfg.MaxKeys == 0:
		return 0, 0, fmt.Errorf("%w: EvictLRU: evicts only when MaxKeys is reached, and MaxKeys is 0 (no cap)", ErrInvalidConfig)
	case cfg.MaxKeyBytes < 0:
		return 0, 0, fmt.Errorf("%w: MaxKeyBytes: must be >= 0, where 0 means %d (got %d)", ErrInvalidConfig, DefaultMaxKeyBytes, cfg.MaxKeyBytes)
	case cfg.MaxOverrides < 0:
		return 0, 0, fmt.Errorf("%w: MaxOverrides: must be >= 0, where 0 means no cap (got %d)", ErrInvalidConfig, cfg.MaxOverrides)
	case cfg.MaxWaiters < 0:
		return 0, 0, fmt.Errorf("%w: MaxWaiters: must be >= 0, where 0 means no cap (got %d)", ErrInvalidConfig, cfg.MaxWaiters)
	}
	return partitions, mailbox, nil
}

// Allow reports whether one request on key is allowed now. It is
// AllowN(context.Background(), key, 1), and false on any error, ErrClosed
// included.
func (r *Router) Allow(key string) bool {
	d, err := r.AllowN(context.Background(), key, 1)
	return err == nil && d.Allowed
}

// AllowN decides a request for n units on key: all n are allowed, or none,
// under every policy of the key (docs/policies.md). It returns
// ErrInvalidCount for n <= 0 and ErrKeyTooLong for a key longer than
// MaxKeyBytes, without touching any state; ctx.Err() if ctx is done
// before the request is answered, in which case the request uses up
// nothing (with a Store, a grant the store made before the caller left
// holds its units until it is given back: see Store); ErrClosed once the
// router is closed; ErrExceedsCapacity for an
// n above the capacity of the key's policies; ErrTooManyKeys for a new key
// that MaxKeys leaves no room for; ErrAlgorithmPanic or ErrClockPanic if
// the algorithm or the clock panicked. A bad n is reported first, then a
// long key, then a done ctx, then a closed router.
func (r *Router) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	var d Decision
	err := r.check(key, n)
	if err == nil {
		d, err = r.partition(key).AllowN(ctx, key, n)
	}
	if r.observe != nil {
		r.observed(ctx, Event{Kind: EventAllow, Key: key, N: n, Decision: d, Err: err})
	}
	return d, err
}

// check returns the error for an n no key can be allowed, or a key too
// long, and nil for a request a partition may decide. (A key's capacity is
// its partition's to check: it knows the key's policies.)
func (r *Router) check(key string, n int) error {
	if n >= 1 && len(key) <= r.maxKeyBytes {
		return nil // small enough to inline on every request's path
	}
	return r.badRequest(key, n)
}

func (r *Router) badRequest(key string, n int) error {
	if n < 1 {
		return fmt.Errorf("%w (got %d)", ErrInvalidCount, n)
	}
	return r.keyTooLong(key)
}

// keyLimit returns the cap on the keys of partition i: its share of
// MaxKeys.
func (r *Router) keyLimit(i int) keytable.Limit {
	if r.maxKeys == 0 {
		return keytable.Limit{}
	}
	share := r.maxKeys / len(r.parts)
	if i < r.maxKeys%len(r.parts) {
		share++
	}
	return keytable.Limit{Max: share, Evict: r.evict}
}

// keyTooLong returns the error for a key longer than MaxKeyBytes.
func (r *Router) keyTooLong(key string) error {
	return fmt.Errorf("%w: %d bytes, MaxKeyBytes is %d", ErrKeyTooLong, len(key), r.maxKeyBytes)
}

// Peek returns what AllowN(ctx, key, n) would answer now, errors included,
// and changes nothing: no units are taken, and an unseen key stays unseen.
func (r *Router) Peek(ctx context.Context, key string, n int) (Decision, error) {
	if err := r.check(key, n); err != nil {
		return Decision{}, err
	}
	return r.partition(key).PeekN(ctx, key, n)
}

// Reset drops key's state: its next request finds it untouched, as if
// never seen. It returns ErrKeyTooLong for a key no partition can hold,
// ErrClosed once the router is closed, and ctx.Err() if ctx is done before
// the partition has taken the request (then the key may or may not have
// been reset).
func (r *Router) Reset(ctx context.Context, key string) error {
	if len(key) > r.maxKeyBytes {
		return r.keyTooLong(key)
	}
	return r.partition(key).Reset(ctx, key)
}

// Hold keeps key from being granted anything until d from now, on the
// router's clock: a server that refused a request asked its client to wait
// so long (httplimit.Transport and grpclimit's client interceptors hold
// on its word). Until then AllowN, Allow, Peek and the items of a batch on
// key are denied, taking nothing from any policy, dry-run ones included,
// with Remaining 0, Policy "" and Limit 0, and the exact RetryAfter at
// which the same request would be allowed: the hold's end, or later if
// the key's policies would deny it then, or its line of waiters asks
// more. The Quota methods report each policy's own state. Callers waiting
// on key (WaitN) keep their places in line, and are served from the end
// on, in order. A later Hold moves the end only later, never earlier; a d
// of 0 or less changes nothing. A key held is never evicted before its
// hold ends; Reset ends the hold; Snapshot leaves holds out, and Restore
// drops them. A Hold is never observed (Config.Observe).
//
// Its errors are AllowN's: ErrKeyTooLong, ErrTooManyKeys for a key new to
// its partition that MaxKeys leaves no room for (holds count under MaxKeys
// too), ErrClosed, and ctx.Err() (then the key may or may not be held).
// With a Store, the hold is kept in the store (StoreHold), on the store's
// clock as every time is, so every router on it holds the key; a Store
// that cannot hold makes Hold return an error wrapping
// errors.ErrUnsupported, and one that could not answer an error wrapping
// ErrStoreUnavailable, whatever the FailMode (a hold kept by one router
// alone would hold nothing for the others).
func (r *Router) Hold(ctx context.Context, key string, d time.Duration) error {
	if len(key) > r.maxKeyBytes {
		return r.keyTooLong(key)
	}
	return r.partition(key).Hold(ctx, key, d)
}

// Close stops every partition and returns once all of them have exited.
// Requests already queued are answered; calls made after Close, or racing
// with it and not answered, return ErrClosed. Close waits for the request
// each partition is serving: an algorithm that never returns keeps Close
// from returning too. Close is idempotent and always returns nil.
func (r *Router) Close() error {
	r.closeOnce.Do(func() {
		for _, p := range r.parts {
			p.Stop()
		}
		for _, p := range r.parts {
			<-p.Done()
		}
	})
	return nil
}

// partition returns the partition that owns key.
func (r *Router) partition(key string) *actor.Partition {
	return r.parts[r.partitionIndex(key)]
}

// partitionIndex returns the index of the partition that owns key.
func (r *Router) partitionIndex(key string) int {
	if len(r.parts) == 1 {
		return 0
	}
	return r.partitionOf(keytable.Hash(key))
}

// partitionOf returns the index of the partition that owns the key whose
// hash is h (keytable.Hash).
func (r *Router) partitionOf(h uint64) int { return keytable.Share(h, len(r.parts)) }

// each runs f on every partition in turn, between two of its requests.
func (r *Router) each(ctx context.Context, f func(i int, s *actor.State) error) error {
	for i, p := range r.parts {
		if err := p.Do(ctx, func(s *actor.State) error { return f(i, s) }); err != nil {
			return err
		}
	}
	return nil
}
