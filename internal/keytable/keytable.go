// Package keytable keeps the keys of one router partition under their
// policies: each key's states, found by the key's bytes, with the order in
// which the keys become idle and, when evicting, the order of their use.
// It is the room between a partition (package actor), which owns a Table and is its
// only user, and the rules (package algorithms), which it applies to the
// states it keeps. Nothing in it is locked.
//
// A partition's Table is a Keys (partition.go): the keys under the
// router's policies in one table, and those with an override in a table
// per override's policies. Each table keeps the keys under one Set of
// policies (set.go) and is generic over the first policy's state, which
// lives inline in the table's slots; the other policies' states live in
// columns beside them: table.go (slots and decisions, several policies
// combined), index.go (the key → slot index), heap.go (the order keys
// become idle in), lru.go (the order of use, while evicting), keys.go (the
// keys' bytes), lifecycle.go (idle keys, the cap on keys), snapshot.go
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
	"github.com/chanlimit/chanlimit/internal/errs"
)

// Table is the keys of one partition under their policies. Its now never
// goes back, for any one key, from one decision (AllowN, PeekN, AllowEach,
// Refund) to the next; from one key to another it may, since a partition
// serves a line of waiters on the line's own schedule. Expire may be given
// an earlier now, since a partition expires keys a grace period behind.
//
// Every call into the rule is supervised (package supervise): a panic
// drops the key the rule was working on, whose state it may have left
// half-written, and counts in Counts.Panicked; when the rule was deciding
// a request on that key (AllowN, PeekN, an item of AllowEach), that request
// fails with an error wrapping errs.ErrAlgorithmPanic. Everything else goes on.
type Table interface {
	keyed

	// Replace drops every key the table holds and takes those of other, a
	// table of the same kind (NewKeys), which is left empty. The table
	// keeps its counts and its Limit.
	Replace(other Table)

	// Resume is called by the goroutine that takes over from one that
	// ended (after Abandoned), before it serves anything: the table
	// finishes the work the rule interrupted, if it must not be left
	// half-done (a Keys: a switch of the router's policies).
	Resume(now time.Duration)

	// Changed returns what changed, since it was last called, in the
	// policies the table's keys are under: every key's (all: the router's
	// policies were switched, or the table replaced), or else the keys'
	// whose override was set or cleared. A partition asks after each
	// function it runs on its state, and re-decides the lines of those
	// keys alone. keys is the table's, valid until its next call.
	Changed() (all bool, keys []string)

	// Quota writes into q what key has under each policy of its set at
	// now, each taken alone: q.Set is the set, and q.Policies holds a
	// PolicyQuota for each of its policies, in order. It changes nothing.
	// ok is false if the table cannot tell each policy's (its states are
	// elsewhere): then q.Policies is empty. Its errors are a rule's panic,
	// as PeekN's.
	Quota(key string, now time.Duration, q *Quota) (ok bool, err error)

	// Pin keeps key from being evicted, until Unpin: its partition has
	// callers waiting on it. A key need not be held to be pinned; a
	// pinned key expires as any other once it is idle.
	Pin(key string)
	Unpin(key string)
}

// keyed is what every table of keys does, a partition's (Table) and the
// table of the keys under one Set (setTable).
type keyed interface {
	// AllowN decides a request for n units on key at now, as the rule's
	// AllowN does on the key's state, and writes the answer into d. A key
	// is held only once it is allowed something, under a copy of key the
	// table owns. A new key the table has no room for is refused with an
	// error wrapping errs.ErrTooManyKeys. On an error d is zero. The key's
	// dry-run policies decide too, each taking if it allows (Set).
	AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error

	// AllowTurn is AllowN for a waiter's turn: the dry-run policies decide
	// only if the others grant the request now (Turn), so that a turn
	// asked again, or given back, counts with them once, at its grant.
	AllowTurn(key string, now time.Duration, n int, d *algorithms.Decision) error

	// DecideDry decides n units on key under its dry-run policies alone,
	// each taking if it allows when take is set, and reports whether one
	// would deny: a request that callers waiting on the key refuse
	// (no barging) is decided by them all the same. A key without
	// dry-run policies reports false and is not asked.
	DecideDry(key string, now time.Duration, n int, take bool) (wouldDeny bool, err error)

	// HasDryRun reports whether key's policies include a dry-run one.
	HasDryRun(key string) bool

	// PeekN writes into d what AllowN would answer, errors included, and
	// changes nothing.
	PeekN(key string, now time.Duration, n int, d *algorithms.Decision) error

	// AllowEach decides items in order, exactly as AllowN would one by one,
	// and writes each answer into its item's D and Err, and Gone.
	AllowEach(items []Item, now time.Duration)

	// Refund gives n units back to each policy of key at now, dry-run ones
	// included, as algorithms.Machine's Refund does (at most a policy's
	// capacity); a key without state is left without. If the rule panics,
	// the key is dropped and the error wraps ErrAlgorithmPanic.
	Refund(key string, now time.Duration, n int) error

	// GiveBack takes back a grant of n units on key made at now (an
	// AllowN, or an AllowTurn that granted) whose caller left, or a
	// waiter's turn that is to come: Refund to the enforced policies
	// alone, since the dry-run ones count every request decided.
	GiveBack(key string, now time.Duration, n int) error

	// Reset drops key: its next request finds it untouched. It never calls
	// the rule.
	Reset(key string)

	// Expire drops keys idle at now, in the order they became idle, doing
	// at most budget steps of work, and returns how many it dropped.
	Expire(now time.Duration, budget int) int

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
	// errs.ErrBadSnapshot, and then the table is as it was.
	Load(key string, state []byte, now, age time.Duration) error

	// Ahead returns when requests for ns[0], ns[1], ... units on key, asked
	// at now in that order, each asked again as soon as its answer allows,
	// would each be granted, as a partition grants its waiters: at is the
	// instant the last one is granted, and free the instant the key is
	// untouched after the one before it (or as it stands, if ns holds one
	// request), if nothing else happens to the key. It decides on a copy
	// of the key's states and changes nothing; a request above the
	// capacity is passed by. ok is false if it cannot tell: the rule's
	// states cannot be copied (they hold pointers and it is no
	// StateCodec), or the rule keeps denying without a wait. An at of the
	// largest Duration stands for never, within the timeline.
	Ahead(key string, now time.Duration, ns []int) (at, free time.Duration, ok bool, err error)

	// Abandoned is called, on the way out of the goroutine, when the rule
	// did not return from a call the table made into it: it ran
	// runtime.Goexit, which no recover stops. The table drops the key the
	// rule was working on, as for a panic, and counts it as one.
	Abandoned()
}

