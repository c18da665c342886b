// Package keytable keeps the keys of one router partition under their
// policies: each key's states, found by the key's bytes, with the order in
// which the keys become idle and, when evicting, the order of their use.
// It is the room between a partition (package actor), which owns a Table and is its
// only user, and the rules (package algorithms), which it applies to the
// states it keeps. Nothing in it is locked.
//
// A partition's Table is a Keys (keys.go, and keys_decide.go, which
// hands each request a partition makes to its key's table): the keys under the
// router's policies in one table, and those with an override in a table
// per override's policies. Each table keeps the keys under one Set of
// policies (set.go) and is generic over the first policy's state, which
// lives inline in the table's slots; the other policies' states live in
// columns beside them: table.go (slots and decisions, several policies
// combined), index.go (the key → slot index), heap.go (the order keys
// become idle in), lru.go (the order of use, while evicting),
// key_bytes.go (the keys' bytes), lifecycle.go (idle keys, the cap on keys), snapshot.go
// (saving and loading), carry.go (moving keys between tables when their
// policies change), quota.go (what each policy says a key has left).
//
// Words, as docs/keys.md uses them: a state is untouched when it decides as
// a key never seen; a key held whose state is untouched is idle; a table
// expires its idle keys when its partition says, evicts keys that are not
// idle to make room when its Limit says, and drops a key on Reset or when
// its rule panics on it.
package keytable

