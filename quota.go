package chanlimit

import (
	"context"
	"slices"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

// Quota is what a key has under each of its policies, each taken alone:
// what the IETF RateLimit fields advertise (package httplimit writes them
// from it). AllowQuota, PeekQuota and WaitQuota write it with their
// decision, in the same round trip to the key's partition, so that the
// two describe one instant (with a Store, the quota of a request allowed,
// granted or peeked, takes the partition one more round trip to the
// store, after the decision).
type Quota struct {
	// Policies are the key's policies (its override's, or the router's),
	// in their order. The router hands the same slice for a set of
	// policies while the set is in use, so a caller may keep what it
	// derives from a set by the address of its first policy, as
	// httplimit keeps the formatted RateLimit-Policy field; nobody may
	// change it.
	Policies []Policy

	// Each tells of the policies, in their order: what each has, taken
	// alone, at the instant of the decision. It is empty if an algorithm
	// panicked while it was asked (the key's state is then let go, as
	// after any panic of its rule, and the decision stands). With a
	// Store, whose states the router cannot read, it tells of the
	// deciding policy alone, from the Decision: Remaining is the
	// Decision's (what the request left, or for a peek would leave), and
	// More, after an allowance (a peek's too), the wait for one unit more
	// than Remaining, which the store is asked in one more round trip,
	// after a denial the Decision's RetryAfter (the wait for the
	// request's n units).
	Each []PolicyQuota
}

// PolicyQuota is what a key has under one policy, taken alone.
type PolicyQuota struct {
	Policy    int           // its index in Quota.Policies
	Remaining int           // the requests of one unit it would allow now
	More      time.Duration // the wait until it allows one more than Remaining; 0 if Remaining is its capacity
}

// Refusing returns what each policy that refuses a request of n units
// has, for d the request's denial and q its key's quota as it came with
// d: the deciding policy's (d.Policy) first, then, in q's order, each
// other policy whose own quota would not allow the n units either
// (Remaining below n). It is what package httplimit's problem body names
// as violated-policies, and package grpclimit's QuotaFailure. It is
// empty for an allowance, for a denial by a hold (Router.Hold: no policy
// decided it), and when q tells nothing of the deciding policy (its rule
// panicked while asked). With a Store, q tells of the deciding policy
// alone.
func (q *Quota) Refusing(d Decision, n int) []PolicyQuota {
	if d.Allowed || d.Policy == "" {
		return nil
	}
	deciding := slices.IndexFunc(q.Each, func(pq PolicyQuota) bool { return q.Policies[pq.Policy].Name == d.Policy })
	if deciding < 0 {
		return nil
	}
	out := []PolicyQuota{q.Each[deciding]}
	for k, pq := range q.Each {
		if k != deciding && pq.Remaining < n {
			out = append(out, pq)
		}
	}
	return out
}

// AllowQuota is AllowN, and once the request is decided it writes into q
// what key has under each of its policies, after the request: q holds
// the key's quota if the request was decided, and is empty otherwise. q
// nil asks for none.
func (r *Router) AllowQuota(ctx context.Context, key string, n int, q *Quota) (Decision, error) {
	d, err := r.quota(ctx, key, n, q, (*actor.Partition).AllowQuota)
	if r.observe != nil {
		r.observed(ctx, Event{Kind: EventAllow, Key: key, N: n, Decision: d, Err: err})
	}
	return d, err
}

// PeekQuota is Peek, and writes into q what AllowQuota would, changing
// nothing.
func (r *Router) PeekQuota(ctx context.Context, key string, n int, q *Quota) (Decision, error) {
	return r.quota(ctx, key, n, q, (*actor.Partition).PeekQuota)
}

// WaitQuota is WaitN, and with the grant, or with the denial of a wait
// that ctx's deadline comes before (an error matching
// context.DeadlineExceeded, returned at once, with the Decision that says
// how long the wait would be), writes into q what AllowQuota would. After
// any other error, q is empty.
func (r *Router) WaitQuota(ctx context.Context, key string, n int, q *Quota) (Decision, error) {
	if r.observe == nil {
		return r.quota(ctx, key, n, q, (*actor.Partition).WaitQuota)
	}
	start := r.now()
	d, err := r.quota(ctx, key, n, q, (*actor.Partition).WaitQuota)
	r.observed(ctx, Event{Kind: EventWait, Key: key, N: n, Decision: d, Err: err, Waited: r.since(start)})
	return d, err
}

// askQuota is a partition's AllowQuota, PeekQuota or WaitQuota.
type askQuota func(p *actor.Partition, ctx context.Context, key string, n int, q *keytable.Quota) (Decision, error)

// quota asks key's partition with ask, into a quota of the router's own
// that it copies into q: the partition may write its own until it
// answers, and after a caller that left it is never read or used again.
func (r *Router) quota(ctx context.Context, key string, n int, q *Quota, ask askQuota) (Decision, error) {
	if q == nil {
		q = new(Quota)
	}
	q.Policies, q.Each = nil, q.Each[:0]
	if err := r.check(key, n); err != nil {
		return Decision{}, err
	}
	kq := r.quotas.Get().(*keytable.Quota)
	d, err := ask(r.partition(key), ctx, key, n, kq)
	if err != nil && err == ctx.Err() { // the caller left: kq may be written yet
		return d, err
	}
	if kq.Set != nil && (err == nil || decided(&d)) { // decided: allowed or denied, or a wait refused at once
		q.Policies = quotaPolicies(kq.Set.(*keytable.Set)) // the router made every table: its sets are keytable's
		for _, pq := range kq.Policies {
			q.Each = append(q.Each, PolicyQuota(pq))
		}
	}
	kq.Set, kq.Policies = nil, kq.Policies[:0]
	r.quotas.Put(kq)
	return d, err
}

// decided reports whether d, returned with an error or not, is a decision
// (allowed, or denied with its wait: a wait refused at once carries its
// denial), not the zero Decision of an error. A denial always has a wait;
// a denial by a hold (Router.Hold) has no Limit, so the wait tells it.
func decided(d *Decision) bool { return d.Allowed || d.RetryAfter > 0 }
