package keytable

import (
	"maps"
	"slices"
	"time"

	"github.com/chanlimit/chanlimit/actor"
)

// Keys is the keys of one partition, each under the router's policies or
// under an override of its own: the Table a partition owns. The keys under
// the router's policies share one table; the keys whose overrides hold the
// same policies share another, made when the first of them is set and let
// go when the last is cleared. The cap on keys (Bound) applies to the
// router's table alone: keys with an override are as many as their
// overrides, which the router caps itself.
//
// An override lives in Keys, apart from the state of its key: it outlives
// the key's state being let go, and only ClearOverride removes it.
type Keys struct {
	def       setTable                  // the keys under the router's policies
	behind    setTable                  // the router's table before SetPolicies switched it, with the keys not carried over yet, or nil
	switched  time.Duration             // when SetPolicies switched: behind's keys are carried over as of then
	sweeping  bool                      // settle is carrying behind's keys over
	swept     int                       // the keys of behind it has carried, or is carrying
	overrides map[string]*overrideTable // each key with an override, and the table it is in
	bySet     map[string]*overrideTable // the tables of overrides, by their Set's id
	list      []*overrideTable          // the same, for Expire to take in turn
	next      int                       // the one Expire takes next
	limit     Limit
	retired   Counts           // the counts of tables let go
	asking    setTable         // the table calling into a rule, for Abandoned
	moving    setTable         // the table a key is moving out of (SetOverride, ClearOverride), for Abandoned
	movingKey string           // that key
	pinned    pins             // the keys the partition has callers waiting on, never evicted (Pin)
	held      holds            // the keys held, and until when (hold.go): never evicted either
	marked    []int            // AllowEach's: the items on keys held
	changed   changes          // what changed in the policies keys are under, until Changed
	pick      []int32          // AllowEach's: which table each item goes to
	picked    []*overrideTable // AllowEach's: the override tables among them
}

// changes are what changed in the policies a Keys' keys are under: every
// key's, or those of a few keys. Past maxChanged keys they count as every
// key's, so that a Keys nobody asks (one being loaded) holds little.
type changes struct {
	all  bool
	keys []string
}

// maxChanged is the most keys changes lists before it counts every key
// as changed.
const maxChanged = 64

// key notes that key's policies changed.
func (c *changes) key(key string) {
	if c.all {
		return
	}
	if len(c.keys) == maxChanged {
		c.every()
		return
	}
	c.keys = append(c.keys, key)
}

// every notes that every key's policies changed.
func (c *changes) every() {
	c.all = true
	clear(c.keys)
	c.keys = c.keys[:0]
}

// Changed returns what changed since it was last called (see Table).
func (k *Keys) Changed() (all bool, keys []string) {
	c := &k.changed
	all, keys = c.all, c.keys
	c.all, c.keys = false, c.keys[:0]
	return all, keys
}

// overrideTable is the table of the keys whose override holds one Set.
type overrideTable struct {
	set   *Set
	table setTable
	keys  int // whose override it is
	at    int // its place in Keys.list, and 1 + its mark in AllowEach's pick
}

// What a partition finds Keys can do beside its Table (actor's optional
// interfaces).
var (
	_ Table           = (*Keys)(nil)
	_ actor.Batcher   = (*Keys)(nil)
	_ actor.Foreseer  = (*Keys)(nil)
	_ actor.Pinner    = (*Keys)(nil)
	_ actor.Quoter    = (*Keys)(nil)
	_ actor.DryRunner = (*Keys)(nil)
	_ actor.Changer   = (*Keys)(nil)
	_ actor.Abandoner = (*Keys)(nil)
)

// NewKeys returns the empty keys of a partition under the router's
// policies, set.
func NewKeys(set *Set) *Keys {
	return &Keys{def: set.newTable(), pinned: make(pins)}
}