// Rule is a rule ready to make tables: what a router keeps of an algorithm
// once its Params are known. Its tables are made through a Set, which may
// hold several rules.
type Rule interface {
	// Capacity returns the largest n any key can ever be allowed.
	Capacity() int

	// NewTable returns an empty table of keys under the rule alone, as a
	// policy with no name: a Set of one.
	NewTable() Table

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

func (r rule[S]) NewTable() Table { return NewSet([]Policy{{Rule: r}}).NewTable() }

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

	// each calls f with every key held, its slot and its key's bytes
	// (which alias the table's), oldest use first while evicting.
	each(f func(i uint32, key []byte))

	// keepFresh holds key with the fresh states, unless they are
	// untouched at now; it ignores the cap.
	keepFresh(key string, now time.Duration)

	// carry gives the states of the key in slot i of from, policy by
	// policy, to the fresh states of t (see give), under supervision: a
	// rule that panics leaves t's fresh states untouched.
	carry(from setTable, i uint32, now time.Duration)

	// slotOf returns the slot of key, or none.
	slotOf(key string) uint32
	drop(i uint32)
}

// The types a partition and its table share are package actor's, which
// defines what a partition asks of its table (actor.Table).
type (
	Item        = actor.Item
	Op          = actor.Op
	From        = actor.From
	Trip        = actor.Trip
	Quota       = actor.Quota
	PolicyQuota = actor.PolicyQuota
)

const (
	OpAllow    = actor.OpAllow
	OpPeek     = actor.OpPeek
	OpReset    = actor.OpReset
	OpRefund   = actor.OpRefund
	OpGiveBack = actor.OpGiveBack
	OpTurn     = actor.OpTurn
	OpDryRun   = actor.OpDryRun
	OpDryPeek  = actor.OpDryPeek

	FromStore   = actor.FromStore
	FromLocal   = actor.FromLocal
	FromNowhere = actor.FromNowhere
)

// Counts are what a table has done with its keys since it was made, and
// how many it holds idle.
type Counts struct {
	Expired  uint64 // idle keys dropped by Expire, or to make room for a new key
	Evicted  uint64 // keys dropped, not idle, to make room for a new key
	Panicked uint64 // keys dropped because their rule panicked
	Idle     int    // keys held whose state is untouched

	StoreErrors uint64 // a remote table's: requests its store failed to answer
}

// Limit caps the keys a table holds. When the table is full, a new key
// takes the place of an idle key if the table holds one; otherwise, with
// Evict, of the table's least recently used key, and without, it is
// refused with errs.ErrTooManyKeys. Max 0 means no cap.
type Limit struct {
	Max   int
	Evict bool
	pins  pins // the partition's, set by Keys.Bound
}

var (
	// errNoRoom refuses a new key when the table is full and can make no
	// room.
	errNoRoom = fmt.Errorf("%w: this partition's share of MaxKeys is held, and no key is idle", errs.ErrTooManyKeys)

	// errKeysFull refuses a key whose bytes do not fit.
	errKeysFull = fmt.Errorf("%w: this partition's keys fill the space it keeps their bytes in (4 GiB; 2 GiB on 32-bit platforms)", errs.ErrTooManyKeys)

	// errNoCodec is returned by the snapshot methods of a table whose rule
	// cannot save its states.
	errNoCodec = fmt.Errorf("%w: the algorithm cannot save its states (its Machine is not a StateCodec and an Expiring)", errors.ErrUnsupported)
)
