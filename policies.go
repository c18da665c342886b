package chanlimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/supervise"
)

// Policy is one limit a key's requests must keep: Limit requests per
// Window under Algorithm, with Burst for the bucket algorithms (see the
// fields of Config of the same names). A key under several policies is
// allowed a request only if every policy allows it, and then the request
// takes from each; a denial takes from none (docs/policies.md).
//
// In JSON (a configuration file), a Policy is an object with the keys
// "name", "algorithm", "limit", "window" (a duration string: "1m30s"),
// "burst" and "dry_run": MarshalJSON, UnmarshalJSON and ParsePolicies.
type Policy struct {
	// Name tells the policy apart from the key's others: in
	// Decision.Policy, in changes of policies (a key keeps its state under
	// a policy whose Name and Algorithm stay the same) and in the HTTP
	// fields. Names are unique within a Router's policies, and within an
	// override's; "" means "default". A Name is printable ASCII.
	Name string

	Algorithm string        // "" means DefaultAlgorithm
	Limit     int           // requests allowed per Window; > 0
	Window    time.Duration // > 0
	Burst     int           // the bucket algorithms' capacity; 0 means Limit; for the others, anything but 0 is an ErrInvalidConfig

	// DryRun makes the policy a shadow one, to see whom a limit would
	// deny before enforcing it: it is decided on every request and keeps
	// its own state as if it were the key's only policy (taking when it
	// would allow, nothing when it would deny), but it never denies and
	// never shapes the Decision, whose WouldDeny says it would have
	// denied (docs/policies.md, "Dry-run policies").
	DryRun bool
}

// DefaultPolicyName is the Name of a Policy whose Name is "", and so of
// the policy that Config's single fields describe.
const DefaultPolicyName = "default"

// policiesOf returns the policies cfg describes: Policies, or its single
// fields as the policy named DefaultPolicyName.
func policiesOf(cfg Config) ([]Policy, error) {
	single := cfg.Algorithm != "" || cfg.Limit != 0 || cfg.Window != 0 || cfg.Burst != 0
	switch {
	case len(cfg.Policies) > 0 && single:
		return nil, fmt.Errorf("%w: Policies and the single fields (Algorithm, Limit, Window, Burst) are both set: give every policy in Policies, or just the one in the single fields", ErrInvalidConfig)
	case len(cfg.Policies) > 0:
		return cfg.Policies, nil
	case !single:
		return nil, fmt.Errorf("%w: no limit: set Limit and Window (and maybe Algorithm and Burst), or Policies", ErrInvalidConfig)
	}
	return []Policy{{Algorithm: cfg.Algorithm, Limit: cfg.Limit, Window: cfg.Window, Burst: cfg.Burst}}, nil
}

// compile checks policies and makes their rules. field names them in
// errors ("Policies" in New, or the method's name), or is "" for the
// single fields of a Config, whose errors name just the field.
func compile(field string, policies []Policy) (*keytable.Set, error) {
	if len(policies) == 0 {
		return nil, fmt.Errorf("%w: %s: at least one policy is needed", ErrInvalidConfig, field)
	}
	out := make([]keytable.Policy, len(policies))
	seen := make(map[string]int, len(policies)) // each name's index: a snapshot may hold very many policies
	for j, p := range policies {
		name := cmp.Or(p.Name, DefaultPolicyName)
		where := ""
		if field != "" {
			where = fmt.Sprintf("%s[%d] (%q): ", field, j, name)
		}
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("%w: %sName: %v", ErrInvalidConfig, where, err)
		}
		if k, ok := seen[name]; ok {
			return nil, fmt.Errorf("%w: %sName: %s[%d] has that name too: names are unique", ErrInvalidConfig, where, field, k)
		}
		seen[name] = j
		rule, err := newRule(where, p)
		if err != nil {
			return nil, err
		}
		out[j] = keytable.Policy{
			Name:      name,
			Algorithm: cmp.Or(p.Algorithm, DefaultAlgorithm),
			Params:    algorithms.Params{Limit: p.Limit, Window: p.Window, Burst: p.Burst},
			Rule:      rule,
			DryRun:    p.DryRun,
		}
	}
	set := keytable.NewSet(out)
	set.Owner = newSharedSet(set)
	return set, nil
}

