package algorithms

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"time"
)

// Table holds the state of many keys under one rule. Not safe for concurrent
// use: one partition goroutine owns it. Its now never goes back from one
// decision (AllowN, PeekN, Refund) to the next; Expire and Counts may be
// given an earlier now, since a partition forgets keys a grace period
// behind.
//
// A partition supervises the table's rule: a panic in a decision fails
// that request and Resets its key. Expire, Counts, AppendSnapshot and
// Refund may also ask the rule about keys other than a request's; if the
// rule panics there, the table must forget the key it was asking about
// before the panic goes on, or the next call would panic on it again (the
// Keyed tables do).
type Table interface {
	// AllowN decides a request for n units on key at now, as the rule's
	// AllowN does on the key's state. A key is stored only once it is
	// allowed something, under a copy of key the table owns. A new key the
	// table has no room for is refused with ErrTooManyKeys.
	AllowN(key string, now time.Duration, n int) (Decision, error)

	// PeekN returns what AllowN would, and changes nothing.
	PeekN(key string, now time.Duration, n int) (Decision, error)

	// Refund gives back n units that the AllowN just before it, on the same
	// key at the same now, allowed.
	Refund(key string, now time.Duration, n int)

	// Reset forgets key: its next request finds it untouched.
	Reset(key string)

	// Len returns the number of keys held.
	Len() int

	// Expire forgets keys whose state is untouched at now, in the order
	// they became untouched, doing at most budget steps of work, and
	// returns how many it forgot.
	Expire(now time.Duration, budget int) int

	// Bound caps the keys the table holds from now on. A table that holds
	// more already keeps them, and makes room for a new key only once it
	// is below the cap.
	Bound(limit KeyLimit)

	// Counts returns what the table has done with its keys, and how many
	// of those it holds are untouched at now, waiting to be forgotten (a
	// count that may fall short when thousands are due at once).
	Counts(now time.Duration) Counts

	// AppendSnapshot appends to dst an entry (see NextEntry) for every key
	// not untouched at now, and returns how many. Its error wraps
	// errors.ErrUnsupported if the rule cannot save its states.
	AppendSnapshot(dst []byte, now time.Duration) ([]byte, int, error)

	// Load adds key, with a state that AppendSnapshot saved age before now,
	// unless by now it is untouched. It ignores the cap. Its error wraps
	// ErrBadSnapshot, and then the table is as it was.
	Load(key string, state []byte, now, age time.Duration) error
}

// BatchTable is a Table that decides a batch in one call. A partition uses
// AllowEach for a batch when its table has it, and AllowN item by item
// otherwise; Keyed tables have it.
type BatchTable interface {
	Table

	// AllowEach decides items[*next:] in order, exactly as AllowN would one
	// by one, and writes each answer into its item's D and Err. Before
	// deciding an item it sets *next to the item's index, so that if the
	// rule panics, the caller knows which item failed and that the items
	// before it were decided; it returns with *next at len(items).
	AllowEach(items []Item, now time.Duration, next *int)
}

// Item is one request of a batch, N units on Key, with room for its
// answer: a Decision, or an error.
type Item struct {
	Key string
	N   int
	D   Decision
	Err error
}

// Keyed returns an Algorithm whose tables keep one S per key, decided by m.
// If m is also an Expiring[S], a key is forgotten the moment a Refund
// leaves it untouched; if it is an Expiring[S] and a StateCodec[S], its
// tables can be saved in a snapshot and loaded. If m is not an
// Expiring[S], its tables keep beside each state the deadline of the
// key's latest grant.
func Keyed[S any](m Machine[S]) Algorithm {
	if e, ok := m.(Expiring[S]); ok {
		return keyed[S]{m, e}
	}
	g := granted[S]{m}
	return keyed[timed[S]]{g, g}
}

type keyed[S any] struct {
	m Machine[S]
	e Expiring[S]
}

func (k keyed[S]) Capacity() int { return k.m.Capacity() }

