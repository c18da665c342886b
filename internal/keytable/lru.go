package keytable

// While a table evicts (Limit.Evict), a list through its slots keeps them
// in order of use, so that the least recently used key is at hand; the
// links live in a slice beside the slots, so that a table that does not
// evict pays nothing for them.

// link is a slot's place in the recency list.
type link struct{ newer, older uint32 }

// link puts slot i at the newest end of the recency list.
func (t *table[S]) link(i uint32) {
	ln := &t.links[i]
	ln.newer, ln.older = none, t.newest
	if t.newest != none {
		t.links[t.newest].newer = i
	} else {
		t.oldest = i
	}
	t.newest = i
}

// linkOldest puts slot i at the oldest end of the recency list.
func (t *table[S]) linkOldest(i uint32) {
	ln := &t.links[i]
	ln.newer, ln.older = t.oldest, none
	if t.oldest != none {
		t.links[t.oldest].older = i
	} else {
		t.newest = i
	}
	t.oldest = i
}

// unlink takes slot i out of the recency list.
func (t *table[S]) unlink(i uint32) {
	ln := &t.links[i]
	if ln.newer != none {
		t.links[ln.newer].older = ln.older
	} else {
		t.newest = ln.older
	}
	if ln.older != none {
		t.links[ln.older].newer = ln.newer
	} else {
		t.oldest = ln.newer
	}
	ln.newer, ln.older = none, none
}

// relink moves slot from's place in the list to slot to, which is free.
func (t *table[S]) relink(from, to uint32) {
	ln := t.links[from]
	t.links[to] = ln
	if ln.newer != none {
		t.links[ln.newer].older = to
	} else {
		t.newest = to
	}
	if ln.older != none {
		t.links[ln.older].newer = to
	} else {
		t.oldest = to
	}
}

// relinkAll makes the list anew for every slot held. The order of use is
// unknown then: it takes the heap's.
func (t *table[S]) relinkAll() {
	t.links = make([]link, len(t.slots), cap(t.slots))
	t.newest, t.oldest = none, none
	for _, d := range t.due {
		t.link(d.slot)
	}
}
