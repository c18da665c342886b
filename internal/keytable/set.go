package keytable

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// Policy is one policy of a set: a rule, with the name and the algorithm
// it was configured under.
type Policy struct {
	Name      string
	Algorithm string
	Params    algorithms.Params
	Rule      Rule
	DryRun    bool // decided on every request, alone, but never denying (see Set)
}

// Set is the policies every request of a key must pass, in order: a
// request is allowed only if each allows it, and then takes from each.
// Its dry-run policies (Policy.DryRun) are apart: each decides every
// request alone, as if it were the key's only policy (taking if it
// allows, whatever the others say), and never denies: the decision is the
// other policies' (every field of it; allowed with no other field set if
// all are dry-run), and its WouldDeny says whether one of them would have
// denied. A waiter never waits for them: they decide its grant. A
// Set is immutable and shared: by the tables made from it, and by the keys
// whose override it is. Tables keep a key's state under the first policy
// inline in its slot, and its states under the others in columns beside
// the slots, so a key under k policies costs its k states and one slot.
type Set struct {
	// Owner is what the set's maker keeps with it, set before the set is
	// shared and never changed after: package chanlimit's []Policy, as
	// its Store and Quota hand them on.
	Owner any

	policies   []Policy
	capacities []int  // each policy's rule's
	capacity   int    // the smallest of the enforced policies' capacities; MaxInt if all are dry-run
	smallest   int    // the first enforced policy with that capacity; -1 if all are dry-run
	enforced   []int  // the policies that are not dry-run, in order
	dry        []int  // the dry-run policies, in order
	id         string // the policies' names, algorithms, Params and DryRun, for Same
}

// NewSet returns the set of policies, which must not be empty and whose
// rules must each have a capacity of at least 1; their names are the
// caller's to keep unique.
func NewSet(policies []Policy) *Set {
	s := &Set{policies: policies, capacities: make([]int, len(policies)), capacity: math.MaxInt, smallest: -1}
	var id strings.Builder
	for j, p := range policies {
		c := p.Rule.Capacity()
		s.capacities[j] = c
		if p.DryRun {
			s.dry = append(s.dry, j)
		} else {
			s.enforced = append(s.enforced, j)
			if s.smallest < 0 || c < s.capacity {
				s.capacity, s.smallest = c, j
			}
		}
		fmt.Fprintf(&id, "%q %q %d %d %d %t;", p.Name, p.Algorithm, p.Params.Limit, p.Params.Window, p.Params.Burst, p.DryRun)
	}
	s.id = id.String()
	return s
}

// HasDryRun reports whether s has a dry-run policy.
func (s *Set) HasDryRun() bool { return len(s.dry) > 0 }

// EachName calls f with the name of each policy of s, in order.
func (s *Set) EachName(f func(name string)) {
	for j := range s.policies {
		f(s.policies[j].Name)
	}
}

// EachDryRun calls f with the name of each dry-run policy of s, in order.
func (s *Set) EachDryRun(f func(name string)) {
	for _, j := range s.dry {
		f(s.policies[j].Name)
	}
}

// Policies returns the policies of s, which the caller must not change.
func (s *Set) Policies() []Policy { return s.policies }

// Index returns the index of the policy of s named name, or -1.
func (s *Set) Index(name string) int {
	for j := range s.policies {
		if s.policies[j].Name == name {
			return j
		}
	}
	return -1
}

// Capacity returns the largest n a key under s can ever be allowed: the
// smallest capacity of its enforced policies (math.MaxInt if all are
// dry-run: nothing is refused).
func (s *Set) Capacity() int { return s.capacity }

// Same reports whether s and o hold the same policies, in the same order:
// names, algorithms, Params and DryRun.
func (s *Set) Same(o *Set) bool { return s == o || s.id == o.id }

// SameStates reports whether a key's states under s mean what they mean
// under o: the same names, algorithms, Limits, Windows and capacities, in
// order. DryRun may differ (a state means the same whether its policy
// enforces or not), and so may Burst where the capacity does not (Burst 0
// is Limit). A snapshot taken under s restores under o if it holds.
func (s *Set) SameStates(o *Set) bool {
	if len(s.policies) != len(o.policies) {
		return false
	}
	for j := range s.policies {
		x, y := &s.policies[j], &o.policies[j]
		if x.Name != y.Name || x.Algorithm != y.Algorithm || x.Params.Limit != y.Params.Limit ||
			x.Params.Window != y.Params.Window || s.capacities[j] != o.capacities[j] {
			return false
		}
	}
	return true
}