func (k keyed[S]) NewTable() Table {
	t := &table[S]{m: k.m, expiring: k.e, seed: maphash.MakeSeed(), newest: none, oldest: none, asking: none, keyRoom: min(math.MaxUint32, math.MaxInt)}
	t.codec, _ = k.m.(StateCodec[S])
	return t
}

// timed is the state a table keeps for a Machine that cannot tell when a
// state is untouched: the state, and the deadline of its latest grant.
type timed[S any] struct {
	s        S
	deadline time.Duration
}

// granted is the Expiring Machine over timed states that a table uses for
// a Machine that is not Expiring: a state is untouched from the deadline
// of its latest grant on, so a Refund leaves the deadline where it was
// (late, never early).
type granted[S any] struct{ m Machine[S] }

// Capacity is the machine's.
func (g granted[S]) Capacity() int { return g.m.Capacity() }

// AllowN decides on the state, and a grant moves the deadline to its
// ResetAfter.
func (g granted[S]) AllowN(s *timed[S], now time.Duration, n int) (Decision, error) {
	d, err := g.m.AllowN(&s.s, now, n)
	if d.Allowed {
		s.deadline = after(now, d.ResetAfter)
	}
	return d, err
}

// PeekN is the machine's.
func (g granted[S]) PeekN(s *timed[S], now time.Duration, n int) (Decision, error) {
	return g.m.PeekN(&s.s, now, n)
}

// Refund is the machine's, and leaves the deadline.
func (g granted[S]) Refund(s *timed[S], now time.Duration, n int) { g.m.Refund(&s.s, now, n) }

// ResetAfter returns the time until the deadline; the largest Duration,
// which stands for a deadline past the end of the timeline, never comes.
func (g granted[S]) ResetAfter(s *timed[S], now time.Duration) time.Duration {
	if s.deadline == math.MaxInt64 {
		return math.MaxInt64
	}
	return max(s.deadline-now, 0)
}

// none is the slot index that stands for no slot.
const none = ^uint32(0)

// slot is one key held, with its state inline. When the state is
// untouched again is the state's to tell (Expiring), so no deadline is
// kept beside it.
type slot[S any] struct {
	state S
	key   span   // the table's own copy, in its keys
	hash  uint32 // the key's, in the index
	due   uint32 // the slot's place in the table's due heap
}

// span is where a key's bytes lie in a table's keys. Offsets of 32 bits
// keep a slot small (and free of pointers, for a state without any, so
// the garbage collector never reads the slots); they cap a table's keys at
// 4 GiB (2 GiB where an int has 32 bits).
type span struct{ off, n uint32 }

// link is a slot's place in the recency list, kept while evicting, in a
// slice beside the slots so that a table that does not evict pays nothing.
type link struct{ newer, older uint32 }

// due is an entry of the heap that orders keys by deadline: the time from
// which their state is untouched (now + its ResetAfter). at is never after
// its key's deadline: a deadline that moves later is caught up with
// lazily, when the entry reaches the top and the state's ResetAfter is
// read.
type due struct {
	at   time.Duration
	slot uint32
}

// table keeps each key's state in a slot of one dense slice, found through
// an index (index.go); a removed slot takes the last one's place, so no free list
// has to grow while keys are forgotten. A min-heap of deadlines says which
// key becomes untouched next, so Expire and making room are exact and cost
// O(log n) per key; with eviction on, a list through the slots keeps them
// in order of use.
type table[S any] struct {
	m        Machine[S]
	expiring Expiring[S]   // m, or what keeps deadlines for it (granted)
	codec    StateCodec[S] // nil if m cannot save states
	seed     maphash.Seed
	buckets  []uint64 // the index
	held     int      // keys held
	slots    []slot[S]
	links    []link // links[i] is slots[i]'s, while evicting
	due      []due
	limit    KeyLimit
	newest   uint32 // the recency list's ends
	oldest   uint32
	counts   Counts
	keys     []byte // the bytes of every key held, end to end, and garbage
	garbage  int    // bytes in keys of keys no longer held
	keyRoom  int    // the most bytes keys may take: 4 GiB - 1, or math.MaxInt (less in tests)
	scratch  []byte
	stack    []int  // idle's
	asking   uint32 // the slot whose state the rule is asked about, or none
	zero     S      // the state of every key not held; only ever copied
	fresh    S      // a new key's state while it is decided, or PeekN's copy: a field, as &fresh escapes
}