// tableOf returns the table that holds, or would hold, key.
func (k *Keys) tableOf(key string) setTable {
	if len(k.overrides) > 0 { // a map read only when there are overrides
		if o, ok := k.overrides[key]; ok {
			return o.table
		}
	}
	if k.behind != nil {
		k.carry(key)
		if k.behind != nil && k.limit.Max > 0 && k.def.slotOf(key) == none && k.Capped() >= k.limit.Max {
			// A new key at the cap: it may make room by letting an idle
			// key go, or evicting the least recently used, among keys
			// still left behind too, which only the router's table can do.
			k.settle()
		}
	}
	return k.def
}

func (k *Keys) Quota(key string, now time.Duration, q *Quota) (bool, error) {
	t := k.tableOf(key)
	k.asking = t
	q.Set = t.policySet()
	var err error
	q.Policies, err = t.quota(key, now, q.Policies[:0])
	k.asking = nil
	return err == nil, err
}

// Expire expires the router's table with three quarters of budget and,
// with the rest, one override table, each in turn from one call to the
// next: at most budget steps in all. Keys a switch of the router's
// policies left behind wait to be carried over (their state is to be
// read under the new policies, as of the switch), not expired.
func (k *Keys) Expire(now time.Duration, budget int) int {
	if len(k.held.ends) > 0 {
		budget -= k.held.expire(now, budget/2)
	}
	rest := 0
	if len(k.list) > 0 {
		rest = max(budget/4, 1)
	}
	dropped := k.expire(k.def, now, budget-rest)
	if rest > 0 {
		k.next %= len(k.list)
		dropped += k.expire(k.list[k.next].table, now, rest)
		k.next++
	}
	return dropped
}

// expire expires t, noted as the table asking.
func (k *Keys) expire(t setTable, now time.Duration, budget int) int {
	k.asking = t
	dropped := t.Expire(now, budget)
	k.asking = nil
	return dropped
}

func (k *Keys) Len() int {
	n := k.Capped()
	for _, o := range k.list {
		n += o.table.Len()
	}
	return n
}

func (k *Keys) Counts(now time.Duration) Counts {
	c := k.retired
	c.WouldDeny = maps.Clone(c.WouldDeny) // the retired counts' own stay as they are
	k.asking = k.def
	c.add(k.def.Counts(now))
	if k.behind != nil {
		k.asking = k.behind
		c.add(k.behind.Counts(now))
	}
	for _, o := range k.list {
		k.asking = o.table
		c.add(o.table.Counts(now))
	}
	k.asking = nil
	return c
}

// add adds o's counts to c's.
func (c *Counts) add(o Counts) {
	c.Expired += o.Expired
	c.Evicted += o.Evicted
	c.Panicked += o.Panicked
	c.Idle += o.Idle
	for name, n := range o.WouldDeny {
		c.AddWouldDeny(name, n)
	}
}

func (k *Keys) Bound(limit Limit) {
	limit.pins, limit.holds = k.pinned, &k.held
	k.limit = limit
	k.def.Bound(limit)
}

// AppendSnapshot appends the entries of the router's table, then those of
// the override tables, having carried over the keys a switch of the
// router's policies left behind. Which policies a key's states are under
// is for Overrides to say.
func (k *Keys) AppendSnapshot(dst []byte, now time.Duration) ([]byte, int, error) {
	k.settle()
	k.asking = k.def
	dst, n, err := k.def.AppendSnapshot(dst, now)
	for _, o := range k.list {
		if err != nil {
			break
		}
		var m int
		k.asking = o.table
		dst, m, err = o.table.AppendSnapshot(dst, now)
		n += m
	}
	k.asking = nil
	return dst, n, err
}

// Load loads key into the table of its override, if SetOverride has given
// it one, or into the router's.
func (k *Keys) Load(key string, states []byte, now, age time.Duration) error {
	t := k.tableOf(key)
	k.asking = t
	err := t.Load(key, states, now, age)
	k.asking = nil
	return err
}