// sharedSet is the policies of a set as the router hands them on, the
// same slices for the set for as long as it lasts: one that a Store's ops
// carry, and another that Quotas carry, so that a caller who writes to a
// Quota's (which nobody may) changes nothing a Store enforces.
type sharedSet struct {
	ops, quota []Policy
}

func newSharedSet(set *keytable.Set) *sharedSet {
	return &sharedSet{ops: policiesFrom(set), quota: policiesFrom(set)}
}

// sharedPolicies returns the policies of set that a Store's ops carry.
func sharedPolicies(set *keytable.Set) []Policy { return set.Owner.(*sharedSet).ops }

// quotaPolicies returns the policies of set that Quotas carry.
func quotaPolicies(set *keytable.Set) []Policy { return set.Owner.(*sharedSet).quota }

// checkName checks a policy's name: printable ASCII, as an HTTP field's
// string needs.
func checkName(name string) error {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%q: a name is printable ASCII (byte %d is %#x)", name, i, c)
		}
	}
	return nil
}

// newRule makes the rule p names, after checking what every rule needs of
// Limit, Window and Burst. where prefixes the field in errors.
func newRule(where string, p Policy) (rule keytable.Rule, err error) {
	name := cmp.Or(p.Algorithm, DefaultAlgorithm)
	mk, err := lookup(where, name)
	if err != nil {
		return nil, err
	}
	switch {
	case p.Limit <= 0:
		return nil, fmt.Errorf("%w: %sLimit: must be > 0 (got %d)", ErrInvalidConfig, where, p.Limit)
	case p.Window <= 0:
		return nil, fmt.Errorf("%w: %sWindow: must be > 0 (got %v)", ErrInvalidConfig, where, p.Window)
	case p.Burst < 0:
		return nil, fmt.Errorf("%w: %sBurst: must be >= 0, where 0 means Limit (got %d)", ErrInvalidConfig, where, p.Burst)
	}
	capacity := 0
	if perr := supervise.Call(ErrAlgorithmPanic, func() {
		if rule, err = mk(algorithms.Params{Limit: p.Limit, Window: p.Window, Burst: p.Burst}); err == nil {
			capacity = rule.Capacity()
		}
	}); perr != nil {
		rule, err = nil, perr
	}
	switch {
	case supervise.Panicked(err):
		return nil, fmt.Errorf("%w: %sAlgorithm %q: %w", ErrInvalidConfig, where, name, err)
	case err != nil: // the constructor's: read once, never asked anything
		return nil, fmt.Errorf("%w: %sAlgorithm %q: %w", ErrInvalidConfig, where, name, supervise.Wrap(err))
	case capacity < 1:
		return nil, fmt.Errorf("%w: %sAlgorithm %q: its Machine's Capacity is %d: it could never allow anything", ErrInvalidConfig, where, name, capacity)
	}
	return rule, nil
}

// Policies returns the router's policies: those every key without an
// override is under, once a SetPolicies that is switching the partitions
// has returned.
func (r *Router) Policies() []Policy { return policiesFrom(r.policies.Load()) }

// policiesFrom returns the Policies of set.
func policiesFrom(set *keytable.Set) []Policy {
	ps := set.Policies()
	out := make([]Policy, len(ps))
	for j, p := range ps {
		out[j] = Policy{Name: p.Name, Algorithm: p.Algorithm, Limit: p.Params.Limit, Window: p.Params.Window, Burst: p.Params.Burst, DryRun: p.DryRun}
	}
	return out
}

