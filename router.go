// Package chanlimit is a per-key rate limiter built the CSP way.
//
// A Router splits keys (users, API keys, IPs, tenants) among partitions by
// hash. Each partition is one goroutine that owns its keys' state and serves
// requests one at a time from a bounded mailbox, answering on a reply
// channel; nothing is locked, because nothing is shared. The algorithms
// (package algorithms) are plain single-threaded state machines with exact
// integer arithmetic, and time comes from an injected clock (package clock),
// so a test can use clock.Fake and move time only when it chooses to.
//
// Every call returns: with a Decision, with ErrClosed once the router is
// closed (also for calls racing with Close), or with the context's error if
// it is done before the call is answered. A call whose context ends before
// it is answered uses up no quota. After Close returns, no goroutine of the
// router is left.
package chanlimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// Config configures a Router. Limit and Window are required; every other
// field has a default.
type Config struct {
	// Algorithm is a registered algorithm name (algorithms.Names lists
	// them); "" means "token_bucket".
	Algorithm string

	// Limit is N, the requests allowed per Window. It must be > 0.
	Limit int

	// Window is T. It must be > 0.
	Window time.Duration

	// Burst is the capacity of each key's bucket for the bucket algorithms
	// (token_bucket, gcra, leaky_bucket; 0 means Limit). Setting it for an
	// algorithm whose capacity is its Limit is an ErrInvalidConfig.
	Burst int

	// Partitions is the number of partition goroutines; 0 means
	// DefaultPartitions() (GOMAXPROCS), or fewer if MailboxSize is so large
	// that Partitions × MailboxSize would pass MaxQueued. At most
	// MaxPartitions. More spread contention among many callers; fewer make
	// batches cheaper.
	Partitions int

	// MailboxSize is the number of requests each partition queues before
	// callers wait to send; 0 means DefaultMailboxSize. At most
	// MaxMailboxSize, and Partitions × MailboxSize at most MaxQueued: each
	// slot is allocated up front (about 40 bytes).
	MailboxSize int

	// Clock is where the router reads the time; nil means clock.Real().
	Clock clock.Clock

	// MaxKeys caps the keys held across all partitions; 0 means no cap.
	// Keys are forgotten anyway once they are untouched again (see
	// README), so the cap matters only against a flood of new keys.
	//
	// Each partition holds at most its share: MaxKeys / Partitions, the
	// remainder spread over the first partitions. When a key's partition
	// is full, the new key takes the place of an untouched key of that
	// partition if there is one; otherwise it is refused with
	// ErrTooManyKeys (Allow returns false), and no key held is forgiven, so
	// a flood of random keys can never reset anyone's quota. With EvictLRU
	// it takes the place of the partition's least recently used key
	// instead. Shares keep that rule exact without any partition reading
	// another's keys; the price is that a key can be refused while other
	// partitions have room (keys spread evenly by hash, so by little).
	// Partitions 0 then means at most MaxKeys partitions; Partitions above
	// MaxKeys is an ErrInvalidConfig.
	MaxKeys int

	// EvictLRU chooses availability over strictness when MaxKeys is
	// reached: the least recently used key of the new key's partition is
	// dropped, with its state, and the new key is decided. A key evicted
	// this way starts afresh, so a flood of random keys can reset the
	// quota of a key that has been quiet for a while. It needs MaxKeys.
	EvictLRU bool

	// MaxKeyBytes is the length of the longest key accepted, in bytes; 0
	// means DefaultMaxKeyBytes. A longer key is refused with ErrKeyTooLong
	// before it reaches a partition.
	MaxKeyBytes int
}

// Limits and defaults of Config.
const (
	DefaultAlgorithm   = algorithms.NameTokenBucket
	DefaultMailboxSize = 64
	MaxPartitions      = 1 << 16
	MaxMailboxSize     = 1 << 16
	MaxQueued          = 1 << 20 // requests queued across all partitions
	DefaultMaxKeyBytes = 4 << 10
)

