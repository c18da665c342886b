package algorithms

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/chanlimit/chanlimit/internal/wire"
)

// Errors of a key's lifecycle. package chanlimit exports the same values.
var (
	// ErrTooManyKeys is returned for a request on a new key when the tables
	// sharing a KeyLimit hold as many keys as it allows and none can make
	// room: no key held is untouched, and eviction is off. A table also
	// refuses a new key with it when the key's bytes would not fit in 4 GiB
	// (2 GiB where an int has 32 bits) beside those of the keys it holds
	// and up to a quarter as many again of forgotten keys' bytes not yet
	// squeezed out.
	ErrTooManyKeys = errors.New("chanlimit: too many keys")

	// ErrBadSnapshot is wrapped with the reason a snapshot was refused.
	ErrBadSnapshot = errors.New("chanlimit: bad snapshot")
)

// Expiring is implemented by a Machine that can tell when a state will be
// untouched. A Keyed table asks it whenever it needs to know: to forget a
// key once its state is untouched (also right after a Refund), to count
// idle keys and to leave untouched keys out of a snapshot, and to load
// snapshots. Without it, a table keeps each state's latest grant's
// deadline beside it, and a refunded key stays until that deadline.
type Expiring[S any] interface {
	// ResetAfter returns the time from now until s is untouched, 0 if it
	// already is. It is the ResetAfter of a denied decision on s at now,
	// and after a decision d at now it is d.ResetAfter until something
	// else happens to s: a table forgets a key when it says 0, so one that
	// says so early lets the key's requests through as if untouched.
	ResetAfter(s *S, now time.Duration) time.Duration
}

// StateCodec is implemented by a Machine whose states can be saved in a
// snapshot and loaded again, maybe in another process. Times are saved
// relative to the now of the snapshot, so they mean the same on any
// timeline.
type StateCodec[S any] interface {
	// AppendState appends s, as it stands at now, to dst.
	AppendState(dst []byte, s *S, now time.Duration) []byte

	// ParseState sets s to the state src holds, as it stands at now after
	// age more has passed since it was saved. It returns an error, and
	// leaves s as it was, if src is not a state AppendState could have
	// written for this rule.
	ParseState(src []byte, s *S, now, age time.Duration) error
}

// KeyLimit caps the keys a table holds. When the table is full, a new key
// takes the place of an untouched key if the table holds one; otherwise,
// with Evict, of the table's least recently used key, and without,
// it is refused with ErrTooManyKeys. Max 0 means no cap.
type KeyLimit struct {
	Max   int
	Evict bool
}

// Counts are what a table has done with its keys since it was made, and
// how many it holds untouched.
type Counts struct {
	Expired uint64 // keys forgotten because their state was untouched again
	Evicted uint64 // keys dropped, with their state, to make room for a new key
	Idle    int    // keys held whose state is untouched, not yet forgotten
}

// A snapshot of a table is a sequence of entries, each a key and the state
// its StateCodec wrote, both preceded by their length as a uvarint.

// appendEntry appends one entry of a snapshot to dst.
func appendEntry(dst []byte, key, state []byte) []byte {
	return wire.AppendBytes(wire.AppendBytes(dst, key), state)
}

// NextEntry splits the first entry off src, a sequence that
// Table.AppendSnapshot wrote. The key and state alias src.
func NextEntry(src []byte) (key string, state, rest []byte, err error) {
	r := wire.Reader{Src: src}
	k := r.Bytes()
	if r.Err != nil {
		return "", nil, nil, fmt.Errorf("key: %w", r.Err)
	}
	if state = r.Bytes(); r.Err != nil {
		return "", nil, nil, fmt.Errorf("state of key %q: %w", k, r.Err)
	}
	return string(k), state, r.Src, nil
}

// stateReader reads the fields of one saved state, remembering the first
// error, so a codec reads every field and checks once.
type stateReader struct{ wire.Reader }

// count reads a uvarint that must lie in [lo, hi].
func (r *stateReader) count(what string, lo, hi int) int {
	v := r.Uvarint()
	if v < uint64(lo) || v > uint64(hi) {
		r.Fail(fmt.Errorf("%s %d outside [%d, %d]", what, v, lo, hi))
	}
	return int(v)
}

// past reads a time saved relative to the now of the snapshot, which must
// not be after it.
func (r *stateReader) past(what string) int64 {
	v := r.Varint()
	if v > 0 {
		r.Fail(fmt.Errorf("%s %v after the snapshot", what, time.Duration(v)))
	}
	return v
}

// done returns the first error, or one for bytes left over.
func (r *stateReader) done() error {
	if len(r.Src) > 0 {
		r.Fail(fmt.Errorf("%d bytes after the state", len(r.Src)))
	}
	return r.Err
}

// rebase returns, for a time rel before a snapshot taken age ago, how long
// before now it lies, and false if that is further back than window or than
// the timeline reaches, so the time no longer matters.
func rebase(rel int64, age, window time.Duration) (time.Duration, bool) {
	if rel <= math.MinInt64+int64(max(age, 0)) {
		return 0, false
	}
	back := max(age, 0) - time.Duration(rel) // >= 0: rel <= 0
	return back, back < window
}
