package chanlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/internal/keytable"
)

// Store keeps the state of a router's keys outside the router: in Redis
// (package redislimit), so that routers in many processes share one
// quota. With Config.Store set, each partition hands its burst of requests
// (the requests queued in its mailbox, a batch's items) to Decide as one
// call, which a remote store answers in one round trip.
//
// The router keeps everything that is not a key's state: its policies
// and overrides, the lines of WaitN callers, which it serves in order
// within the process, and the in-memory tables FailLocal decides on.
type Store interface {
	// Check returns nil if the store can decide under policies (valid
	// as New checks them), and otherwise an error that says why. New,
	// SetPolicies and SetOverride call it, and wrap its error with
	// ErrInvalidConfig.
	Check(policies []Policy) error

	// Decide serves ops in order, each atomically on its key, and writes
	// each answer into its op: Decision, or Err if the store could not
	// answer it (Redis down, a timeout). Ops on one key are served in
	// their order in ops. ctx bounds the whole call. Decide is called by
	// one partition at a time, and by several partitions at once.
	Decide(ctx context.Context, ops []StoreOp)

	// FailMode says what the router does with a request the store could
	// not answer.
	FailMode() FailMode
}

// StoreOp is one request a router hands its Store.
type StoreOp struct {
	Kind StoreOpKind
	Key  string
	N    int // units: at least 1, at most the capacity of Policies; 0 for StoreReset

	// Policies are the key's (its override's, or the router's), never
	// empty, valid and checked by the store's Check. Decide must not
	// change them.
	Policies []Policy

	// Now is the time of the request by the router's Config.Clock, or
	// the zero Time when Config.Clock is nil: then the store decides on
	// its own clock (Redis's), one clock for every process.
	Now time.Time

	Decision Decision // the answer, for StoreAllow, StorePeek and StoreTurn; for StoreDryRun, its WouldDeny
	Err      error    // set if the store could not answer; the router returns it wrapped in ErrStoreUnavailable
}

// StoreOpKind is what a StoreOp asks.
type StoreOpKind uint8

const (
	// StoreAllow decides N units on Key as Router.AllowN does: all or
	// nothing, under every policy at once.
	StoreAllow StoreOpKind = iota + 1

	// StorePeek answers what StoreAllow would, changing nothing.
	StorePeek

	// StoreRefund gives N units back to each of Key's policies at Now, as
	// Router.Refund does; a key without state is left without. Right after
	// a StoreAllow of N on Key, it takes that grant back (its caller left
	// before the answer came).
	StoreRefund

	// StoreReset drops Key's state: its next request finds it untouched.
	StoreReset

	// StoreTurn decides N units as StoreAllow does, for a caller waiting
	// in line: the key's dry-run policies decide (and take) only if the
	// others grant the request now, allowed with no Delay, since a turn
	// that must wait is asked again, or given back. Ops of this kind come
	// only with a dry-run policy among Policies.
	StoreTurn

	// StoreGiveBack takes back a grant of N units on Key (a StoreAllow,
	// or a StoreTurn that granted) whose caller left: StoreRefund to the
	// policies that are not dry-run alone, since a dry-run policy counts
	// every request decided. Ops of this kind come only with a dry-run
	// policy among Policies; without one, a grant goes back as
	// StoreRefund.
	StoreGiveBack

	// StoreDryRun decides N units on Key under its dry-run policies alone,
	// each taking if it allows, as StoreAllow decides them, and asks the
	// others nothing: a request that callers waiting on the key refused
	// (no barging) is decided by its dry-run policies all the same. Only
	// Decision.WouldDeny is read. Ops of this kind come only with a
	// dry-run policy among Policies.
	StoreDryRun
)

// FailMode is what a router with a Store does with a request the store
// could not answer (docs/redis.md).
type FailMode uint8

const (
	// FailClosed fails the request with an error wrapping
	// ErrStoreUnavailable: Allow returns false.
	FailClosed FailMode = iota

	// FailOpen allows the request, as an untouched key would be allowed.
	FailOpen

	// FailLocal decides the request on the router's own in-memory
	// tables, under the same policies, until the store answers again.
	FailLocal
)

// String returns the mode's name.
func (m FailMode) String() string {
	switch m {
	case FailClosed:
		return "FailClosed"
	case FailOpen:
		return "FailOpen"
	case FailLocal:
		return "FailLocal"
	}
	return fmt.Sprintf("FailMode(%d)", uint8(m))
}

// storeTable is a partition's table when the router has a Store: the keys'
// states are the store's; local holds the partition's overrides, and the
// keys FailLocal decides on while the store cannot answer.
type storeTable struct {
	store  Store
	mode   FailMode
	clock  bool      // Config.Clock was set: ops carry its time
	origin time.Time // the clock's reading the partition's timeline starts at
	local  *keytable.Keys
	errors uint64 // requests the store failed to answer (Stats.StoreErrors)

}

var _ keytable.Remote = (*storeTable)(nil)

func newStoreTable(store Store, local *keytable.Keys, clockSet bool, origin time.Time) *storeTable {
	return &storeTable{
		store:  store,
		mode:   store.FailMode(),
		clock:  clockSet,
		origin: origin,
		local:  local,
	}
}