// Replace takes the keys and the overrides of other, a *Keys, which is left
// empty. k keeps its counts and its Limit; other's counts are dropped.
// Holds are dropped with the keys: a table's keys are other's now.
func (k *Keys) Replace(other Table) {
	o := other.(*Keys)
	o.settle()
	k.retire(k.def)
	if k.behind != nil {
		k.retire(k.behind)
		k.behind = nil
	}
	for _, sh := range k.list {
		k.retire(sh.table)
	}
	k.def, k.overrides, k.bySet, k.list, k.next = o.def, o.overrides, o.bySet, o.list, 0
	k.def.clearTally()
	for _, sh := range k.list {
		sh.table.clearTally()
	}
	k.def.Bound(k.limit)
	k.held.clear()
	k.changed.every()
	*o = Keys{def: k.def.policySet().newTable(), pinned: make(pins)}
}

// retire keeps the counts of t, which is let go.
func (k *Keys) retire(t setTable) { k.retired.add(t.tally()) }

// Abandoned drops the key the rule was working on, as for a panic, and
// counts it: in the table that called the rule, or, if that table was
// being made (by SetOverride) and is let go with the call, in k's retired
// counts. A key that was moving between tables is dropped from the one it
// was leaving, as a panic in its rule would drop it.
func (k *Keys) Abandoned() {
	if t := k.asking; t != nil {
		k.asking = nil
		t.Abandoned()
		if !k.holds(t) {
			k.retire(t)
		}
	}
	if k.moving != nil {
		if i := k.moving.slotOf(k.movingKey); i != none {
			k.moving.drop(i)
		}
		k.moving, k.movingKey = nil, ""
	}
	if k.sweeping {
		k.behind.dropFirst(k.swept)
		k.sweeping = false
	}
	if k.behind != nil {
		k.carried() // the key moving may have been its last
	}
}

// holds reports whether t is one of k's tables.
func (k *Keys) holds(t setTable) bool {
	if t == k.def || t == k.behind {
		return true
	}
	for _, o := range k.list {
		if o.table == t {
			return true
		}
	}
	return false
}

// moveKey moves key from one of k's tables to another, at now, noting it
// for Abandoned.
func (k *Keys) moveKey(key string, from, to setTable, now time.Duration) {
	k.asking, k.moving, k.movingKey = to, from, key
	moveKey(key, from, to, now, from == k.behind) // a key left behind is older in use than any the new table got since
	k.asking, k.moving, k.movingKey = nil, nil, ""
}

// Capped returns the number of keys the cap (Bound) counts: those without
// an override.
func (k *Keys) Capped() int {
	if k.behind != nil {
		return k.def.Len() + k.behind.Len()
	}
	return k.def.Len()
}

// Keys returns k: a partition's table is its keys.
func (k *Keys) Keys() *Keys { return k }

// Set returns the router's policies, as k holds them.
func (k *Keys) Set() *Set { return k.def.policySet() }

// SetPolicies puts the keys without an override under set, at now: each
// keeps its state under every policy of set whose name and algorithm one
// of its old policies had (as it is under the same Params, adopted by the
// new rule under others), and starts untouched under the others.
//
// The switch is made in one step: set is the router's at once, and the
// keys are then carried over to it one by one. If a rule ends the
// goroutine meanwhile, the key it was on is dropped, as for a panic, and
// the keys not carried yet are carried as they are next asked about, as
// of now; SetPolicies with the same set carries the rest. Until then the
// keys left behind count under the cap, and a new key that finds the cap
// reached has them all carried first, so that it may take the place of
// an idle key, or evict the least recently used (EvictLRU), among them
// too.
func (k *Keys) SetPolicies(set *Set, now time.Duration) {
	if !set.Same(k.def.policySet()) {
		k.settle() // a switch before this one, left unfinished
		t := set.newTable()
		t.Bound(k.limit)
		k.def, k.behind, k.switched = t, k.def, now
		k.changed.every()
	}
	k.settle()
}

