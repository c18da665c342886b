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
		// Not stated through a Store yet (StoreHold): no step, and a
		// Workload with a Store makes no Hold.
	}
	return next
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
