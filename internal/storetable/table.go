// Package storetable is what a router's partition has of its keys when
// the router has a Store: the keys' states are the store's, each request
// an op in a round trip to it (Prepare, Trip.Go, Finish), and what a
// request the store could not answer becomes (the FailMode); its local
// keys hold the router's policies and overrides, and FailLocal's states.
// Package storeloop serves the partition on it.
package storetable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/supervise"
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
	Grant    uint64        // chanlimit.StoreOp's
	Hold     time.Duration // chanlimit.StoreOp's
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
	Hold                     // chanlimit.StoreHold
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
	if supervise.Panicked(err) || errors.Is(err, ErrStoreUnavailable) {
		return err // a panic's wraps it already, and is asked nothing
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

	// dry counts the store's decisions a dry-run policy would have
	// denied (its WouldDeny alone), under the name of each dry-run policy
	// of the key's set: the store says whether one would have, not which.
	dry keytable.Counts

	// spare holds trips that landed (Finish), to fill again: a partition
	// has at most two out, and a trip's slices grown afresh for each
	// round trip cost more, under load, than deciding its ops.
	spare []*Trip
}

var (
	_ actor.Table    = (*Table)(nil) // what a function run by Do finds (actor.State)
	_ keytable.Table = (*Table)(nil) // what the router reads within the partition
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

// Item is one request of a round trip, as the partition hands it to
// Prepare and reads it back after Finish.
type Item struct {
	Key string
	N   int
	D   algorithms.Decision
	Err error

	Kind Kind // what it asks: Allow, Peek, Turn, Reset, Refund, GiveBack, DryRun or Hold

	Hold time.Duration // a Hold's: how long

	// Dry marks an item whose decision is its key's line's (no barging),
	// in D or Err already, for the store's dry-run policies to decide
	// beside it (Kind DryRun, or Peek to take nothing): Finish sets D's
	// WouldDeny alone.
	Dry bool

	Skip bool // answered already, in D or Err: not sent (but for Dry)

	By    From   // where its grant came from (Finish sets it)
	Grant uint64 // with By FromStore: the store's name of the state its grant was taken from
}

// From is where an item's grant came from, and so where it goes back if
// its caller left.
type From uint8

const (
	FromStore   From = iota // the store decided it: a give-back goes to the store (GiveBack)
	FromLocal               // the local keys decided it (FailLocal): a give-back goes to them (Table.GiveBack)
	FromNowhere             // nobody decided it (FailOpen): nothing to give back
)

// Trip is a round trip of a Table's: its ops, and for each its item.
type Trip struct {
	store Decider
	ops   []Op
	at    []int
}

// Go makes the round trip, bounded by ctx as the store can. A store that
// panics could not answer: every op fails with an error wrapping
// ErrStoreUnavailable and the panic, for the FailMode to decide.
func (tr *Trip) Go(ctx context.Context) {
	if err := supervise.Call(ErrStoreUnavailable, func() { tr.store.Decide(ctx, tr.ops) }); err != nil {
		tr.Fail(err)
	}
}

// Fail fails every op of tr with err: the store did not answer (it
// panicked, or ended the goroutine that made the round trip).
func (tr *Trip) Fail(err error) {
	for i := range tr.ops {
		tr.ops[i].Decision, tr.ops[i].Grant, tr.ops[i].Err = algorithms.Decision{}, 0, err
	}
}

// Prepare returns the round trip that decides items at now, or nil if
// none is needed: the items refused at once (n above the capacity) are
// answered, and those answered already are not sent.
func (t *Table) Prepare(items []Item, now time.Duration) *Trip {
	var tr *Trip
	for i := range items {
		it := &items[i]
		if it.Skip && !it.Dry {
			continue
		}
		op := Op{Kind: it.Kind, Key: it.Key, N: it.N, Now: t.now(now)}
		set := t.setOf(it.Key)
		switch it.Kind {
		case Allow, Peek, Turn:
			if it.Dry {
				break
			}
			if err := set.Exceeds(it.N); err != nil {
				it.D, it.Err = algorithms.Decision{}, err
				continue
			}
		case Reset:
			op.N = 0
		case Hold:
			op.N, op.Hold = 0, it.Hold
		case GiveBack:
			op.Grant = it.Grant
		}
		op.Set = set
		if tr == nil {
			tr = t.newTrip(len(items) - i)
		}
		tr.ops = append(tr.ops, op)
		tr.at = append(tr.at, i)
	}
	return tr
}

// newTrip returns an empty trip, a spare one if there is one, with room
// for n ops.
func (t *Table) newTrip(n int) *Trip {
	if k := len(t.spare); k > 0 {
		tr := t.spare[k-1]
		t.spare = t.spare[:k-1]
		return tr
	}
	return &Trip{store: t.store, ops: make([]Op, 0, n), at: make([]int, 0, n)}
}

// Finish delivers the answers of tr, which has landed, to items, and
// keeps tr to fill again. Every answer the store gave is in items before
// the local keys are touched (a Reset's, and a failed op's under the
// FailMode, in the order of the ops), since FailLocal's rule may end the
// goroutine: then each grant the store made is in its item, to be given
// back.
func (t *Table) Finish(tr *Trip, items []Item, now time.Duration) {
	local := false // an op touches the local keys
	for k := range tr.ops {
		op, it := &tr.ops[k], &items[tr.at[k]]
		if it.Dry { // the item's decision is its line's: the store adds WouldDeny
			if op.Err != nil {
				t.errors++ // the dry-run policies did not decide: nothing would have denied
			} else {
				it.D.WouldDeny = op.Decision.WouldDeny
				t.countWouldDeny(op)
			}
			continue
		}
		it.D, it.Err, it.By, it.Grant = op.Decision, nil, FromStore, op.Grant
		if op.Err == nil {
			t.countWouldDeny(op)
		}
		if op.Err != nil {
			it.D, it.Err, it.By = algorithms.Decision{}, unavailable(op.Err), FromNowhere // until failed
		}
		local = local || op.Err != nil || op.Kind == Reset
	}
	for k := 0; local && k < len(tr.ops); k++ {
		op, it := &tr.ops[k], &items[tr.at[k]]
		switch {
		case it.Dry:
		case op.Kind == Reset:
			t.local.Reset(it.Key) // its local state, if FailLocal decided on it
			if op.Err != nil {
				t.failed(it, op, now)
			}
		case op.Err != nil:
			t.failed(it, op, now)
		}
	}
	t.keep(tr)
}

// countWouldDeny counts op's decision, if a dry-run policy would have
// denied it and it was a decision (not a peek), under each dry-run policy
// of its set.
func (t *Table) countWouldDeny(op *Op) {
	if !op.Decision.WouldDeny || op.Kind == Peek {
		return
	}
	op.Set.EachDryRun(func(name string) { t.dry.AddWouldDeny(name, 1) })
}

// keep keeps tr, which has landed and been delivered, to fill again,
// without the references its ops held.
func (t *Table) keep(tr *Trip) {
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
// twice. Nor does a hold, which only the store can keep for every router
// on it: a hold on the local keys alone would hold them here and nowhere
// else.
//
// A store that cannot hold (its error wraps errors.ErrUnsupported) failed
// nothing: the hold's error is its own, not a store unavailable.
func (t *Table) failed(it *Item, op *Op, now time.Duration) {
	if op.Kind == Hold && !supervise.Panicked(op.Err) && errors.Is(op.Err, errors.ErrUnsupported) {
		it.D, it.Err = algorithms.Decision{}, op.Err
		return
	}
	t.errors++
	if op.Kind == Refund || op.Kind == GiveBack || op.Kind == Hold {
		it.D, it.Err = algorithms.Decision{}, unavailable(op.Err)
		return
	}
	switch t.mode {
	case FailOpen:
		it.D, it.Err, it.By = algorithms.Decision{}, nil, FromNowhere
		if op.Kind != Reset {
			it.D = t.open(it.Key, it.N)
		}
	case FailLocal:
		it.D, it.Err, it.By = algorithms.Decision{}, nil, FromLocal
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
// other request does). Those of actor.Table, which a function run by Do
// could call, answer errTrips.

func (t *Table) GiveBack(key string, now time.Duration, n int) error {
	return t.local.GiveBack(key, now, n)
}

func (t *Table) AllowN(string, time.Duration, int, *algorithms.Decision) error { return errTrips }
func (t *Table) PeekN(string, time.Duration, int, *algorithms.Decision) error  { return errTrips }
func (t *Table) Refund(string, time.Duration, int) error                       { return errTrips }
func (t *Table) Reset(string)                                                  {}

// HasDryRun tells whether key's policies include a dry-run one.
func (t *Table) HasDryRun(key string) bool { return t.setOf(key).HasDryRun() }

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
	for name, n := range t.dry.WouldDeny {
		c.AddWouldDeny(name, n)
	}
	return c
}
func (t *Table) Bound(limit keytable.Limit) { t.local.Bound(limit) }
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
