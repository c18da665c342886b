package algorithms

import (
	"fmt"
	"math"
	"time"

	"github.com/chanlimit/chanlimit/internal/wire"
)

// What the built-in rules share to save and load states (each rule's own
// AppendState and ParseState sit beside it). Every time is saved relative
// to the now of the snapshot, and checked on the way back in, with every
// count, against the bounds the rule keeps (a bucket never more than
// empty, a window never over Limit), so a loaded state can refuse what the
// rule would allow but never allow more than Limit in a window, and keeps
// every computation in range.

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