// NewTable returns an empty table of keys under s: NewKeys(s).
func (s *Set) NewTable() *Keys { return NewKeys(s) }

func (s *Set) newTable() setTable {
	extra := make([]column, len(s.policies)-1)
	for j := range extra {
		extra[j] = s.policies[j+1].Rule.newColumn()
	}
	return s.policies[0].Rule.newTable(s, extra)
}

// Exceeds returns the error for a request of n units above s's capacity,
// or nil if n is at most the capacity.
func (s *Set) Exceeds(n int) error {
	if n <= s.capacity {
		return nil
	}
	return s.exceeds(n)
}

// Smallest returns the index of the first enforced policy with the
// smallest capacity, or -1 if every policy is dry-run.
func (s *Set) Smallest() int { return s.smallest }

// exceeds returns the error for a request of n units above s's capacity.
func (s *Set) exceeds(n int) error {
	if len(s.policies) == 1 {
		return fmt.Errorf("%w: n = %d, capacity %d", actor.ErrExceedsCapacity, n, s.capacity)
	}
	return fmt.Errorf("%w: n = %d, capacity %d (policy %q)", actor.ErrExceedsCapacity, n, s.capacity, s.policies[s.smallest].Name)
}

// index returns the index of the policy of s that a key's state under p
// carries over to (same name, same algorithm), or -1.
func (s *Set) index(p *Policy) int {
	for j := range s.policies {
		if q := &s.policies[j]; q.Name == p.Name && q.Algorithm == p.Algorithm {
			return j
		}
	}
	return -1
}

// column is the states of one policy of a table's set, one per slot: for
// the first policy, the states inline in the slots (head); for each other,
// a slice beside the slots (states), kept in step with them as links are.
// Each has a state of its own for a key the table does not hold, fresh,
// which is untouched until the table is deciding a new key or loading one.
type column interface {
	// decide decides n units on the state of slot i (none: fresh) at now
	// into d, taking them if it allows and commit is set.
	decide(i uint32, now time.Duration, n int, d *algorithms.Decision, commit bool)
	refund(i uint32, now time.Duration, n int)
	resetAfter(i uint32, now time.Duration) time.Duration

	// push appends fresh as the state of a new last slot; move puts slot
	// from's state in slot to; pop drops the last slot's. The head leaves
	// these to the table.
	push()
	move(from, to uint32)
	pop()

	// clearFresh makes fresh untouched again, holding nothing.
	clearFresh()

	// copyOf sets fresh to a copy of the state of slot i that deciding
	// changes apart from it, and reports whether it could (see copyState).
	copyOf(i uint32, now time.Duration) bool

	// give sets dst's fresh to the state of slot i (none: fresh), if dst
	// is a column of the same state type (a policy of the same
	// algorithm): as it is if same (dst's rule was made from the same
	// Params), else adopted by dst's rule if it is an Adopter (see
	// carryState); otherwise dst's fresh stays untouched.
	give(i uint32, dst column, now time.Duration, same bool)

	// canSave reports whether the rule can save its states;
	// appendState appends the state of slot i at now, and parseState
	// sets fresh to the state src holds.
	canSave() bool
	appendState(dst []byte, i uint32, now time.Duration) []byte
	parseState(src []byte, now, age time.Duration) error
}

// taker is a column of states S, to which give hands a state.
type taker[S any] interface {
	take(s *S, from algorithms.Machine[S], now time.Duration, same bool)
}

// adopter is algorithms.Adopter, as a table needs it.
type adopter[S any] interface {
	Adopt(s *S, from algorithms.Machine[S], now time.Duration)
}

// policyRules is what a column needs of its rule.
type policyRules[S any] struct {
	m     algorithms.Machine[S]
	e     algorithms.Expiring[S]
	codec algorithms.StateCodec[S] // nil if m cannot save states
	flat  bool                     // S holds no pointers: a copy of a state shares nothing (copyState)
	buf   []byte                   // copyState's, for a state copied through codec
}

func newPolicyRules[S any](m algorithms.Machine[S], e algorithms.Expiring[S]) policyRules[S] {
	c, _ := m.(algorithms.StateCodec[S])
	return policyRules[S]{m: m, e: e, codec: c, flat: flat(reflect.TypeFor[S]())}
}

