package algorithms

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
// is not among ds: the caller sets WouldDeny from it. A Store that decides
// a key's policies itself combines their decisions with Combine, so that
// they read as the router's own.
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