func (t *table[S]) AllowN(key string, now time.Duration, n int) (d Decision, err error) {
	i, ok := t.lookup(key)
	if !ok {
		return t.allowNew(key, now, n)
	}
	d, err = t.m.AllowN(&t.slots[i].state, now, n) // past its deadline, it decides as untouched
	t.used(i, now, &d)
	return d, err
}

// used notes that the key in slot i was just decided d at now.
func (t *table[S]) used(i uint32, now time.Duration, d *Decision) {
	if d.Allowed {
		t.earlier(i, after(now, d.ResetAfter))
	}
	if t.evicting() {
		t.unlink(i)
		t.link(i)
	}
}

var _ BatchTable = (*table[int])(nil)

func (t *table[S]) AllowEach(items []Item, now time.Duration, next *int) {
	for k := *next; k < len(items); k++ {
		*next = k
		it := &items[k]
		// AllowN, spelled out: a Decision returned by value is copied
		// through memory at each call it passes up, and that showed.
		i, ok := t.lookup(it.Key)
		if !ok {
			it.D, it.Err = t.allowNew(it.Key, now, it.N)
			continue
		}
		it.D, it.Err = t.m.AllowN(&t.slots[i].state, now, it.N)
		t.used(i, now, &it.D)
	}
	*next = len(items)
}

// allowNew decides a request on a key the table does not hold.
func (t *table[S]) allowNew(key string, now time.Duration, n int) (Decision, error) {
	t.fresh = t.zero
	d, err := t.m.AllowN(&t.fresh, now, n)
	switch {
	case !d.Allowed || d.ResetAfter <= 0: // nothing to keep
	case !t.room(len(key)): // before admit, which may evict a key
		d, err = Decision{}, errKeysFull
	default:
		if aerr := t.admit(now); aerr != nil {
			d, err = Decision{}, aerr
		} else {
			t.insert(key, t.fresh, after(now, d.ResetAfter))
		}
	}
	t.fresh = t.zero // drop what the new state holds, if anything
	return d, err
}

func (t *table[S]) PeekN(key string, now time.Duration, n int) (Decision, error) {
	// On a copy of the state's value: PeekN changes nothing, and if it
	// panics half-way through breaking that promise, neither the key's
	// fields nor t.zero is harmed (what they point to is shared).
	if i, ok := t.lookup(key); ok {
		t.fresh = t.slots[i].state
	} else {
		t.fresh = t.zero
	}
	d, err := t.m.PeekN(&t.fresh, now, n)
	t.fresh = t.zero // hold on to nothing of the key's
	return d, err
}

func (t *table[S]) Refund(key string, now time.Duration, n int) {
	i, ok := t.lookup(key)
	if !ok {
		return
	}
	t.m.Refund(&t.slots[i].state, now, n)
	defer t.dropAsked()
	if wait := t.resetAfter(i, now); wait > 0 {
		t.earlier(i, after(now, wait))
	} else {
		t.remove(i)
		t.counts.Expired++
	}
}

func (t *table[S]) Reset(key string) {
	if i, ok := t.lookup(key); ok {
		t.remove(i)
	}
}

func (t *table[S]) Len() int { return t.held }

func (t *table[S]) Counts(now time.Duration) Counts {
	c := t.counts
	c.Idle = t.idle(now)
	return c
}

// IdleCountLimit is the most heap entries Table.Counts reads to count the
// idle keys, so that a count costs at most a fraction of a millisecond.
const IdleCountLimit = 1 << 14

