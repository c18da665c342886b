package chanlimit

import (
	"context"

	"github.com/chanlimit/chanlimit/actor"
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

	Partitions []Stats // each partition's figures, in the order of partitions; theirs is nil
}

// Stats asks every partition for its figures, through its mailbox. Keys
// and Idle count what the partitions hold at that moment; docs/keys.md
// says more of how exact Idle is when very many keys become idle at once.
func (r *Router) Stats(ctx context.Context) (Stats, error) {
	st := Stats{Partitions: make([]Stats, len(r.parts))}
	err := r.each(ctx, func(i int, s *actor.State) error {
		t := tableOf(s)
		c := t.Counts(s.Now)
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
	return st, nil
}
