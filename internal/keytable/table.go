package keytable

import (
	"math"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// none is the slot index that stands for no slot.
const none = ^uint32(0)

// slot is one key held, with its state inline. When the state is
// untouched again is the rule's to tell (Expiring), so no deadline is kept
// beside it.
type slot[S any] struct {
	state S
	key   span   // the table's own copy, in its keys
	due   uint32 // the slot's place in the table's due heap
}

// table keeps each key's state in a slot of one dense slice, found through
// an index (index.go); a dropped slot takes the last one's place, so no
// free list has to grow while keys come and go. A min-heap of deadlines
// (heap.go) says which key becomes idle next, so expiring and making room
// are exact and cost O(log n) per key; with eviction on, a list through
// the slots (lru.go) keeps them in order of use.
type table[S any] struct {
	policyRules[S]                       // the first policy's rule, whose states live in the slots
	set            *Set                  // the policies the table's keys are under
	capacity       int                   // the set's: the largest n a key may be allowed
	name           string                // the first policy's name, for its decisions
	multi          bool                  // more than one policy, or a dry-run one: decisions are combined (decideAll)
	cols           []column              // every policy's states, in the set's order: the head, then one column each
	ds             []algorithms.Decision // a decision per policy, while decideAll combines them
	buckets        []uint32              // the index
	held           int                   // keys held
	slots          []slot[S]
	links          []link // links[i] is slots[i]'s, while evicting
	due            []due
	limit          Limit
	reserved       int    // places under the cap held back for keys not carried over yet (Keys.carried)
	newest         uint32 // the recency list's ends
	oldest         uint32
	counts         Counts
	wouldDeny      []uint64 // per policy of set: the decisions it would have denied, if it is a dry-run one
	keys           []byte   // the bytes of every key held, end to end, and garbage
	garbage        int      // bytes in keys of keys no longer held
	keyRoom        int      // the most bytes keys may take: 4 GiB - 1, or math.MaxInt (less in tests)
	scratch        []byte   // appendKey's: a key's states
	state          []byte   // appendKey's: one of them
	stack          []int    // idle's
	asking         uint32   // the slot whose state the rule is asked about, or none
	batch          []Item   // the batch AllowEach is deciding, and the item it is on
	item           int
	zero           S                   // the state of every key not held; only ever copied
	fresh          S                   // the first policy's state of a key the table does not hold, while it is decided or loaded, or PeekN's copy: a field, as &fresh escapes
	peeked         algorithms.Decision // quota's: a decision passed to a column escapes
	keepFor        time.Duration       // decideAll's: how long the decision it made keeps the key (keep)
}

var _ setTable = (*table[int])(nil)

func newTable[S any](set *Set, rules policyRules[S], extra []column) *table[S] {
	t := &table[S]{
		policyRules: rules,
		set:         set,
		capacity:    set.capacity,
		name:        set.policies[0].Name,
		multi:       len(extra) > 0 || set.HasDryRun(),
		newest:      none,
		oldest:      none,
		asking:      none,
		keyRoom:     min(math.MaxUint32, math.MaxInt),
	}
	t.cols = append([]column{head[S]{t}}, extra...)
	if t.multi {
		t.ds = make([]algorithms.Decision, len(t.cols))
	}
	if set.HasDryRun() {
		t.wouldDeny = make([]uint64, len(t.cols))
	}
	return t
}

func (t *table[S]) AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	return t.allowN(key, now, n, d, dryTake)
}

func (t *table[S]) AllowTurn(key string, now time.Duration, n int, d *algorithms.Decision) error {
	return t.allowN(key, now, n, d, dryOnGrant)
}

// allowN is AllowN, and AllowTurn with dry dryOnGrant.
func (t *table[S]) allowN(key string, now time.Duration, n int, d *algorithms.Decision, dry dryMode) error {
	if n > t.capacity {
		*d = algorithms.Decision{}
		return t.set.exceeds(n)
	}
	i, ok := t.lookup(key)
	if !ok {
		return t.allowNew(key, now, n, d, dry)
	}
	if err := t.ask(i, func() {
		if t.multi {
			t.decideAll(i, now, n, d, true, dry)
			return
		}
		t.m.AllowN(&t.slots[i].state, now, n, d)
		d.Policy = t.name
	}); err != nil {
		*d = algorithms.Decision{}
		return err
	}
	t.used(i, now, d)
	return nil
}

// used notes that the key in slot i was just decided d at now.
func (t *table[S]) used(i uint32, now time.Duration, d *algorithms.Decision) {
	if wait := t.keep(d); wait > 0 {
		t.earlier(i, after(now, wait))
	}
	if t.evicting() {
		t.unlink(i)
		t.link(i)
	}
}

