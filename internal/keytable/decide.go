package keytable

import (
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// Deciding a key under several policies, or with a dry-run one: the
// enforced policies together (decideAll, combine), each dry-run policy
// alone (decideDry), as a request's dryMode says; and how long a decision
// keeps its key (keep).

// dryMode is what a decision does with the key's dry-run policies.
type dryMode uint8

const (
	dryTake    dryMode = iota // each decides, and takes if it allows: an answered request
	dryPeek                   // each decides, taking nothing: PeekN
	dryOnGrant                // each decides and takes, if the others grant the request now (Turn): a waiter's turn
	dryNone                   // none decides: the line foreseen (Ahead), which never waits for them
)

func (t *table[S]) HasDryRun(string) bool { return t.set.HasDryRun() }

func (t *table[S]) DecideDry(key string, now time.Duration, n int, take bool) (wouldDeny bool, err error) {
	if !t.set.HasDryRun() {
		return false, nil
	}
	i, held := t.lookup(key)
	if !held {
		i = none
	}
	t.keepFor = 0
	err = t.ask(i, func() { wouldDeny = t.decideDry(i, now, n, take) })
	switch {
	case err != nil:
		wouldDeny = false
	case held:
		if t.keepFor > 0 {
			t.earlier(i, after(now, t.keepFor))
		}
	case take && t.keepFor > 0 && t.room(len(key)): // a new key, which a line never has: kept as AllowN would keep it
		if err = t.admit(now); err == nil {
			t.insert(key, after(now, t.keepFor))
		}
	}
	t.clearFresh()
	return wouldDeny, err
}

// keep returns how long the decision d just made keeps its key, at
// least: until the states it took from are untouched again, as far as d
// tells; 0 if it took nothing.
func (t *table[S]) keep(d *algorithms.Decision) time.Duration {
	switch {
	case t.multi:
		return t.keepFor
	case d.Allowed:
		return d.ResetAfter
	}
	return 0
}

// decideAll decides n units on the key in slot i (none: the fresh
// states) under every enforced policy of the set, and writes the combined
// decision into d: allowed only if every policy allows, and then, with
// commit, taken from each; a denial takes from none. The policies but the
// last decide first without taking (PeekN); the last then decides for real
// if they all allow, so that its denial has nothing to give back, and the
// others take only once it has allowed. Only a rule whose AllowN denies
// what its PeekN allowed makes the policies that took give their units
// back (Refund). The dry-run policies then decide as dry says (decideDry).
// It notes in keepFor how long the decision keeps the key, as AllowN
// would make it (taking from the policies that allow).
func (t *table[S]) decideAll(i uint32, now time.Duration, n int, d *algorithms.Decision, commit bool, dry dryMode) {
	ds, enf := t.ds, t.set.enforced
	allowed := true
	if k := len(enf); k > 0 {
		last := enf[k-1]
		for _, j := range enf[:k-1] {
			t.cols[j].decide(i, now, n, &ds[j], false)
			allowed = allowed && ds[j].Allowed
		}
		took := commit && allowed
		t.cols[last].decide(i, now, n, &ds[last], took)
		allowed = allowed && ds[last].Allowed
		if took && allowed {
			for x, j := range enf[:k-1] {
				if t.cols[j].decide(i, now, n, &ds[j], true); ds[j].Allowed {
					continue
				}
				t.cols[last].refund(i, now, n)
				for _, y := range enf[:x] {
					t.cols[y].refund(i, now, n)
				}
				allowed = false
				break
			}
		}
		if !allowed {
			// A policy that would have allowed reports its state as it
			// is: nothing was taken from it.
			for _, j := range enf {
				if ds[j].Allowed {
					algorithms.Untaken(&ds[j], n, t.cols[j].resetAfter(i, now))
				}
			}
		}
	}
	t.combine(ds, d) // allowed, as d.Allowed is
	t.keepFor = 0
	if allowed {
		t.keepFor = d.ResetAfter
	}
	if dry == dryTake || dry == dryPeek || (dry == dryOnGrant && grants(d)) {
		d.WouldDeny = t.decideDry(i, now, n, commit && dry != dryPeek)
	}
}

// grants reports whether d grants a waiter its turn now (Turn).
func grants(d *algorithms.Decision) bool {
	g, _, _ := actor.Turn(d)
	return g
}

// decideDry decides n units on the key in slot i under each dry-run
// policy alone, taking from each that allows if take, and reports whether
// one would deny: one whose capacity n passes does, and takes nothing. It
// lengthens keepFor to the states of those that allow.
func (t *table[S]) decideDry(i uint32, now time.Duration, n int, take bool) (wouldDeny bool) {
	for _, j := range t.set.dry {
		denies := n > t.set.capacities[j]
		if !denies {
			e := &t.ds[j]
			t.cols[j].decide(i, now, n, e, take)
			if e.Allowed {
				t.keepFor = max(t.keepFor, e.ResetAfter)
			}
			denies = !e.Allowed
		}
		if denies && take { // a decision, not a peek: counted
			t.wouldDeny[j]++
		}
		wouldDeny = wouldDeny || denies
	}
	return wouldDeny
}

// giveBack gives n units back to the enforced policies of the key in slot
// i, as a grant they made at now whose caller left is given back: the
// dry-run policies keep what they took, having counted a request made.
func (t *table[S]) giveBack(i uint32, now time.Duration, n int) {
	for _, j := range t.set.enforced {
		t.cols[j].refund(i, now, n)
	}
}

// combine writes into d the decision of the enforced policies, whose
// decisions are in ds (algorithms.Combine): it moves them to the front of
// ds, in order, over the dry-run policies' (which decideDry decides
// afresh), and names each by its policy.
func (t *table[S]) combine(ds []algorithms.Decision, d *algorithms.Decision) {
	enf := t.set.enforced
	for k, j := range enf { // k <= j: an enforced decision is moved at most once
		ds[k] = ds[j]
		ds[k].Policy = t.set.policies[j].Name
	}
	*d = algorithms.Combine(ds[:len(enf)])
}

// enforcedResetAfter is stateResetAfter under the enforced policies alone:
// what a Decision tells of the key.
func (t *table[S]) enforcedResetAfter(i uint32, now time.Duration) time.Duration {
	if !t.set.HasDryRun() {
		return t.stateResetAfter(i, now)
	}
	var wait time.Duration
	for _, j := range t.set.enforced {
		wait = max(wait, t.cols[j].resetAfter(i, now))
	}
	return wait
}
