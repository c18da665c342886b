package keytable

import (
	"math"
	"reflect"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// A partition serves the callers waiting on a key in line (package actor):
// the table tells it when a caller joining the line would be granted
// (Ahead), by deciding the line ahead of it on a copy of the key's states,
// and keeps the keys with a line from being evicted (Pin).

// pins are the keys of a partition that have callers waiting on them:
// its tables never evict them. Keys owns them; its tables read them
// through their Limit.
type pins map[string]struct{}

// maxAsks is the most times Ahead asks the rule about one request before
// it gives up: a well-behaved rule needs two (a denial, then a grant) or,
// with a Delay, three.
const maxAsks = 8

func (t *table[S]) Ahead(key string, now time.Duration, ns []int) (at, free time.Duration, ok bool, err error) {
	i, held := t.lookup(key)
	if !held {
		i = none
	}
	err = t.ask(i, func() {
		if held && !t.copyHeld(i, now) {
			return
		}
		at, free, ok = t.decideLine(now, ns)
	})
	t.clearFresh() // hold on to nothing of the copies
	if err != nil {
		return 0, 0, false, err
	}
	return at, free, ok, nil
}

// copyHeld sets every policy's fresh state to a copy of the state of slot
// i, one that deciding changes apart from the original, and reports
// whether every rule's states could be copied.
func (t *table[S]) copyHeld(i uint32, now time.Duration) bool {
	for _, c := range t.cols {
		if !c.copyOf(i, now) {
			return false
		}
	}
	return true
}

// decideLine grants the requests of ns on the fresh states in order, each
// as a partition grants its head waiter (AllowN at the instant reached; a
// grant with a Delay is given back, and asked again once the Delay has
// passed; a denial is asked again after its RetryAfter), and returns the
// instant of the last grant, and the instant the states are untouched
// after the grant before it.
func (t *table[S]) decideLine(now time.Duration, ns []int) (at, free time.Duration, ok bool) {
	at, free = now, after(now, t.enforcedResetAfter(none, now)) // a dry-run policy's state is not the line's
	var d algorithms.Decision
	for k, n := range ns {
		if n > t.capacity {
			continue // answered with ErrExceedsCapacity when its turn comes
		}
		for asks := 0; ; asks++ {
			if asks == maxAsks {
				return 0, 0, false
			}
			t.decideFresh(at, n, &d)
			granted, giveBack, wait := actor.Turn(&d)
			if granted {
				break
			}
			if giveBack {
				t.giveBack(none, at, n)
			}
			if wait <= 0 {
				return 0, 0, false
			}
			if at = after(at, wait); at == math.MaxInt64 {
				return at, at, true // never, within the timeline
			}
		}
		if k < len(ns)-1 {
			free = after(at, d.ResetAfter)
		}
	}
	return at, free, true
}

// decideFresh decides n units on the fresh states at now, taking them if
// every policy allows.
func (t *table[S]) decideFresh(now time.Duration, n int, d *algorithms.Decision) {
	if t.multi {
		t.decideAll(none, now, n, d, true, dryNone) // a waiter never waits for a dry-run policy
		return
	}
	t.m.AllowN(&t.fresh, now, n, d)
}

func (k *Keys) Ahead(key string, now time.Duration, ns []int) (at, free time.Duration, ok bool, err error) {
	if end, held := k.held.until(key, now); held {
		now = end // granted nothing before
	}
	t := k.tableOf(key)
	k.asking = t
	at, free, ok, err = t.Ahead(key, now, ns)
	k.asking = nil
	return at, free, ok, err
}

func (k *Keys) Pin(key string) { k.pinned[key] = struct{}{} }

func (k *Keys) Unpin(key string) { delete(k.pinned, key) }

// copyState sets dst to a copy of s that deciding changes apart from s,
// and reports whether it could: a state without pointers is copied as it
// is, another through the rule's StateCodec, if it has one.
func (r *policyRules[S]) copyState(dst, s *S, now time.Duration) bool {
	switch {
	case r.flat:
		*dst = *s
	case r.codec != nil:
		r.buf = r.codec.AppendState(r.buf[:0], s, now)
		return r.codec.ParseState(r.buf, dst, now, 0) == nil
	default:
		return false
	}
	return true
}

func (c *states[S]) copyOf(i uint32, now time.Duration) bool {
	return c.copyState(&c.fresh, c.at(i), now)
}

func (h head[S]) copyOf(i uint32, now time.Duration) bool {
	return h.t.copyState(&h.t.fresh, h.at(i), now)
}

// flat reports whether a value of type t holds no pointers (a string's
// bytes are never written, so a string counts as none): a copy of it
// shares nothing that changing either would change.
func flat(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String:
		return true
	case reflect.Array:
		return t.Len() == 0 || flat(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !flat(t.Field(i).Type) {
				return false
			}
		}
		return true
	default:
		return false
	}
}