// idle counts the keys untouched at now. Their entries, and only theirs
// and stale ones (a deadline moved later, not yet caught up with), have an
// at <= now, and those form a subtree at the top of the heap: it reads
// just that, changing nothing, and at most IdleCountLimit entries of it,
// so the count may fall short when more than that many are due.
func (t *table[S]) idle(now time.Duration) (n int) {
	if len(t.due) == 0 || !passed(t.due[0].at, now) {
		return 0
	}
	defer t.dropAsked()
	stack := append(t.stack[:0], 0)
	for read := 0; len(stack) > 0 && read < IdleCountLimit; read++ {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if t.untouched(t.due[h].slot, now) {
			n++
		}
		for c := arity*h + 1; c <= arity*h+arity && c < len(t.due); c++ {
			if passed(t.due[c].at, now) {
				stack = append(stack, c)
			}
		}
	}
	t.stack = stack
	return n
}

func (t *table[S]) Expire(now time.Duration, budget int) (forgot int) {
	defer t.dropAsked()
	for ; budget > 0 && len(t.due) > 0 && passed(t.due[0].at, now); budget-- {
		if t.expireTop(now) {
			forgot++
		}
	}
	if forgot > 0 {
		t.shrink()
	}
	return forgot
}

// expireTop forgets the key at the top of the due heap if it is untouched
// at now, and reports whether it did; if the key's deadline has moved on,
// it moves its entry down to it instead.
func (t *table[S]) expireTop(now time.Duration) bool {
	i := t.due[0].slot
	if wait := t.resetAfter(i, now); wait > 0 {
		t.due[0].at = after(now, wait)
		t.down(0)
		return false
	}
	t.remove(i)
	t.counts.Expired++
	return true
}

func (t *table[S]) Bound(limit KeyLimit) {
	was := t.evicting()
	t.limit = limit
	switch {
	case t.evicting() && !was:
		t.links = make([]link, len(t.slots), cap(t.slots))
		t.newest, t.oldest = none, none
		for _, d := range t.due { // the order of use is unknown: take the heap's
			t.link(d.slot)
		}
	case !t.evicting():
		t.links, t.newest, t.oldest = nil, none, none
	}
}

// evicting reports whether the table keeps its keys in order of use.
func (t *table[S]) evicting() bool { return t.limit.Max > 0 && t.limit.Evict }

// admit makes room for a new key if the table is full: first by
// forgetting an untouched key, then, if eviction is on, by dropping the
// least recently used one. It returns ErrTooManyKeys if neither can be
// done.
func (t *table[S]) admit(now time.Duration) error {
	for t.limit.Max > 0 && t.held >= t.limit.Max {
		switch {
		case t.dropUntouched(now):
		case t.evicting() && t.oldest != none:
			t.remove(t.oldest)
			t.counts.Evicted++
		default:
			return ErrTooManyKeys
		}
	}
	return nil
}

// dropUntouched forgets one key untouched at now, if the table holds one.
func (t *table[S]) dropUntouched(now time.Duration) bool {
	defer t.dropAsked()
	for len(t.due) > 0 && passed(t.due[0].at, now) {
		if t.expireTop(now) {
			return true
		}
	}
	return false
}

// untouched reports whether the state in slot i is untouched at now.
func (t *table[S]) untouched(i uint32, now time.Duration) bool {
	return t.resetAfter(i, now) <= 0
}

// resetAfter returns the ResetAfter of the state in slot i, noting in
// asking that it asks, for dropAsked.
func (t *table[S]) resetAfter(i uint32, now time.Duration) time.Duration {
	t.asking = i
	wait := t.expiring.ResetAfter(&t.slots[i].state, now)
	t.asking = none
	return wait
}

// dropAsked is deferred by each method that asks the rule about a key
// outside a decision on it (resetAfter, appendKey). If the rule panicked,
// the key it was asked about is forgotten as the panic goes on (to the
// partition's supervision): a state that cannot tell when it is untouched
// would otherwise stay at the top of the heap and fail every later
// Expire, count and new key. (One defer a call, not one a key asked.)
func (t *table[S]) dropAsked() {
	if i := t.asking; i != none {
		t.asking = none
		t.remove(i)
	}
}