// setOf returns the set of policies key is under.
func (t *storeTable) setOf(key string) *keytable.Set {
	if set := t.local.Override(key); set != nil {
		return set
	}
	return t.local.Set()
}

// now returns the time of an op at the partition's now.
func (t *storeTable) now(now time.Duration) time.Time {
	if !t.clock {
		return time.Time{}
	}
	return t.origin.Add(now)
}

// storeTrip is a round trip of a storeTable's: its ops, and for each
// its item.
type storeTrip struct {
	store Store
	ops   []StoreOp
	at    []int
}

func (tr *storeTrip) Go(ctx context.Context) { tr.store.Decide(ctx, tr.ops) }

func (t *storeTable) Prepare(items []keytable.Item, now time.Duration) keytable.Trip {
	var tr *storeTrip
	for i := range items {
		it := &items[i]
		if it.Skip && !dryOnly(it.Op) {
			continue
		}
		op := StoreOp{Key: it.Key, N: it.N, Now: t.now(now)}
		set := t.setOf(it.Key)
		switch it.Op {
		case keytable.OpAllow, keytable.OpPeek, keytable.OpTurn:
			if err := set.Exceeds(it.N); err != nil {
				it.D, it.Err = Decision{}, err
				continue
			}
			switch {
			case it.Op == keytable.OpPeek:
				op.Kind = StorePeek
			case it.Op == keytable.OpTurn && set.HasDryRun(): // without one, a turn is an allow
				op.Kind = StoreTurn
			default:
				op.Kind = StoreAllow
			}
		case keytable.OpReset:
			op.Kind, op.N = StoreReset, 0
		case keytable.OpRefund:
			op.Kind = StoreRefund
		case keytable.OpGiveBack:
			op.Kind = StoreRefund
			if set.HasDryRun() { // without one, a grant given back is a refund
				op.Kind = StoreGiveBack
			}
		case keytable.OpDryRun:
			op.Kind = StoreDryRun
		case keytable.OpDryPeek:
			op.Kind = StorePeek // its WouldDeny alone is read (Finish)
		}
		op.Policies = sharedPolicies(set)
		if tr == nil {
			tr = &storeTrip{store: t.store}
		}
		tr.ops = append(tr.ops, op)
		tr.at = append(tr.at, i)
	}
	if tr == nil {
		return nil // a nil *storeTrip is not a nil Trip
	}
	return tr
}

func (t *storeTable) Finish(trip keytable.Trip, items []keytable.Item, now time.Duration) {
	tr := trip.(*storeTrip)
	for k := range tr.ops {
		op, it := &tr.ops[k], &items[tr.at[k]]
		if dryOnly(it.Op) { // the item's decision is its line's: the store adds WouldDeny
			if op.Err != nil {
				t.errors++ // the dry-run policies did not decide: nothing would have denied
			} else {
				it.D.WouldDeny = op.Decision.WouldDeny
			}
			continue
		}
		it.D, it.Err, it.By = op.Decision, nil, keytable.FromStore
		if op.Kind == StoreReset {
			t.local.Reset(it.Key) // its local state, if FailLocal decided on it
		}
		if op.Err != nil {
			t.failed(it, op, now)
		}
	}
}

// failed answers it, whose op the store could not answer, as the router's
// FailMode says, noting where its grant came from. A refund the store
// could not take fails, whatever the FailMode: its grant was the store's,
// and giving it to the local keys, which never granted it, would count it
// twice.
func (t *storeTable) failed(it *keytable.Item, op *StoreOp, now time.Duration) {
	t.errors++
	if op.Kind == StoreRefund || op.Kind == StoreGiveBack {
		it.D, it.Err = Decision{}, unavailable(op.Err)
		return
	}
	switch t.mode {
	case FailOpen:
		it.D, it.Err, it.By = Decision{}, nil, keytable.FromNowhere
		if op.Kind != StoreReset {
			it.D = t.open(it.Key, it.N)
		}
	case FailLocal:
		it.D, it.Err, it.By = Decision{}, nil, keytable.FromLocal
		switch op.Kind {
		case StoreAllow:
			it.Err = t.local.AllowN(it.Key, now, it.N, &it.D)
		case StoreTurn:
			it.Err = t.local.AllowTurn(it.Key, now, it.N, &it.D)
		case StorePeek:
			it.Err = t.local.PeekN(it.Key, now, it.N, &it.D)
		}
	default:
		it.D, it.Err = Decision{}, unavailable(op.Err)
	}
}

// open returns FailOpen's decision: allowed, as an untouched key would be
// (under dry-run policies alone, allowed and nothing else).
func (t *storeTable) open(key string, n int) Decision {
	set := t.setOf(key)
	if set.Smallest() < 0 {
		return Decision{Allowed: true}
	}
	p := set.Policies()[set.Smallest()]
	return Decision{Allowed: true, Limit: p.Params.Limit, Remaining: set.Capacity() - n, Policy: p.Name}
}