// takeToken waits for token, one of the router's administrative tokens, and
// returns the function that gives it back:
//
//   - policiesToken is held by SetPolicies, Snapshot and Restore, so that
//     none of them sees the partitions half-way through another (a
//     snapshot under two sets of policies, a restore over a switch);
//   - overridesToken by SetOverride, ClearOverride and Restore, so that a
//     restore, which sets every partition's overrides one partition after
//     another, never meets an override set in between and passes
//     MaxOverrides. (SetOverride and ClearOverride change one partition
//     each, and count there, so they need nothing more of one another.)
//
// Restore holds both, taking policiesToken first.
func takeToken(ctx context.Context, token chan struct{}) (release func(), err error) {
	select {
	case token <- struct{}{}:
		return func() { <-token }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// SetPolicies replaces the router's policies, live: every key without an
// override is under policies from then on. Each partition switches between
// two of its requests, so a request is decided under the old policies or
// the new ones, never a mix; the partitions switch one after another, and
// Policies reports the new ones once all have.
//
// A key keeps its state under each new policy whose Name and Algorithm one
// of its old policies had (a bucket its tokens, capped at the new
// capacity; a window its log or counts, capped at the new Limit), read
// under the new Limit and Window from the moment of the switch; under
// every other policy it starts untouched (docs/policies.md). A key
// idle under a policy starts untouched under the new one.
//
// policies are checked as Config.Policies is in New; an invalid one is an
// ErrInvalidConfig naming the policy and the field, and changes nothing.
// SetPolicies returns ctx.Err() if ctx is done before it starts switching
// (it waits for a Snapshot or Restore under way), having changed nothing;
// once it has started, every partition switches whatever ctx does. It returns ErrClosed if the router is
// closed (then some partitions may have switched). A rule that panics, or
// runs runtime.Goexit, while a key's state is carried over costs that key
// its state (it starts untouched, and the panic counts in
// Stats.Panicked), and the switch goes on. A switch costs each partition
// a pass over its keys, during which it serves no request, and holds the
// old and the new table meanwhile. (A rule that runs runtime.Goexit ends
// that pass: the partition, already under the new policies, serves the
// requests queued meanwhile, carrying each key over as it is asked about,
// until SetPolicies asks it to carry the rest.)
func (r *Router) SetPolicies(ctx context.Context, policies ...Policy) error {
	set, err := compile("SetPolicies", policies)
	if err != nil {
		return err
	}
	if err := checkStore(r.store, "SetPolicies", policiesFrom(set)); err != nil {
		return err
	}
	release, err := takeToken(ctx, r.policiesToken)
	if err != nil {
		return fmt.Errorf("chanlimit: SetPolicies: %w", err)
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("chanlimit: SetPolicies: %w", err)
	}
	for _, p := range r.parts { // all of them, not to be left half-done
		if err := switchPolicies(p, set); err != nil {
			return fmt.Errorf("chanlimit: SetPolicies: %w", err)
		}
	}
	r.policies.Store(set)
	return nil
}

// switchPolicies puts the keys of p without an override under set. The
// partition installs set in one step, and then carries its keys over to
// it; a rule that ends the goroutine (runtime.Goexit) on a key fails the
// Do as a panic would, the key it was on dropped and counted, as for a
// panic, and the keys not carried yet are carried as they are next used:
// another Do carries them now, until one meets no Goexit. Each Goexit
// drops a key, so that ends.
func switchPolicies(p *actor.Partition, set *keytable.Set) error {
	for {
		err := p.Do(context.Background(), func(s *actor.State) error {
			keysOf(s).SetPolicies(set, s.Now)
			return nil
		})
		switch {
		case errors.Is(err, ErrAlgorithmPanic) && supervise.Panicked(err): // a Goexit: again
		case err == nil || supervise.Panicked(err):
			return nil
		default:
			return err
		}
	}
}

// SetOverride puts key under policies of its own, in place of the
// router's, until ClearOverride: an override is kept while the key's state
// is let go when idle, is never evicted, and is in snapshots. A key
// keeps its state across the change as with SetPolicies (a rule that
// panics while it is carried over leaves the key untouched, counted in
// Stats.Panicked). Setting the override a key already has changes nothing.
//
// policies are checked as Config.Policies is in New (an ErrInvalidConfig
// changes nothing). SetOverride returns ErrKeyTooLong for a key longer than
// MaxKeyBytes; ErrTooManyOverrides if the key has no override and
// MaxOverrides keys already have one; ErrClosed once the router is closed;
// and ctx.Err() if ctx is done before the key's partition has taken the
// request (then the override may or may not be set).
func (r *Router) SetOverride(ctx context.Context, key string, policies ...Policy) error {
	if len(key) > r.maxKeyBytes {
		return r.keyTooLong(key)
	}
	set, err := compile("SetOverride", policies)
	if err != nil {
		return err
	}
	if err := checkStore(r.store, "SetOverride", policiesFrom(set)); err != nil {
		return err
	}
	release, err := takeToken(ctx, r.overridesToken)
	if err != nil {
		return fmt.Errorf("chanlimit: SetOverride: %w", err)
	}
	defer release()
	err = r.partition(key).Do(ctx, func(s *actor.State) error {
		keys := keysOf(s)
		if keys.Override(key) != nil {
			keys.SetOverride(key, set, s.Now)
			return nil
		}
		if !r.takeOverride() {
			return fmt.Errorf("%w: MaxOverrides is %d", ErrTooManyOverrides, r.maxOverrides)
		}
		added := false
		defer func() { // also when a rule ends the goroutine: the count stays right
			if !added {
				r.overrides.Add(-1)
			}
		}()
		added = keys.SetOverride(key, set, s.Now)
		return nil
	})
	if err != nil {
		return fmt.Errorf("chanlimit: SetOverride: %w", err)
	}
	return nil
}

// takeOverride counts one more key with an override, unless MaxOverrides
// keys have one already. It is called on the key's partition, so that a
// caller that stops waiting cannot make the count wrong.
func (r *Router) takeOverride() bool {
	for {
		n := r.overrides.Load()
		if r.maxOverrides > 0 && n >= int64(r.maxOverrides) {
			return false
		}
		if r.overrides.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// ClearOverride puts key back under the router's policies, keeping its
// state as SetPolicies does; for a key without an override it does
// nothing. Its errors are SetOverride's, but ErrTooManyOverrides. The key
// counts against MaxKeys again: a partition it puts over its share keeps
// it, and then makes room for a new key as after a Restore (see Restore).
func (r *Router) ClearOverride(ctx context.Context, key string) error {
	if len(key) > r.maxKeyBytes {
		return r.keyTooLong(key)
	}
	release, err := takeToken(ctx, r.overridesToken)
	if err != nil {
		return fmt.Errorf("chanlimit: ClearOverride: %w", err)
	}
	defer release()
	err = r.partition(key).Do(ctx, func(s *actor.State) error {
		if keysOf(s).ClearOverride(key, s.Now) {
			r.overrides.Add(-1)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("chanlimit: ClearOverride: %w", err)
	}
	return nil
}

// tableOf returns the table of the partition whose state s is, for a
// function the partition runs (Do): only such a function reads or
// changes it.
func tableOf(s *actor.State) keytable.Table { return s.Table.(keytable.Table) }

// keysOf returns the keys of the partition whose state s is, whose
// policies and overrides the router sets (tableOf).
func keysOf(s *actor.State) *keytable.Keys { return tableOf(s).Keys() }

// PoliciesOf returns the policies key is under now: its override's, if it
// has one, or else the router's (Policies). It asks the key's partition
// only while some key of the router has an override; then it returns
// ErrClosed once the router is closed, and ctx.Err() if ctx ends first.
// It returns ErrKeyTooLong for a key longer than MaxKeyBytes.
func (r *Router) PoliciesOf(ctx context.Context, key string) ([]Policy, error) {
	set, err := r.policySetOf(ctx, key)
	if err != nil {
		return nil, err
	}
	return policiesFrom(set), nil
}

// policySetOf returns the set of policies key is under now, as PoliciesOf
// does.
func (r *Router) policySetOf(ctx context.Context, key string) (*keytable.Set, error) {
	if len(key) > r.maxKeyBytes {
		return nil, r.keyTooLong(key)
	}
	if r.overrides.Load() == 0 { // counted before an override is set, so none is
		return r.policies.Load(), nil
	}
	var set *keytable.Set
	err := r.partition(key).Do(ctx, func(s *actor.State) error {
		keys := keysOf(s)
		set = cmp.Or(keys.Override(key), keys.Set()) // the partition's own: it may have switched before the router's
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chanlimit: PoliciesOf: %w", err)
	}
	return set, nil
}