// DefaultPartitions returns the number of partitions a Config with
// Partitions 0 gets: one per processor Go may use (GOMAXPROCS), at most
// MaxPartitions. The trade-off, measured on 2 cores (bench/RESULTS.md):
// more partitions spread contention, so sixteen per processor cut Allow
// under 64 hammering goroutines by 9-14%, but cost one or two callers
// 6-19% more; and a batch travels as one message per partition it
// touches, so two per processor made AllowBatch cost 17-23% more per
// decision for 64 requests (53-61% for 16), and a single partition 17-18%
// less. The mailbox size made no measurable difference between 1 and 256.
// With MaxKeys, at most MaxKeys partitions.
func DefaultPartitions() int { return min(runtime.GOMAXPROCS(0), MaxPartitions) }

// Decision is the answer to one request; see algorithms.Decision for what
// each field means.
type Decision = algorithms.Decision

// Errors. Those that wrap details (ErrInvalidConfig, ErrUnknownAlgorithm,
// ErrInvalidCount, ErrExceedsCapacity) are matched with errors.Is.
var (
	// ErrClosed is returned by calls on a closed router, and by calls that
	// raced with Close and were not answered.
	ErrClosed = actor.ErrClosed

	// ErrInvalidCount is returned for n <= 0.
	ErrInvalidCount = algorithms.ErrInvalidCount

	// ErrExceedsCapacity is returned for an n larger than any key can ever
	// be allowed (Burst for the bucket algorithms, Limit for the others).
	ErrExceedsCapacity = algorithms.ErrExceedsCapacity

	// ErrInvalidConfig is returned by New, wrapped with the field and the
	// reason.
	ErrInvalidConfig = algorithms.ErrInvalidConfig

	// ErrUnknownAlgorithm is returned by New for an Algorithm name that is
	// not registered; the message lists those that are. It also matches
	// ErrInvalidConfig.
	ErrUnknownAlgorithm = algorithms.ErrUnknownAlgorithm

	// ErrTooManyKeys is returned for a request on a new key when MaxKeys
	// keys are held and none can make room (see Config.MaxKeys), or when
	// the key bytes of its partition are near 4 GiB (2 GiB on 32-bit
	// platforms): a partition keeps the bytes of its keys in one slice,
	// with 32-bit offsets; see algorithms.ErrTooManyKeys.
	ErrTooManyKeys = algorithms.ErrTooManyKeys

	// ErrKeyTooLong is returned, wrapped with the lengths, for a key longer
	// than Config.MaxKeyBytes.
	ErrKeyTooLong = errors.New("chanlimit: key too long")

	// ErrAlgorithmPanic is returned, wrapped with the panic's value, by a
	// request during which the algorithm panicked. The key's state is
	// dropped; the router and its other keys go on.
	ErrAlgorithmPanic = actor.ErrAlgorithmPanic

	// ErrBadSnapshot is returned by Restore, wrapped with the reason, for
	// a snapshot it refuses; nothing is loaded then.
	ErrBadSnapshot = algorithms.ErrBadSnapshot
)

// Request is one request of a batch: N units on Key.
type Request struct {
	Key string
	N   int
}

// Router is a per-key rate limiter. It is safe for simultaneous use by many
// goroutines. The zero Router is not usable: call New.
type Router struct {
	parts       []*actor.Partition
	seed        maphash.Seed
	capacity    int
	maxKeyBytes int
	maxKeys     int
	evict       bool
	alg         algorithms.Algorithm
	params      params // what a snapshot must match
	closeOnce   sync.Once
	batches     sync.Pool     // of *batch
	restoring   chan struct{} // holds a token while a Restore runs
}

// batch is AllowBatch's scratch space, kept for the next call unless a
// partition may still hold part of it.
type batch struct {
	items   [][]actor.Item // per partition, in request order
	at      [][]int        // per partition: the index in reqs of each item
	pending []actor.Pending
	sent    []int // the partitions sent to, in order
}