// insert stores a new key whose state is untouched from deadline on;
// admit has made room for it, and room for its bytes.
func (t *table[S]) insert(key string, s S, deadline time.Duration) {
	sp := t.store(key)
	i, h := uint32(len(t.slots)), t.hash(key)
	t.slots = append(t.slots, slot[S]{state: s, key: sp, hash: h, due: uint32(len(t.due))})
	t.place(key, h, i)
	t.due = append(t.due, due{at: deadline, slot: i})
	t.up(len(t.due) - 1)
	if t.evicting() {
		t.links = append(t.links, link{})
		t.link(i)
	}
}

// remove forgets the key in slot i.
func (t *table[S]) remove(i uint32) {
	sl := &t.slots[i]
	t.unplace(i)
	if t.evicting() {
		t.unlink(i)
	}
	h := int(sl.due)
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
	t.garbage += int(t.slots[i].key.n)
	last = len(t.slots) - 1
	if int(i) != last {
		t.move(uint32(last), i)
	}
	t.slots[last] = slot[S]{} // drop whatever the state held
	t.slots = t.slots[:last]
	if last == 0 {
		t.keys, t.garbage = t.keys[:0], 0
		if cap(t.keys) >= minShrink {
			t.keys = nil // a flood's worth: give it back
		}
	}
	if t.evicting() {
		t.links = t.links[:last]
	}
}

