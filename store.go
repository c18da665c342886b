package chanlimit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/chanlimit/chanlimit/internal/storetable"
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
//
// A request whose caller leaves before its answer comes may have been
// decided by then: a grant the store made is given back (StoreGiveBack)
// once its answer lands, so its units are held until the give-back is
// made, and stay taken if the store never answers, as any grant would. In
// memory, a request whose caller left uses up nothing.
type Store interface {
	// Check returns nil if the store can decide under policies (valid
	// as New checks them), and otherwise an error that says why. New,
	// SetPolicies and SetOverride call it, and wrap its error with
	// ErrInvalidConfig.
	Check(policies []Policy) error

	// Decide serves ops in order, each atomically on its key, and writes
	// each answer into its op: Decision, or Err if the store could not
	// answer it (Redis down, a timeout). Ops on one key are served in
	// their order in ops. ctx bounds the whole call, as far as the
	// store can: once a request has gone out, a store may wait past ctx
	// for its answer (redislimit does: the router gives back the grants
	// of callers that left only from answers). Decide is called by
	// several goroutines at once (each partition has a few round trips
	// out, and a router many partitions). It must not keep ops, or write
	// into them, once it has returned: the router reuses them. A Decide
	// that panics, or ends its goroutine (runtime.Goexit), answered none
	// of ops: each is one the store could not answer (ErrStoreUnavailable,
	// wrapping the panic's value), and the router goes on.
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

	// Grant names the state of Key a grant was taken from: the store sets
	// it with an allowed Decision of a StoreAllow or a StoreTurn (0 if it
	// cannot name one), and a StoreGiveBack carries the Grant of the
	// grant it takes back, so that the store gives the units back to that
	// state alone: not once the key was Reset, or its policies changed,
	// since the grant, whatever else happened to it meanwhile.
	Grant uint64

	Hold time.Duration // StoreHold's: how long, from Now

	Err error // set if the store could not answer; the router returns it wrapped in ErrStoreUnavailable
}

// StoreOpKind is what a StoreOp asks. It is the one set of kinds for the
// router and its serving of a Store, which are of a package of their
// own: this is an alias of that package's type, with the same values.
type StoreOpKind = storetable.Kind

const (
	// StoreAllow decides N units on Key as Router.AllowN does: all or
	// nothing, under every policy at once.
	StoreAllow = storetable.Allow

	// StorePeek answers what StoreAllow would, changing nothing.
	StorePeek = storetable.Peek

	// StoreRefund gives N units back to each of Key's policies at Now, as
	// Router.Refund does; a key without state is left without.
	StoreRefund = storetable.Refund

	// StoreReset drops Key's state: its next request finds it untouched.
	StoreReset = storetable.Reset

	// StoreTurn decides N units as StoreAllow does, for a caller waiting
	// in line, whose turn comes only once the request is allowed with no
	// Delay: a turn that must wait (leaky_bucket's, allowed with a Delay)
	// takes nothing, and is answered not Allowed, with its Delay, the wait
	// for its turn; the key's dry-run policies decide (and take) only if
	// the turn is granted. So a turn that must wait is asked again, having
	// held nothing meanwhile.
	StoreTurn = storetable.Turn

	// StoreGiveBack takes back a grant of N units on Key (a StoreAllow,
	// or a StoreTurn that granted) whose caller left before its answer
	// came: StoreRefund to the policies that are not dry-run alone (a
	// dry-run policy counts every request decided), at Now, the grant's
	// own time, and only to the state the grant was taken from, which
	// Grant names: if Key was Reset since, or its policies changed, the
	// store gives nothing back. A Grant of 0 names no state: the store
	// gives the units back as it can. Policies are those the grant was
	// decided under, or the key's since.
	StoreGiveBack = storetable.GiveBack

	// StoreDryRun decides N units on Key under its dry-run policies alone,
	// each taking if it allows, as StoreAllow decides them, and asks the
	// others nothing: a request that callers waiting on the key refused
	// (no barging) is decided by its dry-run policies all the same. Only
	// Decision.WouldDeny is read. Ops of this kind come only with a
	// dry-run policy among Policies.
	StoreDryRun = storetable.DryRun

	// StoreHold holds Key for Hold from Now (Router.Hold): until then the
	// store denies StoreAllow, StorePeek and StoreTurn on Key, taking
	// nothing from any policy, dry-run ones included, with the wait until
	// the same request would be allowed (the hold's end, then what the
	// policies would ask at that instant), Remaining 0, Limit 0 and Policy
	// "", and StoreDryRun decides nothing. A hold only moves later, never
	// earlier; StoreReset ends it; the key's state is kept at least until
	// it ends. N is 0; Hold is at least a nanosecond. A store that cannot
	// hold sets Err to an error wrapping errors.ErrUnsupported, and the
	// router returns it from Hold as it is (not as ErrStoreUnavailable,
	// and never a FailMode's answer: a hold kept by one router alone would
	// hold nothing for the others).
	StoreHold = storetable.Hold
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

// decider is the Store as a partition's table (storetable) sees it: it
// hands the table's ops to the Store with their policies, and reads the
// answers back. It runs on a partition's trip workers, several at once.
type decider struct{ store Store }

func (d decider) Decide(ctx context.Context, ops []storetable.Op) {
	sp := storeOps.Get().(*[]StoreOp)
	sops := slices.Grow((*sp)[:0], len(ops))
	for i := range ops {
		op := &ops[i]
		sops = append(sops, StoreOp{Kind: op.Kind, Key: op.Key, N: op.N, Policies: sharedPolicies(op.Set), Now: op.Now, Grant: op.Grant, Hold: op.Hold})
	}
	d.store.Decide(ctx, sops)
	for i := range sops {
		ops[i].Decision, ops[i].Grant, ops[i].Err = sops[i].Decision, sops[i].Grant, sops[i].Err
	}
	clear(sops) // no key, policy or error is kept
	*sp = sops[:0]
	storeOps.Put(sp)
}

// storeOps holds the ops' slices of the round trips that have landed.
var storeOps = sync.Pool{New: func() any { return new([]StoreOp) }}
