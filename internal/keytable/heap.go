package keytable

import "time"

// The due heap orders the keys held by deadline: the time from which their
// state is untouched (now + its ResetAfter), so that the key at the top is
// the next to become idle.
//
// It is 4-ary: a child of h is at arity×h + 1 to arity×h + arity. Its four
// children share a cache line, and its depth is half a binary heap's,
// which matters because every level moved writes the moved slot's place: a
// write to a random slot, a cache miss when keys are many.
const arity = 4

// due is an entry of the heap: a deadline and a slot. The deadline is
// never after its key's: a deadline that moves later is caught up with
// lazily, when the entry reaches the top and the state's ResetAfter is
// read; one that moves earlier moves its entry up at once (earlier). It
// is kept as two halves, so that an entry takes 12 bytes, not 16 (one for
// each key held).
type due struct {
	hi, lo uint32 // the deadline's halves
	slot   uint32
}

func newDue(deadline time.Duration, slot uint32) due {
	return due{uint32(uint64(deadline) >> 32), uint32(deadline), slot}
}

// at returns the entry's deadline.
func (e due) at() time.Duration { return time.Duration(uint64(e.hi)<<32 | uint64(e.lo)) }

// earlier tells the heap slot i's new deadline. A later one is left for
// the heap to catch up with; an earlier one moves its entry up now.
func (t *table[S]) earlier(i uint32, deadline time.Duration) {
	if h := int(t.slots[i].due); deadline < t.due[h].at() {
		t.due[h] = newDue(deadline, i)
		t.up(h)
	}
}

// unqueue takes the entry at h out of the heap, moving the last entry into
// its place.
func (t *table[S]) unqueue(h int) {
	last := len(t.due) - 1
	if h != last {
		t.due[h] = t.due[last]
		t.slots[t.due[h].slot].due = uint32(h)
	}
	t.due = t.due[:last]
	if h < last {
		t.down(h)
		t.up(h)
	}
}

// up moves the entry at h up to its place.
func (t *table[S]) up(h int) {
	e := t.due[h]
	for h > 0 {
		parent := (h - 1) / arity
		if t.due[parent].at() <= e.at() {
			break
		}
		t.put(h, t.due[parent])
		h = parent
	}
	t.put(h, e)
}

// down moves the entry at h down to its place.
func (t *table[S]) down(h int) {
	e, n := t.due[h], len(t.due)
	for {
		first := arity*h + 1
		if first >= n {
			break
		}
		least := first
		for c := first + 1; c < min(first+arity, n); c++ {
			if t.due[c].at() < t.due[least].at() {
				least = c
			}
		}
		if t.due[least].at() >= e.at() {
			break
		}
		t.put(h, t.due[least])
		h = least
	}
	t.put(h, e)
}

// put writes e at h in the heap, and h in e's slot.
func (t *table[S]) put(h int, e due) {
	t.due[h] = e
	t.slots[e.slot].due = uint32(h)
}