// New validates cfg and starts the router's partitions. Every invalid field
// is an error wrapping ErrInvalidConfig that names the field and the reason;
// a custom algorithm or clock that panics while New sets it up is reported
// the same way.
func New(cfg Config) (*Router, error) {
	partitions, mailbox := cfg.Partitions, cfg.MailboxSize
	switch {
	case partitions < 0 || partitions > MaxPartitions:
		return nil, fmt.Errorf("%w: Partitions: must be between 0 (the default) and %d (got %d)", ErrInvalidConfig, MaxPartitions, partitions)
	case mailbox < 0 || mailbox > MaxMailboxSize:
		return nil, fmt.Errorf("%w: MailboxSize: must be between 0 (the default) and %d (got %d)", ErrInvalidConfig, MaxMailboxSize, mailbox)
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
	if int64(partitions)*int64(mailbox) > MaxQueued {
		return nil, fmt.Errorf("%w: Partitions × MailboxSize: must be at most %d (got %d × %d)", ErrInvalidConfig, MaxQueued, partitions, mailbox)
	}
	switch {
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("%w: MaxKeys: must be >= 0, where 0 means no cap (got %d)", ErrInvalidConfig, cfg.MaxKeys)
	case cfg.MaxKeys > 0 && cfg.MaxKeys < partitions:
		return nil, fmt.Errorf("%w: MaxKeys: each partition needs a share of at least one key: at least Partitions (%d), or 0 for no cap (got %d)", ErrInvalidConfig, partitions, cfg.MaxKeys)
	case cfg.EvictLRU && cfg.MaxKeys == 0:
		return nil, fmt.Errorf("%w: EvictLRU: evicts only when MaxKeys is reached, and MaxKeys is 0 (no cap)", ErrInvalidConfig)
	case cfg.MaxKeyBytes < 0:
		return nil, fmt.Errorf("%w: MaxKeyBytes: must be >= 0, where 0 means %d (got %d)", ErrInvalidConfig, DefaultMaxKeyBytes, cfg.MaxKeyBytes)
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	if err := try("Clock", func() error { clk.Now(); return nil }); err != nil {
		return nil, err
	}
	alg, tables, err := newTables(cfg, partitions)
	if err != nil {
		return nil, err
	}

	r := &Router{
		parts:       make([]*actor.Partition, partitions),
		seed:        maphash.MakeSeed(),
		capacity:    alg.Capacity(),
		maxKeyBytes: cmp.Or(cfg.MaxKeyBytes, DefaultMaxKeyBytes),
		alg:         alg,
		restoring:   make(chan struct{}, 1),
		params:      params{algorithm: cmp.Or(cfg.Algorithm, DefaultAlgorithm), limit: cfg.Limit, window: cfg.Window, capacity: alg.Capacity()},
	}
	r.maxKeys, r.evict = cfg.MaxKeys, cfg.EvictLRU
	for i, t := range tables {
		t.Bound(r.keyLimit(i))
	}
	r.batches.New = func() any {
		return &batch{
			items:   make([][]actor.Item, partitions),
			at:      make([][]int, partitions),
			pending: make([]actor.Pending, partitions),
		}
	}
	for i := range r.parts {
		r.parts[i] = actor.Start(tables[i], clk, mailbox)
	}
	return r, nil
}

// newTables makes the algorithm cfg names and one table per partition,
// after checking what every algorithm needs, so a Factory only sees valid
// Params.
func newTables(cfg Config, partitions int) (alg algorithms.Algorithm, tables []algorithms.Table, err error) {
	name := cfg.Algorithm
	if name == "" {
		name = DefaultAlgorithm
	}
	factory, err := algorithms.Lookup(name)
	if err != nil {
		return nil, nil, err
	}
	params := algorithms.Params{Limit: cfg.Limit, Window: cfg.Window, Burst: cfg.Burst}
	if err := params.Validate(); err != nil {
		return nil, nil, err
	}
	err = try("Algorithm", func() error {
		alg, err = factory(params)
		switch {
		case err != nil && errors.Is(err, ErrInvalidConfig):
			return err
		case err != nil:
			return fmt.Errorf("%w: Algorithm: %q refused the config: %w", ErrInvalidConfig, name, err)
		case alg == nil || alg.Capacity() < 1:
			return fmt.Errorf("%w: Algorithm: %q made no usable algorithm (nil, or capacity below 1)", ErrInvalidConfig, name)
		}
		tables = make([]algorithms.Table, partitions)
		for i := range tables {
			if tables[i] = alg.NewTable(); tables[i] == nil {
				return fmt.Errorf("%w: Algorithm: %q made a nil table", ErrInvalidConfig, name)
			}
		}
		return nil
	})
	return alg, tables, err
}

// try runs f, and turns a panic in it into an ErrInvalidConfig about field.
func try(field string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %s: panicked while the router was set up: %v", ErrInvalidConfig, field, v)
		}
	}()
	return f()
}