// move puts the key in slot from into slot to, which is free.
func (t *table[S]) move(from, to uint32) {
	t.replace(from, to)
	t.slots[to] = t.slots[from]
	sl := &t.slots[to]
	t.due[sl.due].slot = to
	if !t.evicting() {
		return
	}
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

// earlier tells the heap slot i's new deadline. A later one is left for
// the heap to catch up with; an earlier one moves its entry up now.
func (t *table[S]) earlier(i uint32, deadline time.Duration) {
	if h := int(t.slots[i].due); deadline < t.due[h].at {
		t.due[h].at = deadline
		t.up(h)
	}
}

// errKeysFull refuses a key that the table's keys have no room for.
var errKeysFull = fmt.Errorf("%w: a table's key bytes, with up to a quarter not yet squeezed out, fill 4 GiB (2 GiB where an int has 32 bits)", ErrTooManyKeys)

// room reports whether n more bytes of keys fit under keyRoom. If they do
// not, it squeezes the garbage out first when that makes them fit and
// frees at least a quarter of keys, so that a table at the cap copies its
// keys once per quarter forgotten, not for every new key. (Near 4 GiB that
// one copy is long, and needs the memory twice over while it lasts.)
func (t *table[S]) room(n int) bool {
	if n <= t.keyRoom-len(t.keys) {
		return true
	}
	live := len(t.keys) - t.garbage
	if n > t.keyRoom-live || t.garbage < len(t.keys)/4 {
		return false
	}
	t.squeeze(n)
	return true
}

// store copies key into keys, which room has said it fits, and returns
// where it lies. When keys is full and at least half of it is garbage, it
// squeezes the garbage out instead of growing, so that a byte forgotten
// costs at most a byte copied.
func (t *table[S]) store(key string) span {
	if len(t.keys)+len(key) > cap(t.keys) && t.garbage >= len(t.keys)-t.garbage {
		t.squeeze(len(key))
	}
	sp := span{uint32(len(t.keys)), uint32(len(key))}
	t.keys = append(t.keys, key...)
	return sp
}

// minShrink is the capacity of keys below which shrink leaves it be, and
// maxShrink the most bytes of keys it copies.
const (
	minShrink = 64 << 10
	maxShrink = 1 << 20
)

// shrink gives back the garbage of forgotten keys once few keys are left:
// when three quarters of keys or more are garbage, and squeezing reads at
// most IdleCountLimit slots and copies at most maxShrink bytes, so that it
// never stalls the partition for long (well under a millisecond). The
// garbage of a table with more keys waits until keys fills up (store).
func (t *table[S]) shrink() {
	live := len(t.keys) - t.garbage
	if cap(t.keys) >= minShrink && t.garbage/3 >= live && live <= maxShrink && len(t.slots) <= IdleCountLimit {
		t.squeeze(0)
	}
}

// squeeze copies the keys held into a new slice, with room for extra bytes
// more and a quarter to grow (within keyRoom), and drops the garbage.
// live + extra never passes keyRoom.
func (t *table[S]) squeeze(extra int) {
	live := len(t.keys) - t.garbage
	size := live + extra
	keys := make([]byte, 0, size+min(live/4, t.keyRoom-size))
	for i := range t.slots {
		sp := &t.slots[i].key
		off := len(keys)
		keys = append(keys, t.keyBytes(*sp)...)
		sp.off = uint32(off)
	}
	t.keys, t.garbage = keys, 0
}

// keyBytes returns the bytes of the key at sp; they alias the table's.
func (t *table[S]) keyBytes(sp span) []byte { return t.keys[sp.off : sp.off+sp.n : sp.off+sp.n] }

// passed reports whether a deadline has come at now. The largest Duration
// stands for every deadline past the end of the timeline, so it never
// comes: at the timeline's end, time stops, and so does forgetting.
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

// The due heap is 4-ary: a child of h is at arity×h + 1 to arity×h + arity.
// Its four children share a cache line, and its depth is half a binary
// heap's, which matters because every level moved writes the moved slot's
// place: a write to a random slot, a cache miss when keys are many.
const arity = 4

// up moves the entry at h up to its place.
func (t *table[S]) up(h int) {
	e := t.due[h]
	for h > 0 {
		parent := (h - 1) / arity
		if t.due[parent].at <= e.at {
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
			if t.due[c].at < t.due[least].at {
				least = c
			}
		}
		if t.due[least].at >= e.at {
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

// errNoCodec is returned by the snapshot methods of a table whose rule
// cannot save its states.
var errNoCodec = fmt.Errorf("%w: the algorithm cannot save its states (its Machine is not a StateCodec and an Expiring)", errors.ErrUnsupported)

func (t *table[S]) AppendSnapshot(dst []byte, now time.Duration) ([]byte, int, error) {
	if t.codec == nil {
		return dst, 0, errNoCodec
	}
	defer t.dropAsked()
	keys := 0
	for _, d := range t.due {
		if t.untouched(d.slot, now) {
			continue
		}
		dst = t.appendKey(dst, d.slot, now)
		keys++
	}
	return dst, keys, nil
}

// appendKey appends the entry of the key in slot i, noting in asking that
// it asks the rule (see dropAsked): a key whose state panics is forgotten,
// so the next snapshot does not fail on it too.
func (t *table[S]) appendKey(dst []byte, i uint32, now time.Duration) []byte {
	sl := &t.slots[i]
	t.asking = i
	t.scratch = t.codec.AppendState(t.scratch[:0], &sl.state, now)
	t.asking = none
	return appendEntry(dst, t.keyBytes(sl.key), t.scratch)
}

func (t *table[S]) Load(key string, state []byte, now, age time.Duration) error {
	if t.codec == nil {
		return fmt.Errorf("%w: %w", ErrBadSnapshot, errNoCodec)
	}
	if _, ok := t.lookup(key); ok {
		return fmt.Errorf("%w: key %q appears twice", ErrBadSnapshot, key)
	}
	var s S
	if err := t.codec.ParseState(state, &s, now, age); err != nil {
		return fmt.Errorf("%w: key %q: %w", ErrBadSnapshot, key, err)
	}
	wait := t.expiring.ResetAfter(&s, now)
	if wait <= 0 {
		return nil // untouched by now
	}
	if !t.room(len(key)) {
		return fmt.Errorf("%w: key %q: %w", ErrBadSnapshot, key, errKeysFull)
	}
	t.insert(key, s, after(now, wait))
	return nil
}