// allowNew decides a request on a key the table does not hold, on the
// fresh states.
func (t *table[S]) allowNew(key string, now time.Duration, n int, d *algorithms.Decision, dry dryMode) (err error) {
	err = t.ask(none, func() {
		if t.multi {
			t.decideAll(none, now, n, d, true, dry)
			return
		}
		t.m.AllowN(&t.fresh, now, n, d)
		d.Policy = t.name
	})
	switch {
	case err != nil:
	case t.keep(d) <= 0: // nothing to keep
	case !t.room(len(key)): // before admit, which may evict a key
		err = errKeysFull
	default:
		if err = t.admit(now); err == nil {
			t.insert(key, after(now, t.keep(d)))
		}
	}
	if err != nil {
		*d = algorithms.Decision{}
	}
	t.clearFresh() // drop what the new states hold, if anything
	return err
}

func (t *table[S]) AllowEach(items []Item, now time.Duration) { t.allowEach(items, now, nil, 0) }

// allowEach is AllowEach over the items k with pick[k] == want, or over
// every item if pick is nil.
func (t *table[S]) allowEach(items []Item, now time.Duration, pick []int32, want int32) {
	t.batch = items
	defer func() { t.batch = nil }()
	for k := 0; k < len(items); k++ {
		// One supervision covers the run of items: a panic fails the item
		// it came on, and the run goes on after it.
		err := supervise.Call(actor.ErrAlgorithmPanic, func() {
			for ; k < len(items); k++ {
				if items[k].Skip || (pick != nil && pick[k] != want) {
					continue
				}
				t.item = k
				it := &items[k]
				if it.N > t.capacity {
					it.D, it.Err = algorithms.Decision{}, t.set.exceeds(it.N)
					continue
				}
				// AllowN, spelled out: a call less per item.
				i, ok := t.lookupItem(it)
				if !ok {
					it.Err = t.allowNew(it.Key, now, it.N, &it.D, dryTake)
					continue
				}
				t.asking = i
				if t.multi {
					t.decideAll(i, now, it.N, &it.D, true, dryTake)
				} else {
					t.m.AllowN(&t.slots[i].state, now, it.N, &it.D)
					it.D.Policy = t.name
				}
				t.asking = none
				it.Err = nil
				t.used(i, now, &it.D)
			}
		})
		if err != nil {
			items[k].D, items[k].Err = algorithms.Decision{}, err
			t.dropAsked()
		}
	}
}

func (t *table[S]) PeekN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if n > t.capacity {
		*d = algorithms.Decision{}
		return t.set.exceeds(n)
	}
	i, held := t.lookup(key)
	if !held {
		i = none
	}
	err := t.ask(i, func() {
		if t.multi {
			t.decideAll(i, now, n, d, false, dryPeek)
			return
		}
		// On a copy of the state's value: PeekN changes nothing, and if
		// it panics half-way through breaking that promise, t.zero is not
		// harmed.
		if held {
			t.fresh = t.slots[i].state
		}
		t.m.PeekN(&t.fresh, now, n, d)
		d.Policy = t.name
	})
	t.clearFresh() // hold on to nothing of the key's
	switch {
	case err != nil:
	case held || t.keep(d) <= 0: // AllowN would not store the key
	case !t.fits(len(key)):
		err = errKeysFull
	case !t.hasRoom(now):
		err = errNoRoom
	}
	if err != nil {
		*d = algorithms.Decision{}
	}
	return err
}

func (t *table[S]) Refund(key string, now time.Duration, n int) error {
	return t.refund(key, now, n, false)
}

func (t *table[S]) GiveBack(key string, now time.Duration, n int) error {
	return t.refund(key, now, n, true)
}

// refund is Refund, or with enforcedOnly GiveBack.
func (t *table[S]) refund(key string, now time.Duration, n int, enforcedOnly bool) error {
	i, ok := t.lookup(key)
	if !ok {
		return nil
	}
	var wait time.Duration
	if err := t.ask(i, func() {
		if enforcedOnly {
			t.giveBack(i, now, n)
		} else {
			for _, c := range t.cols {
				c.refund(i, now, n)
			}
		}
		wait = t.stateResetAfter(i, now)
	}); err != nil {
		return err // the key is dropped
	}
	t.earlier(i, after(now, max(wait, 0))) // idle from then on, like any key
	return nil
}

func (t *table[S]) Reset(key string) {
	if i, ok := t.lookup(key); ok {
		t.remove(i)
	}
}

func (t *table[S]) Len() int { return t.held }

func (t *table[S]) Abandoned() {
	t.dropAsked()
	t.clearFresh()
}