// Allow reports whether one request on key is allowed now. It is
// AllowN(context.Background(), key, 1), and false on any error, ErrClosed
// included.
func (r *Router) Allow(key string) bool {
	d, err := r.AllowN(context.Background(), key, 1)
	return err == nil && d.Allowed
}

// AllowN decides a request for n units on key: all n are allowed, or none.
// It returns ErrInvalidCount for n <= 0 and ErrExceedsCapacity for an n no
// key can ever be allowed, without touching any state; ctx.Err() if ctx is
// done before the request is answered, in which case the request uses up
// nothing; and ErrClosed once the router is closed. A bad n is reported
// first, then a done ctx, then a closed router.
func (r *Router) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if err := algorithms.CheckCount(n, r.capacity); err != nil {
		return Decision{}, err
	}
	if len(key) > r.maxKeyBytes {
		return Decision{}, r.keyTooLong(key)
	}
	return r.partition(key).AllowN(ctx, key, n)
}

// keyLimit returns the cap on the keys of partition i: its share of
// MaxKeys.
func (r *Router) keyLimit(i int) algorithms.KeyLimit {
	if r.maxKeys == 0 {
		return algorithms.KeyLimit{}
	}
	share := r.maxKeys / len(r.parts)
	if i < r.maxKeys%len(r.parts) {
		share++
	}
	return algorithms.KeyLimit{Max: share, Evict: r.evict}
}

// keyTooLong returns the error for a key longer than MaxKeyBytes.
func (r *Router) keyTooLong(key string) error {
	return fmt.Errorf("%w: %d bytes, MaxKeyBytes is %d", ErrKeyTooLong, len(key), r.maxKeyBytes)
}

// ErrShortOutput is returned by AllowBatch when out has fewer slots than
// reqs has requests.
var ErrShortOutput = errors.New("chanlimit: AllowBatch: out is shorter than reqs")

