package keytable

import (
	"fmt"
	"time"

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

// The state of a key under a set of several policies is each policy's
// state, in the set's order, each preceded by its length as a uvarint.

// canSave reports whether every rule of the table can save its states.
func (t *table[S]) canSave() bool {
	for _, c := range t.cols {
		if !c.canSave() {
			return false
		}
	}
	return true
}

// AppendSnapshot saves the keys in heap order. A key whose rule panics is
// dropped, and the snapshot starts again without it: its state is gone,
// so a snapshot without it is the table's as it now stands.
func (t *table[S]) AppendSnapshot(dst []byte, now time.Duration) ([]byte, int, error) {
	if !t.canSave() {
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
// it asks the rules.
func (t *table[S]) appendKey(dst []byte, i uint32, now time.Duration) []byte {
	t.asking = i
	t.scratch = t.scratch[:0]
	for _, c := range t.cols {
		t.state = c.appendState(t.state[:0], i, now)
		t.scratch = wire.AppendBytes(t.scratch, t.state)
	}
	t.asking = none
	return appendEntry(dst, t.keyBytes(t.slots[i].key), t.scratch)
}

func (t *table[S]) Load(key string, states []byte, now, age time.Duration) error {
	if !t.canSave() {
		return fmt.Errorf("%w: %w", ErrBadSnapshot, errNoCodec)
	}
	if _, ok := t.lookup(key); ok {
		return fmt.Errorf("%w: key %q appears twice", ErrBadSnapshot, key)
	}
	var (
		wait   time.Duration
		bad    error // the format's
		policy int   // the policy whose rule refused its state, with err
		err    error
	)
	perr := t.ask(none, func() {
		r := wire.Reader{Src: states}
		for j, c := range t.cols {
			state := r.Bytes()
			if r.Err != nil {
				bad = fmt.Errorf("the state of policy %q: %w", t.set.policies[j].Name, r.Err)
				return
			}
			if err = c.parseState(state, now, age); err != nil {
				policy = j
				return
			}
		}
		if len(r.Src) > 0 {
			bad = fmt.Errorf("%d bytes after the states of its %d policies", len(r.Src), len(t.cols))
			return
		}
		wait = t.stateResetAfter(none, now)
	})
	defer t.clearFresh()
	switch {
	case perr != nil:
		return fmt.Errorf("%w: key %q: %w", ErrBadSnapshot, key, perr)
	case bad != nil:
		return fmt.Errorf("%w: key %q: %w", ErrBadSnapshot, key, bad)
	case err != nil && !t.multi: // the rule's: read once, never asked anything
		return fmt.Errorf("%w: key %q: %w", ErrBadSnapshot, key, supervise.Wrap(err))
	case err != nil:
		return fmt.Errorf("%w: key %q: policy %q: %w", ErrBadSnapshot, key, t.set.policies[policy].Name, supervise.Wrap(err))
	case wait <= 0:
		return nil // untouched by now
	case !t.room(len(key)):
		return fmt.Errorf("%w: key %q: %w", ErrBadSnapshot, key, errKeysFull)
	}
	t.insert(key, after(now, wait))
	return nil
}
