package lincheck

import (
	"slices"
	"strconv"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// The sequential specification: one key of a router, as a router that
// serves one call at a time answers it (DESIGN.md, "Semantics"). Its
// state is the key's policies' states, the fake clock's reading, the
// key's line of waiters, and, through a Store, what the store keeps of
// time and of the grants of callers who left.
//
// In memory, every call is decided at the clock's reading where it is
// linearized, but a waiter, which is granted at the instant its turn
// comes (its line's own schedule, the first instant its request is
// allowed with no Delay); a line that is due is served before anything
// after it, but a waiter's leaving, which is let go first. A call whose
// caller left took nothing: it was never decided, or decided and given
// back at once (its dry-run policies keep what they took).
//
// Through a Store, each request carries its own time: the router's
// reading of the clock when it sent it, or for a waiter's turn the
// instant its line was due (Input.Times holds the candidates); the
// clock's moves are no operations of the store's, and the checker leaves
// them out. The store decides a request at the later of its own time and
// the latest time a write decided the key at (a grant, a refund, a
// dry-run policy's take; a Peek or a denial writes nothing, so a request
// sent earlier may be decided after it, at its own time), and tells each
// wait from the request's own time, rounded up to the microsecond. A
// waiter's turn takes only if it is granted. A caller who left before its
// answer counts as decided or not; if granted, its units are held until
// its give-back (an operation of its own, GiveBack) lands, which gives
// them back only to the state the grant was taken from, never across a
// Reset; under faults (Options.Lossy) it may never land. A call that
// failed counts as decided or not. Lines are their router's own: a
// Workload has a router whose callers wait asked nothing its line would
// refuse, and the model does not state them.

// Kind is what an operation is.
type Kind uint8

const (
	Advance  Kind = iota + 1 // the fake clock moved to At
	Allow                    // AllowN(Key, N)
	Peek                     // Peek(Key, N)
	Refund                   // Refund(Key, N)
	Reset                    // Reset(Key)
	Batch                    // AllowBatch's items on Key, N units each of Ns
	Join                     // WaitN call ID joins Key's line (in memory)
	Done                     // WaitN call ID's outcome (in memory)
	Wait                     // WaitN(Key, N), call ID, through a Store: granted at its turn
	GiveBack                 // the give-back of caller ID's grant, who left (through a Store)
	Hold                     // Hold(Key, For) (in memory)
)

var kindNames = [...]string{"?", "Advance", "AllowN", "Peek", "Refund", "Reset", "Batch", "Join", "Done", "WaitN", "GiveBack", "Hold"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Input is an operation's call.
type Input struct {
	Kind   Kind
	Key    string
	N      int
	Ns     []int // Batch
	ID     int   // the call's number: a WaitN's (Join, Done, Wait), or a leaver's (Allow, GiveBack)
	Router int   // the router it went to
	At     time.Duration
	For    time.Duration // how long a Hold holds Key

	// Times are, through a Store, the own times the call may have been
	// sent with (see History.Operations).
	Times []time.Duration
}

// Outcome is how a call ended.
type Outcome uint8

const (
	Answered Outcome = iota // it returned its answer
	Left                    // its ctx ended before the answer came
	Unknown                 // it failed with an error whose effect is unknown (ErrStoreUnavailable)
)

func (o Outcome) String() string {
	switch o {
	case Answered:
		return "answered"
	case Left:
		return "left"
	}
	return "unknown"
}

// Output is an operation's return.
type Output struct {
	Outcome Outcome
	D       chanlimit.Decision   // Allow, Peek, Done, Wait
	Ds      []chanlimit.Decision // Batch
	Err     error                // the call's error, for the story
}

// Model is the specification of one key under policies.
type Model struct {
	policies []chanlimit.Policy
	rules    []rule
	enforced []int // the policies that are not dry-run, in order
	dry      []int // the dry-run ones
	store    bool
	lossy    bool
}

// Options say which specification a Model is.
type Options struct {
	// Store: a router with a Store (FailClosed): its requests' own
	// times, whole microseconds, leavers held until their give-back.
	Store bool

	// Lossy: a give-back may never land (the store did not answer it).
	Lossy bool
}

// NewModel returns the specification of a key under policies, valid and of
// the built-in algorithms.
func NewModel(policies []chanlimit.Policy, opts Options) (*Model, error) {
	m := &Model{policies: slices.Clone(policies), store: opts.Store, lossy: opts.Lossy}
	for j, p := range policies {
		r, err := ruleOf(p)
		if err != nil {
			return nil, err
		}
		m.rules = append(m.rules, r)
		if p.DryRun {
			m.dry = append(m.dry, j)
		} else {
			m.enforced = append(m.enforced, j)
		}
	}
	return m, nil
}

// Deciding a request on a key, at an instant: its enforced policies
// together, its dry-run ones each alone.

type mode uint8

const (
	modeAllow   mode = iota // AllowN: the enforced take if all allow; each dry-run one takes if it allows
	modePeek                // Peek: nothing taken
	modeTurn                // a waiter's turn: granted only with no Delay, and then the dry-run ones decide and take
	modeLine                // the line foreseen: the enforced alone, taking
	modeAsk                 // a line's head asked: the enforced alone, taking nothing
	modeDry                 // a request a line refused: the dry-run ones alone, taking
	modeDryPeek             // a Peek a line refused: the dry-run ones alone
)

// decide decides n units on ss at now as mode says, and returns the
// decision and the states after (ss itself if nothing changed).
func (m *Model) decide(ss []saved, now time.Duration, n int, md mode) (algorithms.Decision, []saved) {
	var d algorithms.Decision
	out := ss
	changed := func() {
		if &out[0] == &ss[0] {
			out = slices.Clone(ss)
		}
	}
	if md != modeDry && md != modeDryPeek {
		var buf [4]algorithms.Decision
		ds := buf[:0]
		if len(m.enforced) > len(buf) {
			ds = make([]algorithms.Decision, 0, len(m.enforced))
		}
		ds = ds[:len(m.enforced)]
		allowed := true
		for k, j := range m.enforced {
			ds[k], _ = m.rules[j].decide(ss[j], now, n, false)
			ds[k].Policy = m.policies[j].Name
			allowed = allowed && ds[k].Allowed
		}
		if !allowed {
			// A policy that would have allowed reports its state as it is.
			for k, j := range m.enforced {
				if ds[k].Allowed && len(ds) > 1 {
					ds[k].Remaining += n
					ds[k].ResetAfter = m.rules[j].resetAfter(ss[j], now)
				}
			}
		}
		d = combine(ds)
		take := allowed && (md == modeAllow || md == modeLine || (md == modeTurn && d.Delay == 0))
		if md == modeAsk {
			return d, out
		}
		if take {
			changed()
			for _, j := range m.enforced {
				var e algorithms.Decision
				e, out[j] = m.rules[j].decide(out[j], now, n, true)
				if !e.Allowed {
					panic("lincheck: a rule denied what its peek allowed")
				}
			}
		}
		if md == modeLine || md == modeTurn && !(allowed && d.Delay == 0) {
			return d, out
		}
	}
	take := md == modeAllow || md == modeTurn || md == modeDry
	for _, j := range m.dry {
		if n > m.rules[j].capacity() {
			d.WouldDeny = true
			continue
		}
		e, st := m.rules[j].decide(out[j], now, n, take)
		if !e.Allowed {
			d.WouldDeny = true
		} else if take {
			changed()
			out[j] = st
		}
	}
	return d, out
}

// combine is the decision of the enforced policies, each of whose
// decisions is in ds, named: allowed if all allow; Remaining the least,
// ResetAfter the most, Delay the most if allowed; RetryAfter the longest
// wait of those that deny; the deciding policy the denying one with the
// longest wait, or the one with the fewest Remaining, the first on a tie.
func combine(ds []algorithms.Decision) algorithms.Decision {
	if len(ds) == 0 {
		return algorithms.Decision{Allowed: true}
	}
	allowed := true
	for _, e := range ds {
		allowed = allowed && e.Allowed
	}
	d := algorithms.Decision{Allowed: allowed, Remaining: ds[0].Remaining}
	by := -1
	for i, e := range ds {
		d.Remaining = min(d.Remaining, e.Remaining)
		d.ResetAfter = max(d.ResetAfter, e.ResetAfter)
		if allowed {
			d.Delay = max(d.Delay, e.Delay)
			if by < 0 || e.Remaining < ds[by].Remaining {
				by = i
			}
		} else if !e.Allowed && (by < 0 || e.RetryAfter > ds[by].RetryAfter) {
			by = i
		}
	}
	if !allowed {
		d.RetryAfter = ds[by].RetryAfter
	}
	d.Limit, d.Policy = ds[by].Limit, ds[by].Policy
	return d
}

// enforcedResetAfter is the time from now until the enforced policies'
// states are untouched.
func (m *Model) enforcedResetAfter(ss []saved, now time.Duration) time.Duration {
	var wait time.Duration
	for _, j := range m.enforced {
		wait = max(wait, m.rules[j].resetAfter(ss[j], now))
	}
	return wait
}

// Step returns the states s may be in after the operation in/out, none if
// it cannot be linearized at s.
func (m *Model) Step(s *state, in Input, out Output) []*state {
	if in.Kind == Advance {
		if in.At < s.now {
			return nil
		}
		c := s.next()
		c.now = in.At
		c.dropEndedHold()
		return []*state{c.seal()}
	}
	if !m.store {
		if in.Kind == Done && out.Outcome == Left {
			// A caller who leaves is let go before the line is served,
			// even if its own turn is due.
			return m.stepMemory(s, in, out)
		}
		s, ok := m.serveDue(s)
		if !ok {
			return nil
		}
		return m.stepMemory(s, in, out)
	}
	return m.stepStore(s, in, out)
}

// stepMemory is Step in memory, once the line due is served.
func (m *Model) stepMemory(s *state, in Input, out Output) []*state {
	lined := s.head() >= 0
	switch in.Kind {
	case Allow, Peek:
		d, ss, ok := m.request(s, s.ss, in.N, in.Kind == Peek)
		if !ok {
			return nil
		}
		switch out.Outcome {
		case Answered:
			if d != out.D {
				return nil
			}
			return m.with(s, ss)
		case Left: // decided and given back (the dry-run policies keep theirs), or never decided
			if in.Kind == Allow && d.Allowed {
				ss = m.dryOnly(s.ss, ss)
			}
			return append(m.with(s, ss), s)
		}
		return nil
	case Refund, Reset:
		c := s.next()
		if in.Kind == Reset {
			clear(c.ss)
			c.gen++
			c.hold = 0 // Reset ends a hold
		} else {
			for j, r := range m.rules {
				c.ss[j] = r.refund(c.ss[j], c.now, in.N)
			}
		}
		if lined {
			c.from = c.now // its head may be granted now
		}
		c.seal()
		if out.Outcome == Answered {
			return []*state{c}
		}
		return []*state{c, s}
	case Batch:
		ss := s.ss
		ds := make([]algorithms.Decision, len(in.Ns))
		for i, n := range in.Ns {
			var ok bool
			if ds[i], ss, ok = m.request(s, ss, n, false); !ok {
				return nil
			}
		}
		if out.Outcome == Answered {
			if !slices.Equal(ds, out.Ds) {
				return nil
			}
			return m.with(s, ss)
		}
		return append(m.with(s, m.dryOnly(s.ss, ss)), s) // given back, latest first: the dry-run policies keep theirs
	case Join:
		var next []*state
		if out.Outcome != Answered { // a cancelled call may never have reached the line
			c := s.next()
			c.never = append(c.never, in.ID)
			slices.Sort(c.never)
			next = append(next, c.seal())
		}
		c := s.next()
		w := wait{id: in.ID, n: in.N, want: out.D, left: out.Outcome != Answered}
		if !lined {
			// Its turn is asked at once: granted, or it opens the line
			// (denied by a hold, if the key is held).
			_, held := s.heldAt(s.now)
			if d, ss := m.decide(s.ss, s.now, in.N, modeTurn); !held && d.Allowed && d.Delay == 0 {
				if w.left || d != w.want {
					return next // granted at once: not what its call returned
				}
				c.ss, w.granted, w.d = ss, true, d
			} else {
				c.from = s.now
			}
		}
		c.waits = append(c.waits, w)
		return append(next, c.seal())
	case Done:
		if out.Outcome == Answered {
			k := slices.IndexFunc(s.waits, func(w wait) bool { return w.id == in.ID && w.granted })
			if k < 0 || s.waits[k].d != out.D {
				return nil
			}
			c := s.next()
			c.waits = slices.Delete(c.waits, k, k+1)
			return []*state{c.seal()}
		}
		if k := slices.Index(s.never, in.ID); k >= 0 {
			c := s.next()
			c.never = slices.Delete(c.never, k, k+1)
			return []*state{c.seal()}
		}
		k := slices.IndexFunc(s.waits, func(w wait) bool { return w.id == in.ID })
		if k < 0 || s.waits[k].granted {
			return nil // a waiter granted returns its grant
		}
		if k != s.head() {
			c := s.next()
			c.waits = slices.Delete(c.waits, k, k+1)
			return []*state{c.seal()}
		}
		// The head left: the next is asked at once, or at the instant
		// the head was to be asked next, if that has passed: one of the
		// instants its line asks at (the first after the line was last
		// served, or the one it was set due at since, unserved yet).
		asks, ok := m.asks(s.ss, s.from, s.waits[k].n, s.hold)
		if !ok {
			return nil
		}
		var next []*state
		for _, at := range asks {
			c := s.next()
			c.waits = slices.Delete(c.waits, k, k+1)
			c.from = min(at, c.now)
			next = append(next, c.seal())
		}
		return next
	case Hold:
		if in.For <= 0 {
			return []*state{s} // changes nothing
		}
		c := s.next()
		c.hold = max(c.hold, c.now+in.For) // only ever later
		c.seal()
		if out.Outcome == Answered {
			return []*state{c}
		}
		return []*state{c, s}
	}
	return nil
}

// request decides a request of n units that does not wait (AllowN, a
// batch's item; a Peek if peek) on ss at s.now, as s's line and hold
// have it, and returns the decision and the states after (ss itself if
// nothing changed); false if it cannot tell.
func (m *Model) request(s *state, ss []saved, n int, peek bool) (algorithms.Decision, []saved, bool) {
	end, held := s.heldAt(s.now)
	switch {
	case s.head() >= 0:
		d, ok := m.lineDenial(s, n)
		if !ok || held {
			return d, ss, ok // a hold's denial takes nothing from the dry-run policies either
		}
		md := modeDry
		if peek {
			md = modeDryPeek
		}
		e, after := m.decide(ss, s.now, n, md)
		d.WouldDeny = e.WouldDeny
		return d, after, true
	case held:
		return m.holdDenial(ss, s.now, end, n), ss, true
	}
	md := modeAllow
	if peek {
		md = modePeek
	}
	d, after := m.decide(ss, s.now, n, md)
	return d, after, true
}

// dryOnly returns before with the dry-run policies' states of after.
func (m *Model) dryOnly(before, after []saved) []saved {
	if len(m.dry) == 0 {
		return before
	}
	out := slices.Clone(before)
	for _, j := range m.dry {
		out[j] = after[j]
	}
	return out
}

// with returns s with the policies' states ss.
func (m *Model) with(s *state, ss []saved) []*state {
	if slices.Equal(ss, s.ss) {
		return []*state{s}
	}
	c := s.next()
	c.ss = ss
	return []*state{c.seal()}
}
