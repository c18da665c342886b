package keytable

import (
	"math"
	"time"
)

// idleCountLimit is the most heap entries Counts reads to count the idle
// keys, so that a count costs at most a fraction of a millisecond (bench/
// measures it): when more keys than that come due at once, the count
// falls short until Expire catches up.
const idleCountLimit = 1 << 14

func (t *table[S]) Expire(now time.Duration, budget int) (dropped int) {
	if len(t.due) == 0 || !passed(t.due[0].at(), now) {
		return 0 // the common case, after each burst: nothing due
	}
	t.supervised(func() {
		for ; budget > 0 && len(t.due) > 0 && passed(t.due[0].at(), now); budget-- {
			if t.expireTop(now) {
				dropped++
			}
		}
	})
	if dropped > 0 {
		t.shrink()
	}
	return dropped
}

// expireTop drops the key at the top of the due heap if it is idle at
// now, and reports whether it did; if the key's deadline has moved on, it
// moves its entry down to it instead.
func (t *table[S]) expireTop(now time.Duration) bool {
	if !t.idleTop(now) {
		return false
	}
	t.remove(t.due[0].slot)
	t.counts.Expired++
	return true
}

// idleTop reports whether the key at the top of the due heap is idle at
// now; if it is not, its deadline has moved on, and it moves its entry
// down to it.
func (t *table[S]) idleTop(now time.Duration) bool {
	wait := t.resetAfter(t.due[0].slot, now)
	if wait <= 0 {
		return true
	}
	t.due[0] = newDue(after(now, wait), t.due[0].slot)
	t.down(0)
	return false
}

func (t *table[S]) Counts(now time.Duration) Counts {
	idle := t.idle(now) // first: it may drop a key whose rule panics
	c := t.tally()
	c.Idle = idle
	return c
}

// idle counts the keys idle at now, reading at most idleCountLimit heap
// entries (see countIdle). A key whose rule panics is dropped, and the
// count starts again.
func (t *table[S]) idle(now time.Duration) (n int) {
	t.supervised(func() { n = t.countIdle(now, idleCountLimit, math.MaxInt) })
	return n
}

// countIdle counts the keys idle at now, up to most of them, reading at
// most limit heap entries, and changing nothing. Their entries, and only
// theirs and stale ones (a deadline moved later, not yet caught up with),
// have an at <= now, and those form a subtree at the top of the heap: it
// reads just that.
func (t *table[S]) countIdle(now time.Duration, limit, most int) (n int) {
	if len(t.due) == 0 || !passed(t.due[0].at(), now) {
		return 0
	}
	stack := append(t.stack[:0], 0)
	defer func() { t.stack = stack[:0] }()
	for read := 0; len(stack) > 0 && read < limit && n < most; read++ {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if t.untouched(t.due[h].slot, now) {
			n++
		}
		for c := arity*h + 1; c <= arity*h+arity && c < len(t.due); c++ {
			if passed(t.due[c].at(), now) {
				stack = append(stack, c)
			}
		}
	}
	return n
}

func (t *table[S]) Bound(limit Limit) {
	was := t.evicting()
	t.limit = limit
	switch {
	case t.evicting() && !was:
		t.relinkAll()
	case !t.evicting():
		t.links, t.newest, t.oldest = nil, none, none
	}
}

// evicting reports whether the table keeps its keys in order of use.
func (t *table[S]) evicting() bool { return t.limit.Max > 0 && t.limit.Evict }

// full reports whether the table holds as many keys as its Limit allows,
// with the places it holds back (reserve).
func (t *table[S]) full() bool { return t.limit.Max > 0 && t.held+t.reserved >= t.limit.Max }

func (t *table[S]) reserve(n int) { t.reserved = n }

// admit makes room for a new key if the table is full: first by letting
// idle keys expire, then, if eviction is on, by evicting the least recently
// used ones. It returns errNoRoom, having let no key go, if that cannot
// make room.
func (t *table[S]) admit(now time.Duration) error {
	if !t.hasRoom(now) {
		return errNoRoom
	}
	skipped := 0 // pinned keys passed by
	for t.full() {
		switch {
		case t.dropIdle(now):
		case t.evicting() && t.oldest != none && skipped < t.pins() && t.pinned(t.oldest):
			i := t.oldest // in use: it goes to the newest end
			t.unlink(i)
			t.link(i)
			skipped++
		case t.evicting() && t.oldest != none && !t.pinned(t.oldest):
			t.remove(t.oldest)
			t.counts.Evicted++
		default:
			return errNoRoom
		}
	}
	return nil
}

// pinned reports whether the key in slot i is pinned: it has waiters
// (Keys.Pin), or it is held (Keys.Hold).
func (t *table[S]) pinned(i uint32) bool {
	if t.pins() == 0 {
		return false
	}
	key := string(t.keyBytes(t.slots[i].key))
	_, ok := t.limit.pins[key]
	return ok || t.limit.holds.has(key)
}

// pins returns how many keys may be pinned, at most.
func (t *table[S]) pins() int {
	n := len(t.limit.pins)
	if t.limit.holds != nil {
		n += len(t.limit.holds.end)
	}
	return n
}

// evictable reports whether the table holds a key it may evict: one not
// pinned. It reads at most as many keys as are pinned, plus one.
func (t *table[S]) evictable() bool {
	if !t.evicting() || t.oldest == none {
		return false
	}
	if t.held > t.pins() {
		return true
	}
	for i, read := t.oldest, 0; i != none && read <= t.pins(); i, read = t.links[i].newer, read+1 {
		if !t.pinned(i) {
			return true
		}
	}
	return false
}

// dropIdle drops one key idle at now, if the table holds one. A key whose
// rule panics is dropped too: that also makes room.
func (t *table[S]) dropIdle(now time.Duration) (dropped bool) {
	held := t.held
	t.supervised(func() {
		for len(t.due) > 0 && passed(t.due[0].at(), now) {
			if t.expireTop(now) {
				return
			}
		}
	})
	return t.held < held
}

// hasRoom reports whether admit would make room for a new key at now,
// changing nothing it would not change anyway: it brings the top of the
// heap up to date (which admit's callers cannot tell), but drops no idle
// key, unless its rule panics.
func (t *table[S]) hasRoom(now time.Duration) (ok bool) {
	if !t.full() || t.evictable() {
		return true
	}
	t.supervised(func() {
		// Again after a panic, which dropped a key: then fewer are needed.
		need := t.held + t.reserved - t.limit.Max + 1 // idle keys to drop: more than one only in a table given more keys than its cap (Restore)
		ok = need <= 0
		if ok {
			return
		}
		if need > 1 {
			ok = t.countIdle(now, math.MaxInt, need) == need
			return
		}
		for !ok && len(t.due) > 0 && passed(t.due[0].at(), now) {
			ok = t.idleTop(now)
		}
	})
	return ok || !t.full()
}

// passed reports whether a deadline has come at now. The largest Duration
// stands for every deadline past the end of the timeline, so it never
// comes: at the timeline's end, time stops, and so does expiring.
func passed(deadline, now time.Duration) bool {
	return deadline <= now && deadline != math.MaxInt64
}

// after returns now + wait, saturating at the largest Duration.
func after(now, wait time.Duration) time.Duration {
	if wait > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + wait
}