// AllowBatch decides every request of reqs, as AllowN would one by one, and
// writes the decision for reqs[i] into out[i]. The requests for each
// partition travel as one message, and the partitions work in parallel, so
// a batch pays the channel round trip once per partition instead of once
// per request. Requests for one key are decided in their order in reqs.
//
// Every N and every key's length is checked before anything is sent: a bad
// one fails the whole batch with ErrInvalidCount, ErrExceedsCapacity or
// ErrKeyTooLong (wrapped with its index) and nothing is applied. A request
// that a partition refuses (ErrTooManyKeys, ErrAlgorithmPanic) gets a zero
// Decision, the others are decided, and AllowBatch returns the error of
// the first such request in reqs' order, wrapped with its index. If ctx is done, or the router closes, before every
// partition has answered, AllowBatch returns ctx.Err() or ErrClosed; the
// partitions that had not decided their part take nothing, and the parts
// that were decided stand, with their decisions in out. A zero Decision (its
// Limit is 0) marks a request that was not decided.
func (r *Router) AllowBatch(ctx context.Context, reqs []Request, out []Decision) error {
	if len(out) < len(reqs) {
		return fmt.Errorf("%w (%d slots for %d requests)", ErrShortOutput, len(out), len(reqs))
	}
	for i, req := range reqs {
		err := algorithms.CheckCount(req.N, r.capacity)
		if err == nil && len(req.Key) > r.maxKeyBytes {
			err = r.keyTooLong(req.Key)
		}
		if err != nil {
			return fmt.Errorf("chanlimit: AllowBatch: request %d: %w", i, err)
		}
	}
	b := r.batches.Get().(*batch)
	for i, req := range reqs {
		pi := r.partitionIndex(req.Key)
		// The item's fields are set in place: appending an Item built
		// aside copies it through memory, which stalls (items come back
		// from reset zeroed).
		items := slices.Grow(b.items[pi], 1)
		items = items[:len(items)+1]
		it := &items[len(items)-1]
		it.Key, it.N = req.Key, req.N
		b.items[pi] = items
		b.at[pi] = append(b.at[pi], i)
	}
	clear(out[:len(reqs)]) // a request left undecided keeps a zero Decision

	var err error
	for pi := range b.items {
		if len(b.items[pi]) == 0 {
			continue
		}
		if b.pending[pi], err = r.parts[pi].SendBatch(ctx, &b.items[pi]); err != nil {
			break // the parts sent are still waited for: their decisions stand
		}
		b.sent = append(b.sent, pi)
	}
	reusable := true
	for _, pi := range b.sent {
		if werr := b.pending[pi].Wait(ctx); werr != nil {
			// The partition may still hold this part: never reuse b.
			err, reusable = cmp.Or(err, werr), false
			continue
		}
		for k, i := range b.at[pi] {
			it := &b.items[pi][k]
			out[i] = it.D
			if it.Err != nil && err == nil {
				err = fmt.Errorf("chanlimit: AllowBatch: request %d: %w", i, it.Err)
			}
		}
	}
	if reusable {
		b.reset()
		r.batches.Put(b)
	}
	return err
}

// reset empties b for the next batch, dropping its references to keys.
func (b *batch) reset() {
	for pi := range b.items {
		clear(b.items[pi])
		b.items[pi] = b.items[pi][:0]
		b.at[pi] = b.at[pi][:0]
	}
	b.sent = b.sent[:0]
}

// Peek returns what AllowN(ctx, key, n) would answer now, and changes
// nothing: no units are taken, and an unseen key stays unseen. Errors are
// those of AllowN.
func (r *Router) Peek(ctx context.Context, key string, n int) (Decision, error) {
	if err := algorithms.CheckCount(n, r.capacity); err != nil {
		return Decision{}, err
	}
	if len(key) > r.maxKeyBytes {
		return Decision{}, r.keyTooLong(key)
	}
	return r.partition(key).PeekN(ctx, key, n)
}

// Reset puts key back to untouched, as if it had never been seen. It
// returns ErrClosed once the router is closed, and ctx.Err() if ctx is done
// before the partition has taken the request (then the key may or may not
// have been reset), and ErrKeyTooLong for a key no partition can hold.
func (r *Router) Reset(ctx context.Context, key string) error {
	if len(key) > r.maxKeyBytes {
		return r.keyTooLong(key)
	}
	return r.partition(key).Reset(ctx, key)
}

// Close stops every partition and returns once all of them have exited.
// Requests already queued are answered; calls made after Close, or racing
// with it and not answered, return ErrClosed. Close is idempotent and always
// returns nil.
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
	h := maphash.String(r.seed, key) >> 32 // the high bits mix best
	return int(h * uint64(len(r.parts)) >> 32)
}

// RegisteredAlgorithms returns the names Config.Algorithm accepts, sorted.
// algorithms.Register adds to them.
func RegisteredAlgorithms() []string { return algorithms.Names() }
