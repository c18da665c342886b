package lincheck

import (
	"slices"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// The specification through a Store (see model.go).

// at returns the instant a request of own time own is decided at, at s.
func (s *state) at(own time.Duration) time.Duration { return max(own, s.ts) }

// report returns d, decided at at for a request of own time own, as the
// store answers it: each wait told from own, rounded up to the next
// microsecond.
func report(d algorithms.Decision, own, at time.Duration) algorithms.Decision {
	ahead := at - own
	for _, w := range []*time.Duration{&d.RetryAfter, &d.ResetAfter, &d.Delay} {
		if *w > 0 {
			*w = ceilMicro(*w + ahead)
		}
	}
	return d
}

func ceilMicro(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

// written returns s with the policies' states ss, written at at.
func (m *Model) written(s *state, ss []saved, at time.Duration) *state {
	if slices.Equal(ss, s.ss) {
		return s
	}
	c := s.next()
	c.ss, c.ts = ss, at
	return c.seal()
}

// stepStore is Step through a Store.
func (m *Model) stepStore(s *state, in Input, out Output) []*state {
	var next []*state
	switch in.Kind {
	case Allow, Peek, Wait:
		md := modeAllow
		switch in.Kind {
		case Peek:
			md = modePeek
		case Wait:
			md = modeTurn
		}
		if out.Outcome != Answered && in.Kind != Peek {
			if out.Outcome == Unknown {
				next = append(next, s)
			} else {
				c := s.next()
				c.left = append(c.left, in.ID)
				next = append(next, c.seal())
			}
		}
		for _, own := range in.Times {
			at := s.at(own)
			if s.hold > at { // held: decided as a peek at its end, taking nothing
				if out.Outcome == Answered && in.Kind != Wait && m.storeHoldDenial(s, own, in.N) == out.D {
					next = append(next, s) // (one that was not answered is stated above)
				}
				continue
			}
			d, ss := m.decide(s.ss, at, in.N, md)
			granted := d.Allowed && (in.Kind != Wait || d.Delay == 0)
			switch {
			case out.Outcome == Answered:
				if report(d, own, at) != out.D || (in.Kind == Wait && !granted) {
					continue
				}
				next = append(next, m.written(s, ss, at))
			case in.Kind == Peek:
				next = append(next, s)
			case out.Outcome == Unknown:
				next = append(next, m.written(s, ss, at))
			default: // Left: decided, and if granted held until its give-back lands
				c := m.written(s, ss, at).next()
				c.left = append(c.left, in.ID)
				if granted {
					c.held = append(c.held, held{id: in.ID, n: in.N, gen: s.gen, own: own})
				}
				next = append(next, c.seal())
			}
		}
		if in.Kind == Peek && out.Outcome != Answered {
			next = append(next, s)
		}
	case Refund:
		if out.Outcome != Answered {
			next = append(next, s)
		}
		for _, own := range in.Times {
			next = append(next, m.refundAt(s, s.at(own), in.N, m.rules))
		}
	case Reset:
		c := s.next()
		clear(c.ss)
		c.ts = -1
		c.gen++
		c.hold = 0
		next = append(next, c.seal())
		if out.Outcome != Answered {
			next = append(next, s)
		}
	case GiveBack:
		k := slices.Index(s.left, in.ID)
		if k < 0 {
			return nil // its request is not linearized yet
		}
		c := s.next()
		c.left = slices.Delete(c.left, k, k+1)
		h := slices.IndexFunc(c.held, func(h held) bool { return h.id == in.ID })
		if h < 0 {
			return []*state{c.seal()} // not granted: nothing to give back
		}
		g := c.held[h]
		c.held = slices.Delete(c.held, h, h+1)
		c.seal()
		if g.gen != c.gen {
			return []*state{c} // the key was Reset since: never given back to another state
		}
		next = append(next, m.refundAt(c, c.at(g.own), g.n, m.enforcedRules()))
		if m.lossy {
			next = append(next, c) // the store never took it
		}
	case Hold:
		if in.For <= 0 || out.Outcome != Answered { // a hold of nothing is sent nowhere
			next = append(next, s)
		}
		for _, own := range in.Times { // the end, in whole microseconds from its own time
			if end := own + ceilMicro(in.For); in.For > 0 && end > s.hold {
				c := s.next()
				c.hold, c.ts = end, s.at(own) // written: the key's own entry, as of the later of the two
				next = append(next, c.seal())
			} else if in.For > 0 {
				next = append(next, s)
			}
		}
	}
	return next
}

// storeHoldDenial is a store's answer to a request of n units of own time
// own on s, a key held past it: a peek at the hold's end, taking nothing,
// told from own, the policies' waits from the end rounded up to the
// microsecond as the store rounds them.
func (m *Model) storeHoldDenial(s *state, own time.Duration, n int) algorithms.Decision {
	wait := s.hold - own
	retry := wait
	if d, _ := m.decide(s.ss, s.hold, n, modeAsk); !d.Allowed {
		retry += ceilMicro(d.RetryAfter)
	}
	return algorithms.Decision{RetryAfter: retry, ResetAfter: wait + ceilMicro(m.enforcedResetAfter(s.ss, s.hold))}
}

// enforcedRules returns the rules with the dry-run ones as nil: a grant
// given back is given back to the enforced policies alone.
func (m *Model) enforcedRules() []rule {
	rs := slices.Clone(m.rules)
	for _, j := range m.dry {
		rs[j] = nil
	}
	return rs
}

// refundAt returns s with n units given back at at to the policies of rs
// (nil: not to that one) that have a state, written if any has.
func (m *Model) refundAt(s *state, at time.Duration, n int, rs []rule) *state {
	ss := slices.Clone(s.ss)
	gave := false
	for j, r := range rs {
		if r != nil && ss[j].bytes != "" {
			ss[j] = r.refund(ss[j], at, n)
			gave = true
		}
	}
	if !gave {
		return s
	}
	c := s.next()
	c.ss, c.ts = ss, at
	return c.seal()
}