import (
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// Table is the keys of one partition under their policies: an
// actor.Table, which says what a partition asks of it (and how now goes),
// and what the router reads and changes within the partition (Len,
// Counts, Bound, snapshots, Replace).
//
// Every call into the rule is supervised (package supervise): a panic
// drops the key the rule was working on, whose state it may have left
// half-written, and counts in Counts.Panicked; when the rule was deciding
// a request on that key (AllowN, an item of AllowEach), that request fails with an
// error wrapping actor.ErrAlgorithmPanic. Everything else goes on.
type Table interface {
	actor.Table
	kept

	// Replace drops every key the table holds and takes those of other, a
	// table of the same kind (NewKeys), which is left empty. The table
	// keeps its counts and its Limit.
	Replace(other Table)

	// Keys returns the keys whose policies and overrides the router sets:
	// the table itself, or a Store's table's local keys.
	Keys() *Keys
}

// keyed is what every table of keys does, a partition's Keys and the
// table of the keys under one Set (setTable): each kind of decision has a
// method of its own, as actor.Table and its optional interfaces document
// them.
type keyed interface {
	AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error
	AllowTurn(key string, now time.Duration, n int, d *algorithms.Decision) error
	DecideDry(key string, now time.Duration, n int, take bool) (wouldDeny bool, err error)
	HasDryRun(key string) bool
	PeekN(key string, now time.Duration, n int, d *algorithms.Decision) error
	AllowEach(items []Item, now time.Duration)
	Refund(key string, now time.Duration, n int) error
	GiveBack(key string, now time.Duration, n int) error
	Reset(key string)
	Expire(now time.Duration, budget int) int
	Ahead(key string, now time.Duration, ns []int) (at, free time.Duration, ok bool, err error)
	Abandoned()
	kept
}

// kept is what the router reads and changes of the keys a table keeps, and
// their snapshots.
type kept interface {
	// Len returns the number of keys held.
	Len() int

	// Counts returns what the table has done with its keys since it was
	// made, and how many of those it holds are idle at now.
	Counts(now time.Duration) Counts

	// Bound caps the keys the table holds from now on. A table that holds
	// more already keeps them, and makes room for a new key only once it
	// is below the cap.
	Bound(limit Limit)

	// AppendSnapshot appends to dst an entry (see NextEntry) for every key
	// not idle at now, and returns how many. Its error wraps
	// errors.ErrUnsupported if the rule cannot save its states.
	AppendSnapshot(dst []byte, now time.Duration) ([]byte, int, error)

	// Load adds key, with a state that AppendSnapshot saved age before now,
	// unless by now it is untouched. It ignores the cap. Its error wraps
	// ErrBadSnapshot, and then the table is as it was.
	Load(key string, state []byte, now, age time.Duration) error
}

// Rule is a rule ready to make tables: what a router keeps of an algorithm
// once its Params are known. Its tables are made through a Set, which may
// hold several rules.
type Rule interface {
	// Capacity returns the largest n any key can ever be allowed.
	Capacity() int

	// NewTable returns an empty table of keys under the rule alone, as a
	// policy with no name: a Set of one.
	NewTable() *Keys

	newTable(s *Set, extra []column) setTable
	newColumn() column
}

// NewRule returns the Rule whose tables keep one S per key, decided by m.
// If m is not an algorithms.Expiring[S], its tables keep beside each state
// the deadline of the key's latest grant (see granted).
func NewRule[S any](m algorithms.Machine[S]) Rule {
	if e, ok := m.(algorithms.Expiring[S]); ok {
		return rule[S]{m, e}
	}
	g := granted[S]{m}
	return rule[timed[S]]{g, g}
}

type rule[S any] struct {
	m algorithms.Machine[S]
	e algorithms.Expiring[S]
}

func (r rule[S]) Capacity() int { return r.m.Capacity() }

func (r rule[S]) NewTable() *Keys { return NewSet([]Policy{{Rule: r}}).NewTable() }

func (r rule[S]) newTable(s *Set, extra []column) setTable {
	return newTable(s, newPolicyRules(r.m, r.e), extra)
}

func (r rule[S]) newColumn() column { return &states[S]{policyRules: newPolicyRules(r.m, r.e)} }

// setTable is the table of the keys under one Set, as a partition's Keys
// uses it: what every table does, and what Keys needs to move keys between
// tables.
type setTable interface {
	keyed

	// allowEach is AllowEach over the items k with pick[k] == want.
	allowEach(items []Item, now time.Duration, pick []int32, want int32)

	// quota appends to fs what key has under each policy at now (see
	// Table.Quota).
	quota(key string, now time.Duration, fs []PolicyQuota) ([]PolicyQuota, error)

	policySet() *Set
	columns() []column
	tally() Counts // the counts, Idle left 0
	clearTally()

	// keepFresh holds key with the fresh states, unless they are
	// untouched at now; it ignores the cap. While evicting, the key goes
	// to the oldest end of the order of use if oldest, else the newest.
	keepFresh(key string, now time.Duration, oldest bool)

	// carry gives the states of the key in slot i of from, policy by
	// policy, to the fresh states of t (see give), under supervision: a
	// rule that panics leaves t's fresh states untouched.
	carry(from setTable, i uint32, now time.Duration)

	// each calls f with every key held, its slot and its key's bytes
	// (which alias the table's): the newest use first while evicting,
	// else the last slot first. f must not change the table.
	each(f func(i uint32, key []byte))

	// dropFirst drops the first n keys each gives.
	dropFirst(n int)

	// reserve holds back n places under the cap: the table is full
	// with n keys fewer than its Limit allows.
	reserve(n int)

	// admits returns the error AllowN would return for key if it is new
	// and the table has no room for it; untilIdle the time until its
	// state is untouched under its enforced policies (hold.go).
	admits(key string, now time.Duration) error
	untilIdle(key string, now time.Duration) (time.Duration, error)

	// slotOf returns the slot of key, or none.
	slotOf(key string) uint32
	drop(i uint32)
}

// The types a partition and its table share are package actor's, which
// defines what a partition asks of its table (actor.Table).
type (
	Item        = actor.Item
	Quota       = actor.Quota
	PolicyQuota = actor.PolicyQuota
)

// Counts are what a table has done with its keys since it was made, and
// how many it holds idle.
type Counts struct {
	Expired  uint64 // idle keys dropped by Expire, or to make room for a new key
	Evicted  uint64 // keys dropped, not idle, to make room for a new key
	Panicked uint64 // keys dropped because their rule panicked
	Idle     int    // keys held whose state is untouched

	StoreErrors uint64 // a Store's table's (storetable): requests its store failed to answer

	// WouldDeny counts, by the name of each dry-run policy, the decisions
	// it would have denied (a Peek's not counted); nil if none has.
	WouldDeny map[string]uint64
}

// AddWouldDeny adds n decisions that the dry-run policy name would have
// denied: past actor.MaxPolicyNames names, a new name's under
// actor.OtherPolicies, as a partition counts denials by policy.
func (c *Counts) AddWouldDeny(name string, n uint64) {
	if n == 0 {
		return
	}
	if c.WouldDeny == nil {
		c.WouldDeny = make(map[string]uint64)
	}
	if _, ok := c.WouldDeny[name]; !ok && len(c.WouldDeny) >= actor.MaxPolicyNames {
		name = actor.OtherPolicies // names that come and go (overrides') grow no partition without end
	}
	c.WouldDeny[name] += n
}

// Limit caps the keys a table holds. When the table is full, a new key
// takes the place of an idle key if the table holds one; otherwise, with
// Evict, of the table's least recently used key, and without, it is
// refused with actor.ErrTooManyKeys. Max 0 means no cap.
type Limit struct {
	Max   int
	Evict bool
	pins  pins   // the partition's, set by Keys.Bound
	holds *holds // likewise
}

// ErrBadSnapshot is wrapped, with the reason, by Load's and the
// snapshot's errors for a snapshot the table refuses (package chanlimit
// returns it as ErrBadSnapshot).
var ErrBadSnapshot = errors.New("chanlimit: bad snapshot")

var (
	// errNoRoom refuses a new key when the table is full and can make no
	// room.
	errNoRoom = fmt.Errorf("%w: this partition's share of MaxKeys is held, and no key is idle", actor.ErrTooManyKeys)

	// errKeysFull refuses a key whose bytes do not fit.
	errKeysFull = fmt.Errorf("%w: this partition's keys fill the space it keeps their bytes in (4 GiB; 2 GiB on 32-bit platforms)", actor.ErrTooManyKeys)

	// errNoCodec is returned by the snapshot methods of a table whose rule
	// cannot save its states.
	errNoCodec = fmt.Errorf("%w: the algorithm cannot save its states (its Machine is not a StateCodec and an Expiring)", errors.ErrUnsupported)
)
