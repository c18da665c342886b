// Package storetable is a partition's table when a router has a Store:
// the keys' states are the store's, and each request a round trip to it
// (actor.Remote), which the partition makes off its goroutine.
package storetable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

// Decider is a router's Store as its tables see it: chanlimit.Store, with
// each op's policies as their set (the router gives the store the
// policies of the set).
type Decider interface {
	// Decide serves ops in order, each atomically on its key, and writes
	// each answer into its op, as chanlimit.Store's Decide does.
	Decide(ctx context.Context, ops []Op)
}

// Op is one request to the store: chanlimit.StoreOp, with Set for its
// Policies.
type Op struct {
	Kind     Kind
	Key      string
	N        int
	Set      *keytable.Set
	Now      time.Time
	Decision algorithms.Decision
	Grant    uint64 // chanlimit.StoreOp's
	Err      error
}

// Kind is what an Op asks: chanlimit.StoreOpKind, which is an alias of
// it, and documents each kind.
type Kind uint8

const (
	Allow    Kind = iota + 1 // chanlimit.StoreAllow
	Peek                     // chanlimit.StorePeek
	Refund                   // chanlimit.StoreRefund
	Reset                    // chanlimit.StoreReset
	Turn                     // chanlimit.StoreTurn
	GiveBack                 // chanlimit.StoreGiveBack
	DryRun                   // chanlimit.StoreDryRun
)

// Mode is what a table does with a request the store could not answer:
// chanlimit.FailMode, whose values they are.
type Mode uint8

const (
	FailClosed Mode = iota // chanlimit.FailClosed
	FailOpen               // chanlimit.FailOpen
	FailLocal              // chanlimit.FailLocal
)

// ErrStoreUnavailable is wrapped, with the store's error, by the error of
// a request the store could not answer (package chanlimit returns it as
// ErrStoreUnavailable).
var ErrStoreUnavailable = errors.New("chanlimit: store unavailable")