// unavailable returns err wrapping ErrStoreUnavailable.
func unavailable(err error) error {
	if errors.Is(err, ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
}

// A partition asks the store only through Prepare and Finish, with the
// round trip off its goroutine: it never decides a key of a store's table
// at once.

func (t *storeTable) AllowN(key string, now time.Duration, n int, d *Decision) error {
	return errTrips
}

func (t *storeTable) AllowTurn(key string, now time.Duration, n int, d *Decision) error {
	return errTrips
}

func (t *storeTable) PeekN(key string, now time.Duration, n int, d *Decision) error {
	return errTrips
}

func (t *storeTable) DecideDry(key string, now time.Duration, n int, take bool) (bool, error) {
	return false, errTrips
}

// HasDryRun tells whether key's policies include a dry-run one.
func (t *storeTable) HasDryRun(key string) bool { return t.setOf(key).HasDryRun() }

func (t *storeTable) AllowEach(items []keytable.Item, now time.Duration) {
	for i := range items {
		items[i].D, items[i].Err = Decision{}, errTrips
	}
}

// dryOnly reports whether op asks a key's dry-run policies alone, for a
// request a line refused (keytable.OpDryRun, OpDryPeek).
func dryOnly(op keytable.Op) bool { return op == keytable.OpDryRun || op == keytable.OpDryPeek }

// errTrips is what a store's table answers a request made at once.
var errTrips = errors.New("chanlimit: a Store's keys are decided through round trips, never at once")

// Refund gives n units back to the local keys (FailLocal's); a Router's
// Refund goes to the store, through Prepare and Finish (keytable.OpRefund).
func (t *storeTable) Refund(key string, now time.Duration, n int) error {
	return t.local.Refund(key, now, n)
}

// GiveBack gives a grant of the local keys back to them; the store's go
// back through Prepare and Finish (keytable.OpGiveBack).
func (t *storeTable) GiveBack(key string, now time.Duration, n int) error {
	return t.local.GiveBack(key, now, n)
}

// Reset drops key's local state; the store's goes through Prepare and
// Finish (keytable.OpReset).
func (t *storeTable) Reset(key string) { t.local.Reset(key) }

// Hint tells what the set of key's policies says: whether n is above its
// capacity, and its tightest enforced policy's Limit and name (none under
// dry-run policies alone).
func (t *storeTable) Hint(key string, n int) (Decision, error) {
	set := t.setOf(key)
	if err := set.Exceeds(n); err != nil {
		return Decision{}, err
	}
	if set.Smallest() < 0 {
		return Decision{}, nil
	}
	p := set.Policies()[set.Smallest()]
	return Decision{Limit: p.Params.Limit, Policy: p.Name}, nil
}

// The rest is the local table's: a store's keys have no lifecycle here.

func (t *storeTable) Expire(now time.Duration, budget int) int { return t.local.Expire(now, budget) }
func (t *storeTable) Len() int                                 { return t.local.Len() }
func (t *storeTable) Counts(now time.Duration) keytable.Counts { return t.local.Counts(now) }
func (t *storeTable) Bound(limit keytable.Limit)               { t.local.Bound(limit) }
func (t *storeTable) Resume(now time.Duration)                 { t.local.Resume(now) }
func (t *storeTable) Changed() (bool, []string)                { return t.local.Changed() }

// Quota tells the set alone: each policy's state is the store's, which
// answers with a request's decision only.
func (t *storeTable) Quota(key string, now time.Duration, q *keytable.Quota) (bool, error) {
	q.Set, q.Policies = t.setOf(key), q.Policies[:0]
	return false, nil
}
func (t *storeTable) Pin(key string)   { t.local.Pin(key) }
func (t *storeTable) Unpin(key string) { t.local.Unpin(key) }
func (t *storeTable) Abandoned()       { t.local.Abandoned() }

func (t *storeTable) Replace(other keytable.Table) { t.local.Replace(other.(*storeTable).local) }

func (t *storeTable) AppendSnapshot(dst []byte, now time.Duration) ([]byte, int, error) {
	return dst, 0, errStoreSnapshot
}

func (t *storeTable) Load(key string, state []byte, now, age time.Duration) error {
	return errStoreSnapshot
}

// Ahead cannot tell: other processes take from the same keys.
func (t *storeTable) Ahead(key string, now time.Duration, ns []int) (at, free time.Duration, ok bool, err error) {
	return 0, 0, false, nil
}

// errStoreSnapshot is Snapshot's and Restore's error with a Store.
var errStoreSnapshot = fmt.Errorf("chanlimit: the state of the keys is the Store's, not the router's: %w", errors.ErrUnsupported)

// checkStore returns nil if store is nil or can decide under policies,
// and otherwise an error wrapping ErrInvalidConfig; field names where the
// policies come from, "" for the single fields.
func checkStore(store Store, field string, policies []Policy) error {
	if store == nil {
		return nil
	}
	if m := store.FailMode(); m > FailLocal {
		return fmt.Errorf("%w: Store: unknown %v", ErrInvalidConfig, m)
	}
	if err := store.Check(policies); err != nil {
		if field != "" {
			field += ": "
		}
		return fmt.Errorf("%w: %sStore: %w", ErrInvalidConfig, field, err)
	}
	return nil
}