// settle carries over to the router's table every key that a switch of
// its policies left behind. If a rule ends the goroutine meanwhile,
// Abandoned drops from behind the keys carried, and the key the rule was
// on (swept counts them): behind then holds the keys still to carry.
func (k *Keys) settle() {
	if k.behind == nil {
		return
	}
	k.sweeping, k.swept = true, 0
	k.asking = k.def
	k.behind.each(func(i uint32, key []byte) {
		k.swept++ // first: if the rule ends the goroutine on this key, it is dropped
		k.def.carry(k.behind, i, k.switched)
		k.def.keepFresh(string(key), k.switched, true) // newest first, each at the oldest end: their order is kept, older than any key since
	})
	k.asking, k.sweeping = nil, false
	k.retire(k.behind)
	k.def.reserve(0)
	k.behind = nil
}

// carry carries key over, if it was left behind, as of the switch.
func (k *Keys) carry(key string) {
	k.moveKey(key, k.behind, k.def, k.switched)
	k.carried()
}

// carried notes that keys were carried over, or dropped, from behind: the
// router's table holds back as many places under the cap as behind still
// holds keys, and behind is let go with its last.
func (k *Keys) carried() {
	if k.behind.Len() > 0 {
		k.def.reserve(k.behind.Len())
		return
	}
	k.retire(k.behind)
	k.def.reserve(0)
	k.behind = nil
}

// Override returns key's override, or nil.
func (k *Keys) Override(key string) *Set {
	if o, ok := k.overrides[key]; ok {
		return o.set
	}
	return nil
}

// EachOverrideSet calls f with each set of policies an override holds,
// once however many keys it is the override of.
func (k *Keys) EachOverrideSet(f func(set *Set)) {
	for _, o := range k.list {
		f(o.set)
	}
}

// Overrides returns the number of keys with an override.
func (k *Keys) Overrides() int { return len(k.overrides) }

// EachOverride calls f with every key that has an override, and its
// override, in the order of the keys.
func (k *Keys) EachOverride(f func(key string, set *Set)) {
	for _, key := range slices.Sorted(maps.Keys(k.overrides)) {
		f(key, k.overrides[key].set)
	}
}

// SetOverride puts key under set, its override, at now, with its state
// carried over as SetPolicies does, and reports whether the key had no
// override before.
func (k *Keys) SetOverride(key string, set *Set, now time.Duration) (added bool) {
	from := k.tableOf(key)
	old, had := k.overrides[key]
	if had && old.set.Same(set) {
		return false
	}
	k.changed.key(key) // first: a rule that ends the goroutine while the key moves may have left it dropped
	o := k.bySet[set.id]
	made := o == nil
	if made {
		o = &overrideTable{set: set, table: set.newTable()}
	}
	k.moveKey(key, from, o.table, now)
	if made { // only now: a rule that ends the goroutine above leaves no table behind
		if k.bySet == nil {
			k.bySet, k.overrides = make(map[string]*overrideTable), make(map[string]*overrideTable)
		}
		o.at = len(k.list)
		k.bySet[set.id] = o
		k.list = append(k.list, o)
	}
	o.keys++
	k.overrides[key] = o
	if had {
		k.release(old)
	}
	return !had
}

// ClearOverride puts key back under the router's policies, at now, with
// its state carried over as SetPolicies does, and reports whether it had
// an override.
func (k *Keys) ClearOverride(key string, now time.Duration) (removed bool) {
	o, ok := k.overrides[key]
	if !ok {
		return false
	}
	k.changed.key(key)
	k.moveKey(key, o.table, k.def, now)
	delete(k.overrides, key)
	k.release(o)
	return true
}

// release notes that a key's override no longer uses o, and lets o's
// table go with its last key.
func (k *Keys) release(o *overrideTable) {
	if o.keys--; o.keys > 0 {
		return
	}
	k.retire(o.table)
	delete(k.bySet, o.set.id)
	last := len(k.list) - 1
	k.list[o.at] = k.list[last]
	k.list[o.at].at = o.at
	k.list[last] = nil
	k.list = k.list[:last]
}
