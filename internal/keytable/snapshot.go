package keytable

import (
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/internal/errs"
	"github.com/chanlimit/chanlimit/internal/supervise"
	"github.com/chanlimit/chanlimit/internal/wire"
)

// A snapshot of a table is a sequence of entries, each a key and the state
// its rule's StateCodec wrote, both preceded by their length as a uvarint.

// appendEntry appends one entry of a snapshot to dst.
func appendEntry(dst []byte, key, state []byte) []byte {
	return wire.AppendBytes(wire.AppendBytes(dst, key), state)
}

// NextEntry splits the first entry off src, a sequence that AppendSnapshot
// wrote. The key and state alias src.
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

// AppendSnapshot saves the keys in heap order. A key whose rule panics is
// dropped, and the snapshot starts again without it: its state is gone,
// so a snapshot without it is the table's as it now stands.
func (t *table[S]) AppendSnapshot(dst []byte, now time.Duration) ([]byte, int, error) {
	if t.codec == nil {
		return dst, 0, errNoCodec
	}
	start, keys := len(dst), 0
	t.supervised(func() {
		dst, keys = dst[:start], 0
		for _, d := range t.due {
			if t.untouched(d.slot, now) {
				continue
			}
			dst = t.appendKey(dst, d.slot, now)
			keys++
		}
	})
	return dst, keys, nil
}

// appendKey appends the entry of the key in slot i, noting in asking that
// it asks the rule.
func (t *table[S]) appendKey(dst []byte, i uint32, now time.Duration) []byte {
	sl := &t.slots[i]
	t.asking = i
	t.scratch = t.codec.AppendState(t.scratch[:0], &sl.state, now)
	t.asking = none
	return appendEntry(dst, t.keyBytes(sl.key), t.scratch)
}

func (t *table[S]) Load(key string, state []byte, now, age time.Duration) error {
	if t.codec == nil {
		return fmt.Errorf("%w: %w", errs.ErrBadSnapshot, errNoCodec)
	}
	if _, ok := t.lookup(key); ok {
		return fmt.Errorf("%w: key %q appears twice", errs.ErrBadSnapshot, key)
	}
	var (
		s    S
		wait time.Duration
		err  error
	)
	if perr := t.ask(none, func() {
		if err = t.codec.ParseState(state, &s, now, age); err == nil {
			wait = t.expiring.ResetAfter(&s, now)
		}
	}); perr != nil {
		return fmt.Errorf("%w: key %q: %w", errs.ErrBadSnapshot, key, perr)
	}
	switch {
	case err != nil: // the rule's: read once, never asked anything
		return fmt.Errorf("%w: key %q: %w", errs.ErrBadSnapshot, key, supervise.Wrap(err))
	case wait <= 0:
		return nil // untouched by now
	case !t.room(len(key)):
		return fmt.Errorf("%w: key %q: %w", errs.ErrBadSnapshot, key, errKeysFull)
	}
	t.insert(key, s, after(now, wait))
	return nil
}

func (t *table[S]) Replace(other Table) {
	o := other.(*table[S])
	t.seed, t.buckets, t.held, t.slots, t.due = o.seed, o.buckets, o.held, o.slots, o.due
	t.keys, t.garbage = o.keys, o.garbage
	t.links, t.newest, t.oldest = nil, none, none
	if t.evicting() {
		t.relinkAll()
	}
	o.buckets, o.held, o.slots, o.due, o.links, o.keys, o.garbage = nil, 0, nil, nil, nil, nil, 0
	o.newest, o.oldest = none, none
}
