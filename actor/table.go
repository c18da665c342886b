package actor

import (
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// Table is what a partition asks of the keys it owns: the keys of one
// partition under their policies, in memory. It decides each kind of request with
// a method of its own; what only some tables can do (decide a batch at
// once, foresee a line, pin a key, tell each policy's quota, keep dry-run
// policies, change policies, survive a rule that ends the goroutine) are
// the optional interfaces below, which Start finds once, as io.Copy finds
// an io.WriterTo: a table without one gets the partition's plain
// behaviour, which each says.
//
// Only the partition's goroutine calls a Table, so it needs no lock. Its
// now never goes back, for any one key, from one decision to the next;
// from one key to another it may, since a partition serves a line of
// waiters on the line's own schedule. Expire may be given an earlier now,
// since a partition expires keys a grace period behind.
//
// What the partition relies on, beyond each method's doc: a request above
// what its key's policies can ever grant is an error (ErrExceedsCapacity),
// never a denial, since no wait would ever grant it; a new key the table
// has no room for is refused with an error wrapping ErrTooManyKeys; and
// nothing the partition passes (a key, a slice, a Decision, a Quota) is
// kept after the call returns: a key the table holds is a copy it owns.
//
// A table supervises the code it calls (a rule's): a panic drops the key
// the rule was working on, and the request it was deciding fails with an
// error wrapping ErrAlgorithmPanic; everything else goes on.
type Table interface {
	// AllowN decides a request for n units on key at now, writing its
	// decision into d: all n allowed, and taken, or none. A key is held
	// only once it is allowed something. On an error d is zero.
	AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error

	// PeekN writes into d what AllowN would, errors included, and changes
	// nothing.
	PeekN(key string, now time.Duration, n int, d *algorithms.Decision) error

	// Refund gives n units back to key's policies at now, as
	// algorithms.Machine's Refund does (at most a policy's capacity); a
	// key without state is left without. The partition also gives back,
	// with Refund, a grant whose caller left, unless the table is a
	// DryRunner.
	Refund(key string, now time.Duration, n int) error

	// Reset drops key: its next request finds it untouched. It calls no
	// rule, and never fails.
	Reset(key string)

	// Expire drops keys idle at now, in the order they became idle, doing
	// at most budget steps of work, and returns how many it dropped.
	Expire(now time.Duration, budget int) int
}

// Batcher is a Table that decides a batch at once.
type Batcher interface {
	// AllowEach decides items in order, each as AllowN would, exactly as
	// if one by one, writing each answer into its item's D and Err (the
	// whole of them: the partition reuses its items). It passes by an
	// item with Skip, which the partition has answered itself (its key has
	// waiters), leaving D and Err as they are. It sets Gone on an item
	// granted on a key that lost its state later in the batch (its rule
	// panicked on it, or it was evicted): that grant went with the state.
	//
	// Without it, the partition decides a batch item by item with AllowN.
	AllowEach(items []Item, now time.Duration)
}

// Foreseer is a Table that can foresee how a line of waiters is granted.
type Foreseer interface {
	// Ahead returns when requests for ns[0], ns[1], ... units on key,
	// asked at now in that order, each asked again as soon as its answer
	// allows, would each be granted, as a partition grants its waiters:
	// at is the instant the last one is granted, and free the instant the
	// key is untouched after the one before it (or as it stands, if ns
	// holds one request), if nothing else happens to the key. It decides
	// on a copy of the key's states and changes nothing; a request above
	// the capacity is passed by. ok is false if it cannot tell: the
	// rule's states cannot be copied (they hold pointers and it is no
	// StateCodec), or the rule keeps denying without a wait. An at of the
	// largest Duration stands for never, within the timeline. ns is the
	// partition's.
	//
	// Without it (or with ok false), the partition cannot tell a waiter's
	// wait: a WaitN with a deadline joins the line all the same, and waits
	// until its deadline, or its turn.
	Ahead(key string, now time.Duration, ns []int) (at, free time.Duration, ok bool, err error)
}

// Pinner is a Table that may evict keys, and must not evict one that
// callers wait on.
type Pinner interface {
	// Pin keeps key from being evicted, until Unpin: its partition has
	// callers waiting on it. A key need not be held to be pinned; a
	// pinned key expires as any other once it is idle.
	Pin(key string)
	Unpin(key string)
}

// Quoter is a Table that can tell what a key has under each of its
// policies, for a request that asks (quota.go).
type Quoter interface {
	// Quota writes into q what key has under each policy of its set at
	// now, each taken alone: q.Set is the set, which it always sets, and
	// q.Policies holds a PolicyQuota for each of its policies that is not
	// dry-run (a dry-run policy is never advertised), in order. It changes
	// nothing. ok is false if the table cannot tell each policy's (its
	// states are elsewhere): then q.Policies is empty, and the partition
	// tells the deciding policy's, from the decision. Its errors are a
	// rule's panic, as PeekN's.
	//
	// Without it, a Quota is left with no Set and no Policies.
	Quota(key string, now time.Duration, q *Quota) (ok bool, err error)
}

// DryRunner is a Table whose keys may be under dry-run policies: policies
// that never deny, but count every request decided and say whether they
// would have denied it (Decision.WouldDeny). AllowN and PeekN have them
// decide too, each taking if it allows (PeekN: taking nothing).
//
// Without it, no key has a dry-run policy: a turn is an AllowN, and a
// grant is given back with Refund.
type DryRunner interface {
	// HasDryRun reports whether key's policies include a dry-run one.
	HasDryRun(key string) bool

	// AllowTurn is AllowN for a waiter's turn: the dry-run policies decide
	// only if the others grant the request now (Turn), so that a turn
	// asked again, or given back, counts with them once, at its grant.
	AllowTurn(key string, now time.Duration, n int, d *algorithms.Decision) error

	// DecideDry decides n units under key's dry-run policies alone, each
	// taking if take and it allows, and reports whether one would deny: a
	// request that callers waiting on the key refuse (no barging) is
	// decided by them all the same.
	DecideDry(key string, now time.Duration, n int, take bool) (wouldDeny bool, err error)

	// GiveBack takes back a grant of n units made at now (an AllowN, or
	// an AllowTurn that granted) whose caller left, or a waiter's turn
	// that is to come: a refund to the enforced policies alone, since the
	// dry-run ones count every request decided.
	GiveBack(key string, now time.Duration, n int) error
}

// Changer is a Table whose keys' policies can change while the partition
// runs (a function run by Do switches them).
type Changer interface {
	// Changed returns what changed, since it was last called, in the
	// policies the table's keys are under: every key's (all: the router's
	// policies were switched, or the table replaced), or else the keys'
	// whose override was set or cleared. A partition asks after each
	// function it runs on its state, and re-decides the lines of those
	// keys alone. keys is the table's, valid until its next call.
	Changed() (all bool, keys []string)
}

// Abandoner is a Table that takes part in surviving a rule that ends the
// goroutine (runtime.Goexit, which no recover stops; carry_on.go).
// Without it, the partition answers the request in flight and serves on,
// and the table is left as the rule left it.
type Abandoner interface {
	// Abandoned is called, on the way out of the goroutine, when the rule
	// did not return from a call the table made into it. The table drops
	// the key the rule was working on, as for a panic, and counts it as
	// one.
	Abandoned()
}

// Holder is a Table that can hold a key: keep it from being granted
// anything for a while, as a server that refused its caller asks
// (Router.Hold).
type Holder interface {
	// Hold keeps key from being granted anything from now until end. Until
	// then AllowN, AllowTurn, PeekN and AllowEach deny a request on it
	// (errors first, as ever: one above the capacity is still an error),
	// taking nothing from any policy, dry-run ones included: with Policy "",
	// Limit and Remaining 0, and the RetryAfter at which the same request
	// would be allowed, end - now and then what its policies would ask at
	// end. DecideDry decides nothing on it, and Ahead foresees the line as
	// from end. A key held is never evicted before end (its state may be
	// let go as idle meanwhile: an untouched state is as good as none, and
	// the hold is kept apart from it). An end no later than the key's hold
	// has changes nothing; Reset
	// ends it. Its error is one AllowN would return for a new key the table
	// has no room for (ErrTooManyKeys).
	//
	// Without it, a Hold fails with an error wrapping errors.ErrUnsupported.
	Hold(key string, now, end time.Duration) error
}

// keys is a partition's Table with the optional interfaces it has, found
// once at Start (nil: it has none), and the partition's behaviour where
// it has none.
type keys struct {
	Table
	each    Batcher
	ahead   Foreseer
	pins    Pinner
	quota   Quoter
	dry     DryRunner
	changes Changer
	abandon Abandoner
	hold    Holder
}

// keysOf finds what t can do.
func keysOf(t Table) keys {
	k := keys{Table: t}
	k.each, _ = t.(Batcher)
	k.ahead, _ = t.(Foreseer)
	k.pins, _ = t.(Pinner)
	k.quota, _ = t.(Quoter)
	k.dry, _ = t.(DryRunner)
	k.changes, _ = t.(Changer)
	k.abandon, _ = t.(Abandoner)
	k.hold, _ = t.(Holder)
	return k
}

// allowEach decides the items of a batch, all at once if the table can.
func (k *keys) allowEach(items []Item, now time.Duration) {
	if k.each != nil {
		k.each.AllowEach(items, now)
		return
	}
	for i := range items {
		if it := &items[i]; !it.Skip {
			it.Err = k.AllowN(it.Key, now, it.N, &it.D)
		}
	}
}

// aheadOf is Foreseer's Ahead, or that the table cannot tell.
func (k *keys) aheadOf(key string, now time.Duration, ns []int) (at, free time.Duration, ok bool, err error) {
	if k.ahead == nil {
		return 0, 0, false, nil
	}
	return k.ahead.Ahead(key, now, ns)
}

func (k *keys) pin(key string) {
	if k.pins != nil {
		k.pins.Pin(key)
	}
}

func (k *keys) unpin(key string) {
	if k.pins != nil {
		k.pins.Unpin(key)
	}
}

// quotaOf is Quoter's Quota, or that the table cannot tell, with no set.
func (k *keys) quotaOf(key string, now time.Duration, q *Quota) (bool, error) {
	if k.quota == nil {
		q.Set, q.Policies = nil, q.Policies[:0]
		return false, nil
	}
	return k.quota.Quota(key, now, q)
}

func (k *keys) hasDryRun(key string) bool { return k.dry != nil && k.dry.HasDryRun(key) }

// turn decides a waiter's turn (AllowTurn, or AllowN).
func (k *keys) turn(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if k.dry != nil {
		return k.dry.AllowTurn(key, now, n, d)
	}
	return k.AllowN(key, now, n, d)
}

// giveBack takes back a grant (GiveBack, or Refund).
func (k *keys) giveBack(key string, now time.Duration, n int) error {
	if k.dry != nil {
		return k.dry.GiveBack(key, now, n)
	}
	return k.Refund(key, now, n)
}

// decideDry is DryRunner's DecideDry; with none, nothing would deny.
func (k *keys) decideDry(key string, now time.Duration, n int, take bool) (bool, error) {
	if k.dry == nil {
		return false, nil
	}
	return k.dry.DecideDry(key, now, n, take)
}

func (k *keys) changed() (bool, []string) {
	if k.changes == nil {
		return false, nil
	}
	return k.changes.Changed()
}

func (k *keys) abandoned() {
	if k.abandon != nil {
		k.abandon.Abandoned()
	}
}

// Item is one request of a batch, N units on Key, with room for its
// answer: a Decision, or an error (and a zero Decision).
type Item struct {
	Key string
	N   int
	D   algorithms.Decision
	Err error

	// Gone is set on an item granted on a key that lost its state later in
	// the batch (its rule panicked on it, or it was evicted): its grant went
	// with that state, so there is nothing to give back.
	Gone bool

	// Skip is set by the caller on an item it has decided itself (its key
	// has waiters): the table passes it by, leaving D and Err as they are.
	Skip bool

	// Hashed says that Hash is the table's own hash of Key, set by the
	// caller (a router, which hashed the key to find its partition) so
	// that the table need not hash the key again. Any other Hash would
	// make the table miss the key it holds, and hold it twice.
	Hashed bool
	Hash   uint64
}

// Quota is what a key has under each of the policies it is under, as a
// partition reports it beside a decision, for the HTTP RateLimit field:
// each policy's own remaining quota, and the wait until it has more.
type Quota struct {
	Set      PolicySet     // the policies the key is under, as its table has them
	Policies []PolicyQuota // some or all of Set's policies (see Table.Quota)
}

// PolicySet is the set of policies a key is under, as its table has them.
type PolicySet interface {
	// Index returns the place in the set of the policy named name, or -1.
	Index(name string) int
}

// PolicyQuota is what a key has under one policy, taken alone.
type PolicyQuota struct {
	Policy    int           // its place in the Set
	Remaining int           // the requests of one unit it would allow now
	More      time.Duration // the wait until it allows one more than Remaining; 0 if Remaining is its capacity
}

// Turn is how a caller waiting in line reads the decision d of its
// request, the one rule of a line (the partition serves lines by it, and
// a table's Ahead foresees them by it): granted now if d is allowed with no Delay;
// otherwise not, and its request is asked again after wait: d's Delay if
// d is allowed (leaky_bucket: its turn is to come, so the grant is given
// back, and giveBack says so), or if d is denied with no RetryAfter but a
// Delay (a turn that must wait decided where nothing is taken for it, as a
// Store's StoreTurn is), else d's RetryAfter.
func Turn(d *algorithms.Decision) (granted, giveBack bool, wait time.Duration) {
	switch {
	case d.Allowed && d.Delay <= 0:
		return true, false, 0
	case d.Allowed:
		return false, true, d.Delay
	case d.RetryAfter <= 0 && d.Delay > 0:
		return false, false, d.Delay
	}
	return false, false, d.RetryAfter
}
