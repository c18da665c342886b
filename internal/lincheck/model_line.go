package lincheck

import (
	"slices"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// A key's line of waiters in the model, as a partition serves it: the
// instants a waiter's turn is asked about and granted at, the waiters
// served once due, and what a request that finds a line is told.

// maxAsks bounds the asks of a waiter's turn, as a partition's does.
const maxAsks = 8

// turnAt returns the first instant from from on at which a turn for n on
// ss, on a key held until hold (none if not after from), is granted
// (leaky_bucket: with no Delay), as a line finds it: ask, and ask again
// after the wait told.
func (m *Model) turnAt(ss []saved, from time.Duration, n int, hold time.Duration) (time.Duration, bool) {
	asks, ok := m.asks(ss, from, n, hold)
	if !ok {
		return 0, false
	}
	return asks[len(asks)-1], true
}

// asks returns the instants a line asks about a turn for n on ss, on a
// key held until hold, from from on, the last the one it is granted at. A
// turn asked while the key is held is denied with the wait past the hold
// (pastHold), and asked again then. Asked from an instant before the Hold
// was placed, they are not the partition's asks (those before the Hold
// were its policies' denials, and its first after it leads past the hold
// too, held or not), but the instant the turn is granted at is the same:
// RetryAfter is exact, so the policies' own waits from before the end
// lead to where their wait at the end does.
func (m *Model) asks(ss []saved, from time.Duration, n int, hold time.Duration) ([]time.Duration, bool) {
	at := from
	var asks []time.Duration
	for range maxAsks {
		asks = append(asks, at)
		if at < hold {
			at = m.pastHold(ss, hold, n)
			continue
		}
		d, _ := m.decide(ss, at, n, modeAsk)
		switch {
		case d.Allowed && d.Delay == 0:
			return asks, true
		case d.Allowed:
			at += d.Delay
		default:
			at += max(d.RetryAfter, 1)
		}
	}
	return nil, false
}

// The line of waiters, in memory.

// head returns the index of s's line's head, the oldest wait not
// granted, or -1.
func (s *state) head() int {
	return slices.IndexFunc(s.waits, func(w wait) bool { return !w.granted })
}

// serveDue grants the heads of s's line whose turn has come by s.now, each
// at its instant, and returns s itself if none has.
func (m *Model) serveDue(s *state) (*state, bool) {
	out := s
	for {
		h := out.head()
		if h < 0 {
			return out, true
		}
		w := out.waits[h]
		at, ok := m.turnAt(out.ss, out.from, w.n, out.hold)
		if !ok {
			return nil, false // a rule no line could serve: no step
		}
		if at > out.now {
			return out, true
		}
		if out == s {
			out = s.next()
		}
		var d algorithms.Decision
		d, out.ss = m.decide(out.ss, at, w.n, modeTurn)
		if w.left || d != w.want {
			return nil, false // its Done cannot follow
		}
		out.waits[h].granted, out.waits[h].d = true, d
		out.from = at
	}
}

// lineDenial returns the answer to a request of n units that s's line
// refuses (no barging): denied, with the wait it would have in the line
// (the line granted in turn, then it), the time until the key is
// untouched once those ahead are granted, the Limit and Policy of the
// request alone, and nothing left. On a key held, the line is foreseen
// from the hold's end, and the request alone has no Limit or Policy (a
// hold's denial).
func (m *Model) lineDenial(s *state, n int) (algorithms.Decision, bool) {
	var alone algorithms.Decision
	ss := s.ss
	at := s.now
	if end, held := s.heldAt(at); held {
		at = end // granted nothing before
	} else {
		alone, _ = m.decide(s.ss, s.now, n, modePeek)
	}
	free := at + m.enforcedResetAfter(ss, at)
	var ns []int
	for _, w := range s.waits {
		if !w.granted {
			ns = append(ns, w.n)
		}
	}
	ns = append(ns, n)
	for k, wn := range ns {
		var ok bool
		if at, ok = m.turnAt(ss, at, wn, s.hold); !ok {
			return algorithms.Decision{}, false
		}
		var d algorithms.Decision
		d, ss = m.decide(ss, at, wn, modeLine)
		if k < len(ns)-1 {
			free = at + d.ResetAfter
		}
	}
	return algorithms.Decision{
		Limit:      alone.Limit,
		RetryAfter: max(at-s.now, 1),
		ResetAfter: max(free-s.now, 0),
		Policy:     alone.Policy,
	}, true
}
