package chanlimit

import (
	"context"
	"maps"
	"slices"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

// Stats are a router's figures, summed over its partitions. Each
// partition's figures are taken as its turn comes, so the sums are not of
// one instant. The counts are since New.
type Stats struct {
	Keys   int // keys held that are not idle: the keys in use
	Idle   int // keys held that are idle, yet to expire (docs/keys.md)
	Queued int // requests waiting in mailboxes

	// Allowed, Denied and Refused count the answers callers received to
	// AllowN, Allow, each request of AllowBatch, and WaitN (its grants,
	// at once or in line, and its denials at once when the grant would
	// pass ctx's deadline), but not Peek: a request whose caller gave up
	// before its answer counts nowhere.
	Allowed uint64 // decisions that allowed
	Denied  uint64 // decisions that denied
	Refused uint64 // requests refused with ErrTooManyKeys

	// WouldDeny counts the decisions among those that a dry-run policy
	// would have denied (Decision.WouldDeny), allowed or not.
	WouldDeny uint64

	Panicked uint64 // panics of the algorithm (each dropping the key it was on) and of the Clock, whether or not a caller heard of them; in the sum, also those met while Restore loaded a snapshot
	Expired  uint64 // idle keys let go: after their grace, or at once to make room for a new key
	Evicted  uint64 // keys evicted, not idle, to make room for a new key (EvictLRU)

	Waiting int // WaitN calls waiting in line for their grant

	Overrides int // keys with an override (SetOverride), held or not; summed partition by partition, as the rest, so while overrides change it may pass MaxOverrides for a moment, which the keys themselves never do

	StoreErrors uint64 // requests Config.Store failed to answer, a batch's items one by one; 0 without a Store

	ObservePanics uint64 // panics of Config.Observe, recovered; the router's alone, not its partitions'

	// Policies has one PolicyStats for each name among the router's
	// policies and its overrides' (and any policy that counted since
	// New, whose name may be gone since), in name order; past MaxPolicyStats
	// names, the rest are summed under one more named "other" (with a
	// policy of that name, then not listed by itself). The
	// router's alone: nil in Partitions.
	Policies []PolicyStats

	Partitions []Stats // each partition's figures, in the order of partitions; theirs is nil
}

// PolicyStats are the counts of one policy name, summed over the sets of
// policies (the router's, the overrides') that have a policy of that name.
type PolicyStats struct {
	Name      string
	Denied    uint64 // denials this policy decided (Decision.Policy), as Stats.Denied counts them
	WouldDeny uint64 // decisions in which this dry-run policy would have denied (a Peek's not counted; with a Store, which tells whether one would have and not which, each dry-run policy of the key's set counts it)
}

// MaxPolicyStats is the most names Stats.Policies lists one by one.
const MaxPolicyStats = 64

// Stats asks every partition for its figures, through its mailbox. Keys
// and Idle count what the partitions hold at that moment; docs/keys.md
// says more of how exact Idle is when very many keys become idle at once.
func (r *Router) Stats(ctx context.Context) (Stats, error) {
	st := Stats{Partitions: make([]Stats, len(r.parts))}
	policies := make([]map[string]*PolicyStats, len(r.parts))
	err := r.each(ctx, func(i int, s *actor.State) error {
		t := tableOf(s)
		c := t.Counts(s.Now)
		policies[i] = policyStats(s, t.Keys(), c.WouldDeny)
		st.Partitions[i] = Stats{
			Keys:    t.Len() - c.Idle,
			Idle:    c.Idle,
			Allowed: s.Counts.Allowed,
			Denied:  s.Counts.Denied,
			Refused: s.Counts.Refused,

			WouldDeny: s.Counts.WouldDeny,
			Panicked:  c.Panicked + s.Counts.ClockPanics,
			Expired:   c.Expired,
			Evicted:   c.Evicted,

			Waiting:     s.Waiting,
			Overrides:   t.Keys().Overrides(),
			StoreErrors: c.StoreErrors,
		}
		return nil
	})
	if err != nil {
		return Stats{}, err
	}
	for i, p := range r.parts {
		ps := &st.Partitions[i]
		ps.Queued = p.Queued()
		st.Keys += ps.Keys
		st.Idle += ps.Idle
		st.Queued += ps.Queued
		st.Allowed += ps.Allowed
		st.Denied += ps.Denied
		st.Refused += ps.Refused
		st.WouldDeny += ps.WouldDeny
		st.Panicked += ps.Panicked
		st.Expired += ps.Expired
		st.Evicted += ps.Evicted
		st.Waiting += ps.Waiting
		st.Overrides += ps.Overrides
		st.StoreErrors += ps.StoreErrors
	}
	st.Panicked += r.panicked.Load()
	st.ObservePanics = r.observePanics.Load()
	st.Policies = mergePolicyStats(r.policies.Load(), policies)
	return st, nil
}

// policyStats returns a partition's counts by policy name: every name of
// its overrides' sets, and every name that counted.
func policyStats(s *actor.State, keys *keytable.Keys, wouldDeny map[string]uint64) map[string]*PolicyStats {
	m := map[string]*PolicyStats{}
	of := func(name string) *PolicyStats {
		ps, ok := m[name]
		if !ok {
			ps = &PolicyStats{Name: name}
			m[name] = ps
		}
		return ps
	}
	keys.EachOverrideSet(func(set *keytable.Set) { set.EachName(func(name string) { of(name) }) })
	s.EachPolicyDenied(func(name string, n uint64) { of(name).Denied += n })
	for name, n := range wouldDeny {
		of(name).WouldDeny += n
	}
	return m
}

// mergePolicyStats sums the partitions' counts by name, with the names of
// the router's policies, set, in name order; past MaxPolicyStats names,
// the rest under one named "other", with a policy of that name, if any.
func mergePolicyStats(set *keytable.Set, parts []map[string]*PolicyStats) []PolicyStats {
	all := map[string]*PolicyStats{}
	set.EachName(func(name string) { all[name] = &PolicyStats{Name: name} })
	for _, m := range parts {
		for name, ps := range m {
			sum, ok := all[name]
			if !ok {
				sum = &PolicyStats{Name: name}
				all[name] = sum
			}
			sum.Denied += ps.Denied
			sum.WouldDeny += ps.WouldDeny
		}
	}
	names := slices.Sorted(maps.Keys(all))
	if len(names) <= MaxPolicyStats {
		out := make([]PolicyStats, len(names))
		for i, name := range names {
			out[i] = *all[name]
		}
		return out
	}
	out := make([]PolicyStats, 0, MaxPolicyStats+1)
	rest := PolicyStats{Name: actor.OtherPolicies} // the name a partition counts its own past actor.MaxPolicyNames under
	for _, name := range names {
		ps := all[name]
		if name != actor.OtherPolicies && len(out) < MaxPolicyStats {
			out = append(out, *ps)
			continue
		}
		rest.Denied += ps.Denied
		rest.WouldDeny += ps.WouldDeny
	}
	return append(out, rest)
}