// clearFresh makes every policy's fresh state untouched again.
func (t *table[S]) clearFresh() {
	t.fresh = t.zero
	for _, c := range t.cols[1:] {
		c.clearFresh()
	}
}

// ask runs f, which calls the rule about the key in slot i (none for a
// state the table does not hold), under supervision: if the rule panics,
// the key is dropped, the panic counted, and ask returns its error.
func (t *table[S]) ask(i uint32, f func()) error {
	t.asking = i
	err := supervise.Call(actor.ErrAlgorithmPanic, f)
	if err != nil {
		t.dropAsked()
	}
	t.asking = none
	return err
}

// supervised runs work, which calls the rule about one key after another,
// noting each in asking (as resetAfter does), under one supervision for
// them all: if the rule panics, the key it was asked about is dropped, the
// panic counted, and work runs again, to go on from where it was or start
// afresh, until it returns.
func (t *table[S]) supervised(work func()) {
	for {
		err := supervise.Call(actor.ErrAlgorithmPanic, work)
		if err == nil {
			return
		}
		if t.asking == none {
			panic(err) // not the rule's: a bug of the table's own
		}
		t.dropAsked()
	}
}

// dropAsked drops the key whose state the rule was asked about when it
// panicked, and counts the panic.
func (t *table[S]) dropAsked() {
	if i := t.asking; i != none {
		t.asking = none
		t.remove(i)
	}
	t.counts.Panicked++
}

// resetAfter returns the time until the key in slot i is untouched,
// noting in asking that it asks, for supervised.
func (t *table[S]) resetAfter(i uint32, now time.Duration) time.Duration {
	t.asking = i
	wait := t.stateResetAfter(i, now)
	t.asking = none
	return wait
}

// stateResetAfter returns the time until the key in slot i (none: the
// fresh states) is untouched under every policy: the largest of their
// ResetAfters.
func (t *table[S]) stateResetAfter(i uint32, now time.Duration) time.Duration {
	if !t.multi {
		s := &t.fresh
		if i != none {
			s = &t.slots[i].state
		}
		return t.e.ResetAfter(s, now)
	}
	var wait time.Duration
	for _, c := range t.cols {
		wait = max(wait, c.resetAfter(i, now))
	}
	return wait
}

// untouched reports whether the state in slot i is untouched at now.
func (t *table[S]) untouched(i uint32, now time.Duration) bool {
	return t.resetAfter(i, now) <= 0
}

// insert stores a new key, with the fresh states, untouched from deadline
// on; admit has made room for it, and room for its bytes. The fresh
// states are untouched again after.
func (t *table[S]) insert(key string, deadline time.Duration) {
	sp := t.store(key)
	i, h := uint32(len(t.slots)), t.hash(key)
	t.slots = append(t.slots, slot[S]{state: t.fresh, key: sp, due: uint32(len(t.due))})
	t.fresh = t.zero
	for _, c := range t.cols[1:] {
		c.push()
	}
	t.place(key, h, i)
	t.due = append(t.due, newDue(deadline, i))
	t.up(len(t.due) - 1)
	if t.evicting() {
		t.links = append(t.links, link{})
		t.link(i)
	}
}

// remove drops the key in slot i, whose place the last slot takes.
func (t *table[S]) remove(i uint32) {
	if t.batch != nil {
		t.gone(i)
	}
	t.unplace(i)
	if t.evicting() {
		t.unlink(i)
	}
	t.unqueue(int(t.slots[i].due))
	t.garbage += t.sizeAt(t.slots[i].key)
	last := len(t.slots) - 1
	if int(i) != last {
		t.move(uint32(last), i)
	}
	t.slots[last] = slot[S]{} // drop whatever the state held
	t.slots = t.slots[:last]
	for _, c := range t.cols[1:] {
		c.pop()
	}
	if last == 0 {
		t.emptyKeys()
	}
	if t.evicting() {
		t.links = t.links[:last]
	}
}

// gone marks the items of the batch before the one being decided that
// were granted on the key in slot i, which is being dropped (Item.Gone).
func (t *table[S]) gone(i uint32) {
	key := t.keyBytes(t.slots[i].key)
	for k := range t.item {
		if it := &t.batch[k]; it.D.Allowed && it.Key == string(key) {
			it.Gone = true
		}
	}
}

// move puts the key in slot from into slot to, which is free.
func (t *table[S]) move(from, to uint32) {
	t.replace(from, to)
	t.slots[to] = t.slots[from]
	for _, c := range t.cols[1:] {
		c.move(from, to)
	}
	t.due[t.slots[to].due].slot = to
	if t.evicting() {
		t.relink(from, to)
	}
}