// unavailable returns err wrapping ErrStoreUnavailable.
func unavailable(err error) error {
	if errors.Is(err, ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
}

// Table is a partition's table when the router has a Store: the keys'
// states are the store's; local holds the partition's overrides, and the
// keys FailLocal decides on while the store cannot answer.
type Table struct {
	store  Decider
	mode   Mode
	clock  bool      // Config.Clock was set: ops carry its time
	origin time.Time // the clock's reading the partition's timeline starts at
	local  *keytable.Keys
	errors uint64 // requests the store failed to answer (Counts.StoreErrors)

	// spare holds trips that landed (Finish), to fill again: a partition
	// has at most two out, and a trip's slices grown afresh for each
	// round trip cost more, under load, than deciding its ops.
	spare []*storeTrip
}

var (
	_ actor.Remote    = (*Table)(nil) // what the partition drives
	_ actor.DryRunner = (*Table)(nil) // its keys may be under dry-run policies
	_ actor.Pinner    = (*Table)(nil) // its local keys may be evicted
	_ actor.Quoter    = (*Table)(nil)
	_ actor.Changer   = (*Table)(nil) // its policies change
	_ actor.Abandoner = (*Table)(nil) // its local keys' rules are supervised
	_ keytable.Table  = (*Table)(nil) // what the router reads within the partition
)

func New(store Decider, mode Mode, local *keytable.Keys, clockSet bool, origin time.Time) *Table {
	return &Table{
		store:  store,
		mode:   mode,
		clock:  clockSet,
		origin: origin,
		local:  local,
	}
}

// setOf returns the set of policies key is under.
func (t *Table) setOf(key string) *keytable.Set {
	if set := t.local.Override(key); set != nil {
		return set
	}
	return t.local.Set()
}

// now returns the time of an op at the partition's now.
func (t *Table) now(now time.Duration) time.Time {
	if !t.clock {
		return time.Time{}
	}
	return t.origin.Add(now)
}

// storeTrip is a round trip of a Table's: its ops, and for each
// its item.
type storeTrip struct {
	store Decider
	ops   []Op
	at    []int
}

func (tr *storeTrip) Go(ctx context.Context) { tr.store.Decide(ctx, tr.ops) }

func (t *Table) Prepare(items []keytable.Item, now time.Duration) actor.Trip {
	var tr *storeTrip
	for i := range items {
		it := &items[i]
		if it.Skip && !dryOnly(it.Op) {
			continue
		}
		op := Op{Key: it.Key, N: it.N, Now: t.now(now)}
		set := t.setOf(it.Key)
		switch it.Op {
		case actor.OpAllow, actor.OpPeek, actor.OpTurn:
			if err := set.Exceeds(it.N); err != nil {
				it.D, it.Err = algorithms.Decision{}, err
				continue
			}
			switch {
			case it.Op == actor.OpPeek:
				op.Kind = Peek
			case it.Op == actor.OpTurn:
				op.Kind = Turn
			default:
				op.Kind = Allow
			}
		case actor.OpReset:
			op.Kind, op.N = Reset, 0
		case actor.OpRefund:
			op.Kind = Refund
		case actor.OpGiveBack:
			op.Kind, op.Grant = GiveBack, it.Grant
		case actor.OpDryRun:
			op.Kind = DryRun
		case actor.OpDryPeek:
			op.Kind = Peek // its WouldDeny alone is read (Finish)
		}
		op.Set = set
		if tr == nil {
			tr = t.newTrip(len(items) - i)
		}
		tr.ops = append(tr.ops, op)
		tr.at = append(tr.at, i)
	}
	if tr == nil {
		return nil // a nil *storeTrip is not a nil Trip
	}
	return tr
}

// newTrip returns an empty trip, a spare one if there is one, with room
// for n ops.
func (t *Table) newTrip(n int) *storeTrip {
	if k := len(t.spare); k > 0 {
		tr := t.spare[k-1]
		t.spare = t.spare[:k-1]
		return tr
	}
	return &storeTrip{store: t.store, ops: make([]Op, 0, n), at: make([]int, 0, n)}
}

// Finish delivers the answers of trip, which has landed, to items, and
// keeps trip to fill again.
func (t *Table) Finish(trip actor.Trip, items []keytable.Item, now time.Duration) {
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
		it.D, it.Err, it.By, it.Grant = op.Decision, nil, actor.FromStore, op.Grant
		if op.Kind == Reset {
			t.local.Reset(it.Key) // its local state, if FailLocal decided on it
		}
		if op.Err != nil {
			t.failed(it, op, now)
		}
	}
	t.keep(tr)
}

// keep keeps tr, which has landed and been delivered, to fill again,
// without the references its ops held.
func (t *Table) keep(tr *storeTrip) {
	clear(tr.ops)
	tr.ops, tr.at = tr.ops[:0], tr.at[:0]
	if len(t.spare) < 2 {
		t.spare = append(t.spare, tr)
	}
}

// failed answers it, whose op the store could not answer, as the router's
// FailMode says, noting where its grant came from. A refund the store
// could not take fails, whatever the FailMode: its grant was the store's,
// and giving it to the local keys, which never granted it, would count it
// twice.
func (t *Table) failed(it *keytable.Item, op *Op, now time.Duration) {
	t.errors++
	if op.Kind == Refund || op.Kind == GiveBack {
		it.D, it.Err = algorithms.Decision{}, unavailable(op.Err)
		return
	}
	switch t.mode {
	case FailOpen:
		it.D, it.Err, it.By = algorithms.Decision{}, nil, actor.FromNowhere
		if op.Kind != Reset {
			it.D = t.open(it.Key, it.N)
		}
	case FailLocal:
		it.D, it.Err, it.By = algorithms.Decision{}, nil, actor.FromLocal
		switch op.Kind {
		case Allow:
			it.Err = t.local.AllowN(it.Key, now, it.N, &it.D)
		case Turn:
			it.Err = t.local.AllowTurn(it.Key, now, it.N, &it.D)
		case Peek:
			it.Err = t.local.PeekN(it.Key, now, it.N, &it.D)
		}
	default:
		it.D, it.Err = algorithms.Decision{}, unavailable(op.Err)
	}
}

// open returns FailOpen's decision: allowed, as an untouched key would be
// (under dry-run policies alone, allowed and nothing else).
func (t *Table) open(key string, n int) algorithms.Decision {
	set := t.setOf(key)
	if set.Smallest() < 0 {
		return algorithms.Decision{Allowed: true}
	}
	p := set.Policies()[set.Smallest()]
	return algorithms.Decision{Allowed: true, Limit: p.Params.Limit, Remaining: set.Capacity() - n, Policy: p.Name}
}

