package chanlimit

import (
	"errors"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

// The errors of a Router. Those that carry details wrap them: match them
// with errors.Is.
var (
	// ErrClosed is returned by every call on a closed Router, and by calls
	// that raced with Close and were not answered.
	ErrClosed = actor.ErrClosed

	// ErrInvalidCount is returned for a request of n <= 0 units.
	ErrInvalidCount = errors.New("chanlimit: n must be at least 1")

	// ErrExceedsCapacity is returned, wrapped with n and the capacity, for
	// a request of more units than its key can ever be allowed at once, so
	// that no wait would let it through: the smallest capacity of the
	// key's policies (Burst for the bucket algorithms, Limit for the
	// others).
	ErrExceedsCapacity = actor.ErrExceedsCapacity

	// ErrInvalidConfig is returned by New, wrapped with the field and the
	// reason, for a Config it cannot honour.
	ErrInvalidConfig = errors.New("chanlimit: invalid config")

	// ErrUnknownAlgorithm is returned by New, with ErrInvalidConfig, for
	// an Algorithm name that is not registered; the message lists the
	// names that are.
	ErrUnknownAlgorithm = errors.New("chanlimit: unknown algorithm")

	// ErrDuplicateAlgorithm is returned by Register for a name already
	// registered.
	ErrDuplicateAlgorithm = errors.New("chanlimit: algorithm name already registered")

	// ErrTooManyKeys is returned for a request that would add a key when
	// the key's partition holds its share of Config.MaxKeys and none of its
	// keys is idle (without EvictLRU), or when the bytes of the
	// partition's keys fill the space a partition has for them (docs/keys.md).
	// No key held is dropped to make room, and the request takes nothing.
	ErrTooManyKeys = actor.ErrTooManyKeys

	// ErrStoreUnavailable is returned, wrapping the store's error, for a
	// request that Config.Store could not answer (Redis down, a timeout),
	// when the Store's FailMode is FailClosed.
	ErrStoreUnavailable = storetable.ErrStoreUnavailable

	// ErrKeyTooLong is returned, wrapped with the lengths, for a key longer
	// than Config.MaxKeyBytes.
	ErrKeyTooLong = errors.New("chanlimit: key too long")

	// ErrAlgorithmPanic is returned, wrapped with the panic's value, by a
	// request whose decision the algorithm panicked in (or ran
	// runtime.Goexit in). The key's state, which the panic may have left
	// half-written, is dropped; the router and its other keys go on. If
	// the value is an error, errors.Is and errors.As find it too; chanlimit
	// itself never calls its methods.
	ErrAlgorithmPanic = actor.ErrAlgorithmPanic

	// ErrClockPanic is returned, wrapped with the panic's value, by the
	// requests that need the time (AllowN, Peek, each request of
	// AllowBatch) that a partition took while Config.Clock panicked. Time
	// stands still for the partition meanwhile; it goes on at the next
	// reading that works. Reset and Stats need no reading and go on;
	// Snapshot and Restore read the time of day themselves, and return
	// ErrClockPanic if that reading panics, having changed nothing.
	ErrClockPanic = actor.ErrClockPanic

	// ErrBadSnapshot is returned by Restore, wrapped with the reason, for
	// a snapshot it refuses; nothing is loaded then.
	ErrBadSnapshot = keytable.ErrBadSnapshot

	// ErrTooManyOverrides is returned by SetOverride for a key without an
	// override when Config.MaxOverrides keys already have one, and by
	// Restore, with ErrBadSnapshot, for a snapshot with more overrides.
	ErrTooManyOverrides = errors.New("chanlimit: too many overrides")

	// ErrShortOutput is returned by AllowBatch when out has fewer slots
	// than reqs has requests.
	ErrShortOutput = errors.New("chanlimit: AllowBatch: out is shorter than reqs")

	// ErrTooManyWaiters is returned, wrapped with the figures, by a WaitN
	// on a key that already has MaxWaiters callers waiting.
	ErrTooManyWaiters = actor.ErrTooManyWaiters
)
