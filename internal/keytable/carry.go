package keytable

import "time"

// What a partition's Keys needs of its tables to move keys between them:
// when the router's policies change, every key of the old table goes to
// the new one; when a key's override is set or cleared, that key goes from
// one table to another. A key keeps its state under each policy whose name
// and algorithm both tables' sets share (adopted by the new rule, see
// give), and starts untouched under the others.

func (t *table[S]) policySet() *Set   { return t.set }
func (t *table[S]) columns() []column { return t.cols }

func (t *table[S]) tally() Counts {
	c := t.counts
	c.Idle = 0
	for j, n := range t.wouldDeny {
		c.AddWouldDeny(t.set.policies[j].Name, n)
	}
	return c
}

func (t *table[S]) clearTally() {
	t.counts = Counts{}
	clear(t.wouldDeny)
}

func (t *table[S]) each(f func(i uint32, key []byte)) {
	if t.evicting() {
		for i := t.newest; i != none; i = t.links[i].older {
			f(i, t.keyBytes(t.slots[i].key))
		}
		return
	}
	for i := len(t.slots) - 1; i >= 0; i-- {
		f(uint32(i), t.keyBytes(t.slots[i].key))
	}
}

func (t *table[S]) dropFirst(n int) {
	for ; n > 0 && t.held > 0; n-- {
		if t.evicting() {
			t.remove(t.newest)
		} else {
			t.remove(uint32(t.held - 1)) // the last: none moves
		}
	}
}

func (t *table[S]) carry(from setTable, i uint32, now time.Duration) {
	fs, fc := from.policySet(), from.columns()
	err := t.ask(none, func() {
		for j := range t.set.policies {
			k := fs.index(&t.set.policies[j])
			// A state untouched under the old policy is untouched under
			// the new: an idle key decides as a key never seen, whether
			// or not its partition has let it go yet.
			if k >= 0 && fc[k].resetAfter(i, now) > 0 {
				fc[k].give(i, t.cols[j], now, fs.policies[k].Params == t.set.policies[j].Params)
			}
		}
	})
	if err != nil {
		t.clearFresh()
	}
}

func (t *table[S]) keepFresh(key string, now time.Duration, oldest bool) {
	if i, ok := t.lookup(key); ok {
		t.remove(i)
	}
	var wait time.Duration
	switch err := t.ask(none, func() { wait = t.stateResetAfter(none, now) }); {
	case err != nil: // counted as the rule's panic
	case wait <= 0:
		t.counts.Expired++ // idle under its new policies: let go, as Expire would
	case t.room(len(key)):
		t.insert(key, after(now, wait))
		if i := uint32(len(t.slots) - 1); oldest && t.evicting() { // the slot insert took
			t.unlink(i)
			t.linkOldest(i)
		}
	}
	t.clearFresh()
}

func (t *table[S]) slotOf(key string) uint32 {
	if i, ok := t.lookup(key); ok {
		return i
	}
	return none
}

func (t *table[S]) drop(i uint32) { t.remove(i) }

// moveKey moves key, if from holds it, into to, at now: at the oldest
// end of to's order of use if oldest, else at the newest.
func moveKey(key string, from, to setTable, now time.Duration, oldest bool) {
	i := from.slotOf(key)
	if i == none {
		return
	}
	to.carry(from, i, now)
	from.drop(i)
	to.keepFresh(key, now, oldest)
}