// A partition asks the store only through Prepare and Finish, with the
// round trip off its goroutine: it never decides a key of a store's table
// at once. Of the Table's own methods it calls Expire, and GiveBack, for a
// grant its local keys made (FailLocal's), which goes back to them (a
// grant of the store's goes back through Prepare and Finish, as every
// other request does). The others answer errTrips.

func (t *Table) GiveBack(key string, now time.Duration, n int) error {
	return t.local.GiveBack(key, now, n)
}

func (t *Table) AllowN(string, time.Duration, int, *algorithms.Decision) error    { return errTrips }
func (t *Table) AllowTurn(string, time.Duration, int, *algorithms.Decision) error { return errTrips }
func (t *Table) PeekN(string, time.Duration, int, *algorithms.Decision) error     { return errTrips }
func (t *Table) DecideDry(string, time.Duration, int, bool) (bool, error)         { return false, errTrips }
func (t *Table) Refund(string, time.Duration, int) error                          { return errTrips }
func (t *Table) Reset(string)                                                     {}

// HasDryRun tells whether key's policies include a dry-run one.
func (t *Table) HasDryRun(key string) bool { return t.setOf(key).HasDryRun() }

// dryOnly reports whether op asks a key's dry-run policies alone, for a
// request a line refused (actor.OpDryRun, OpDryPeek).
func dryOnly(op actor.Op) bool { return op == actor.OpDryRun || op == actor.OpDryPeek }

// errTrips is what a store's table answers a request made at once.
var errTrips = errors.New("chanlimit: a Store's keys are decided through round trips, never at once")

// Hint tells what the set of key's policies says: whether n is above its
// capacity, and its tightest enforced policy's Limit and name (none under
// dry-run policies alone).
func (t *Table) Hint(key string, n int) (algorithms.Decision, error) {
	set := t.setOf(key)
	if err := set.Exceeds(n); err != nil {
		return algorithms.Decision{}, err
	}
	if set.Smallest() < 0 {
		return algorithms.Decision{}, nil
	}
	p := set.Policies()[set.Smallest()]
	return algorithms.Decision{Limit: p.Params.Limit, Policy: p.Name}, nil
}

// The rest is the local table's: a store's keys have no lifecycle here.

func (t *Table) Expire(now time.Duration, budget int) int { return t.local.Expire(now, budget) }
func (t *Table) Len() int                                 { return t.local.Len() }
func (t *Table) Counts(now time.Duration) keytable.Counts {
	c := t.local.Counts(now)
	c.StoreErrors = t.errors
	return c
}
func (t *Table) Bound(limit keytable.Limit) { t.local.Bound(limit) }
func (t *Table) Resume(now time.Duration)   { t.local.Resume(now) }
func (t *Table) Changed() (bool, []string)  { return t.local.Changed() }

// Quota tells the set alone: each policy's state is the store's, which
// answers with a request's decision only.
func (t *Table) Quota(key string, now time.Duration, q *keytable.Quota) (bool, error) {
	q.Set, q.Policies = t.setOf(key), q.Policies[:0]
	return false, nil
}
func (t *Table) Pin(key string)   { t.local.Pin(key) }
func (t *Table) Unpin(key string) { t.local.Unpin(key) }
func (t *Table) Abandoned()       { t.local.Abandoned() }

func (t *Table) Replace(other keytable.Table) { t.local.Replace(other.(*Table).local) }

// Keys returns the local keys: the router's policies and overrides are
// theirs.
func (t *Table) Keys() *keytable.Keys { return t.local }

func (t *Table) AppendSnapshot(dst []byte, now time.Duration) ([]byte, int, error) {
	return dst, 0, ErrSnapshot
}

func (t *Table) Load(key string, state []byte, now, age time.Duration) error {
	return ErrSnapshot
}

// ErrSnapshot is Snapshot's and Restore's error with a Store.
var ErrSnapshot = fmt.Errorf("chanlimit: the state of the keys is the Store's, not the router's: %w", errors.ErrUnsupported)