// carryState sets fresh to s, a state that from kept, at now: as it is
// if from was made from the same Params (same), and otherwise adopted by
// the rule if it is an Adopter, or, if not, as it is too, read under the
// new Params.
func (r *policyRules[S]) carryState(fresh, s *S, from algorithms.Machine[S], now time.Duration, same bool) {
	*fresh = *s
	if a, ok := r.m.(adopter[S]); ok && !same {
		a.Adopt(fresh, from, now)
	}
}

func (r *policyRules[S]) decideOn(s *S, now time.Duration, n int, d *algorithms.Decision, commit bool) {
	if commit {
		r.m.AllowN(s, now, n, d)
	} else {
		r.m.PeekN(s, now, n, d)
	}
}

// refundOn gives n units back to s at now: at most the rule's capacity,
// which is all a refund can give back (a rule takes no n above it).
func (r *policyRules[S]) refundOn(s *S, now time.Duration, n int) {
	r.m.Refund(s, now, min(n, r.m.Capacity()))
}

func (r *policyRules[S]) appendOf(dst []byte, s *S, now time.Duration) []byte {
	return r.codec.AppendState(dst, s, now)
}

// states is the column of a policy after the first: its states in a slice
// beside the table's slots.
type states[S any] struct {
	policyRules[S]
	states []S
	fresh  S
	zero   S
}

func (c *states[S]) at(i uint32) *S {
	if i == none {
		return &c.fresh
	}
	return &c.states[i]
}

func (c *states[S]) decide(i uint32, now time.Duration, n int, d *algorithms.Decision, commit bool) {
	c.decideOn(c.at(i), now, n, d, commit)
}

func (c *states[S]) refund(i uint32, now time.Duration, n int) { c.refundOn(c.at(i), now, n) }

func (c *states[S]) resetAfter(i uint32, now time.Duration) time.Duration {
	return c.e.ResetAfter(c.at(i), now)
}

func (c *states[S]) push() {
	c.states = append(c.states, c.fresh)
	c.fresh = c.zero
}

func (c *states[S]) move(from, to uint32) { c.states[to] = c.states[from] }

func (c *states[S]) pop() {
	last := len(c.states) - 1
	c.states[last] = c.zero // drop whatever the state held
	c.states = c.states[:last]
}

func (c *states[S]) clearFresh() { c.fresh = c.zero }

func (c *states[S]) give(i uint32, dst column, now time.Duration, same bool) {
	if t, ok := dst.(taker[S]); ok {
		t.take(c.at(i), c.m, now, same)
	}
}

func (c *states[S]) take(s *S, from algorithms.Machine[S], now time.Duration, same bool) {
	c.carryState(&c.fresh, s, from, now, same)
}

func (c *states[S]) canSave() bool { return c.codec != nil }

func (c *states[S]) appendState(dst []byte, i uint32, now time.Duration) []byte {
	return c.appendOf(dst, c.at(i), now)
}

func (c *states[S]) parseState(src []byte, now, age time.Duration) error {
	return c.codec.ParseState(src, &c.fresh, now, age)
}

// head is the column of a table's first policy, whose states live in the
// slots; the table moves them with the slots.
type head[S any] struct{ t *table[S] }

func (h head[S]) at(i uint32) *S {
	if i == none {
		return &h.t.fresh
	}
	return &h.t.slots[i].state
}

func (h head[S]) decide(i uint32, now time.Duration, n int, d *algorithms.Decision, commit bool) {
	h.t.decideOn(h.at(i), now, n, d, commit)
}

func (h head[S]) refund(i uint32, now time.Duration, n int) { h.t.refundOn(h.at(i), now, n) }

func (h head[S]) resetAfter(i uint32, now time.Duration) time.Duration {
	return h.t.e.ResetAfter(h.at(i), now)
}

func (h head[S]) push()                {}
func (h head[S]) move(from, to uint32) {}
func (h head[S]) pop()                 {}
func (h head[S]) clearFresh()          { h.t.fresh = h.t.zero }

func (h head[S]) give(i uint32, dst column, now time.Duration, same bool) {
	if t, ok := dst.(taker[S]); ok {
		t.take(h.at(i), h.t.m, now, same)
	}
}

func (h head[S]) take(s *S, from algorithms.Machine[S], now time.Duration, same bool) {
	h.t.carryState(&h.t.fresh, s, from, now, same)
}

func (h head[S]) canSave() bool { return h.t.codec != nil }

func (h head[S]) appendState(dst []byte, i uint32, now time.Duration) []byte {
	return h.t.appendOf(dst, h.at(i), now)
}

func (h head[S]) parseState(src []byte, now, age time.Duration) error {
	return h.t.codec.ParseState(src, &h.t.fresh, now, age)
}
