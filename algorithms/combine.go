package algorithms

import "time"

// Combine returns the decision of a request that several policies decided
// together, as chanlimit answers it: ds holds each policy's own decision,
// in the policies' order, with its Policy set. The request is allowed if
// every policy allowed it. Remaining is the smallest, ResetAfter the
// largest, and, allowed, Delay the largest; denied, RetryAfter is the
// longest wait of the policies that denied. The policy that decided
// (Policy, and Limit, its) is, on a denial, the denying one with the
// longest wait, and otherwise the one with the fewest Remaining: the
// first on a tie. With no decision there is nothing to enforce: the
// request is allowed, and the decision says nothing else.
//
// A dry-run policy (chanlimit.Policy.DryRun) never denies, so its decision
// is not among ds: the caller sets WouldDeny from it. A policy that
// allowed a request the others denied took nothing, and reports its state
// as it is: the caller sets its decision so first (Untaken). A Store that
// decides a key's policies itself combines their decisions with Untaken
// and Combine, so that they read as the router's own.
func Combine(ds []Decision) Decision {
	switch len(ds) {
	case 0:
		return Decision{Allowed: true}
	case 1: // the common case, at the cost of a copy
		d := ds[0]
		d.WouldDeny = false
		if d.Allowed {
			d.RetryAfter = 0
		} else {
			d.Delay = 0
		}
		return d
	}
	allowed := true
	for i := range ds {
		allowed = allowed && ds[i].Allowed
	}
	d := Decision{Allowed: allowed, Remaining: ds[0].Remaining}
	by := -1
	for i := range ds {
		e := &ds[i]
		d.Remaining = min(d.Remaining, e.Remaining)
		d.ResetAfter = max(d.ResetAfter, e.ResetAfter)
		switch {
		case allowed:
			d.Delay = max(d.Delay, e.Delay)
			if by < 0 || e.Remaining < ds[by].Remaining {
				by = i
			}
		case !e.Allowed && (by < 0 || e.RetryAfter > ds[by].RetryAfter):
			by = i
		}
	}
	if !allowed {
		d.RetryAfter = ds[by].RetryAfter
	}
	d.Limit, d.Policy = ds[by].Limit, ds[by].Policy
	return d
}

// Untaken sets d, the decision for n units of a policy that allowed a
// request its key's other policies denied together, to what that policy
// reports: its state as it is, since nothing was taken from it. Remaining
// is n more, ResetAfter is resetAfter (the state's as it is) and Delay is
// 0. A Store that decides a key's policies itself calls it before
// Combine, as the router does in memory.
func Untaken(d *Decision, n int, resetAfter time.Duration) {
	d.Remaining += n
	d.ResetAfter = resetAfter
	d.Delay = 0
}
