package redislimit

import (
	"sync"
	"time"
)

// How many round trips a store has out at once. A Redis whose CPU is the
// bound decides a call of many requests for much less than as many
// calls, so there it pays to have few round trips out, each carrying
// what came meanwhile (combine.go): more would only queue at Redis, each
// taking longer. A Redis across a network is bound by the time a round
// trip takes, which more of them out do not lengthen, so there it pays
// to have as many out as there are requests to send: a request that
// finds every round trip out waits for one to come back.
//
// The store tells one from the other by what a round trip more or fewer
// does to their time and to the requests decided a second: with L round
// trips out, each carrying r requests and taking t on average, Redis
// decides L*r/t a second (the room). It learns in epochs (enough round
// trips that noise averages out), and only from those in which every
// one of the limit was out; the first epoch after a change settles, and
// is not weighed. Every fourth epoch at a steady limit, it tries a
// quarter more or a fifth fewer, in turn, weighed against those four.
// More are kept, and more tried again, if their time grew by 2% at most
// or the room by 2% at least; fewer, and fewer tried again, while the
// room keeps 98% of the best of the tries so far: as much with fewer
// round trips out is more requests in each, less of Redis's CPU. A try
// that fails goes back. While fewer than the limit are out, the limit
// comes a fifth nearer the most that were. So a distant Redis, whose
// round trips take about as long however many are out, gets as many as
// still shorten the wait for one, up to MaxRoundTrips (in the tests'
// model, 8 for 8 callers, 10 to 20 for 64); a Redis whose CPU is the
// bound, whose round trips take longer with each more, and where fewer
// decide as much, a few.

// MaxRoundTrips is the most round trips a store has out at once when
// Options.RoundTrips is 0 and the limit adapts.
const MaxRoundTrips = 64

// MaxFixedRoundTrips is the most Options.RoundTrips may be: far more
// round trips out than any client has connections (go-redis has ten a
// CPU by default), where each is a token the store holds.
const MaxFixedRoundTrips = 1 << 16

const (
	epochTrips    = 64   // the least round trips of an epoch
	epochPerLimit = 8    // and its least for each round trip of the limit
	gainGrow      = 1.02 // room a quarter more round trips must add, at least, to be kept, unless
	timeFlat      = 1.02 // their time grew by this much at most
	lossShrink    = 0.98 // room a fifth fewer must keep, at least, to be kept
	tryEvery      = 4    // epochs at a steady limit before a try, of more and of fewer in turn
)

// lanes are a store's round trips out: a token in free for each more
// that may go. Its mutex guards the bookkeeping of the limit (never a
// key's state, which is Redis's).
type lanes struct {
	free chan struct{} // as many tokens as the limit, less the trips out

	mu    sync.Mutex
	out   int   // trips out
	given int   // tokens in free or held by trips out
	gauge gauge // the limit; fixed if RoundTrips was set
}

// newLanes returns the lanes of a store whose Options.RoundTrips is
// roundTrips: a fixed limit, or if 0 one that adapts, from
// DefaultRoundTrips.
func newLanes(roundTrips int) *lanes {
	g := gauge{limit: roundTrips, ceiling: roundTrips, fixed: true}
	if roundTrips == 0 {
		g = gauge{limit: DefaultRoundTrips, ceiling: MaxRoundTrips}
	}
	l := &lanes{free: make(chan struct{}, g.ceiling), given: g.limit, gauge: g}
	for range g.limit {
		l.free <- struct{}{}
	}
	return l
}

// took notes that a trip holding a token from free goes out.
func (l *lanes) took() {
	l.mu.Lock()
	l.out++
	l.mu.Unlock()
}

// back notes that a trip that carried ops requests and took rtt is back
// (rtt below 0: that it did not go), and gives back its token, with as
// many more as the limit rose; or keeps it, while more tokens are given
// than the limit has, since it fell.
func (l *lanes) back(rtt time.Duration, ops int) {
	l.mu.Lock()
	if rtt >= 0 {
		l.gauge.sample(rtt, l.out, ops)
	}
	l.out--
	tokens := 1
	switch {
	case l.given > l.gauge.limit:
		tokens, l.given = 0, l.given-1
	case l.given < l.gauge.limit:
		tokens, l.given = 1+l.gauge.limit-l.given, l.gauge.limit
	}
	l.mu.Unlock()
	for range tokens {
		l.free <- struct{}{} // room: never more tokens are given than the ceiling
	}
}

// gauge is the limit on round trips out, and what it learns from their
// times.
type gauge struct {
	limit   int // 1 to ceiling
	ceiling int
	fixed   bool // RoundTrips was set: the limit stays

	// The epoch under way: its round trips, the most out at once, how
	// many came back while every one of the limit was out, and their
	// requests and time.
	trips, most, busy, ops int
	sum                    time.Duration
	settling               bool // the limit has just changed: this epoch is not measured

	// The epochs measured at the limit since it last changed, and their
	// room and time summed: what a try from it is weighed against.
	held               int
	heldRoom, heldTime float64

	// A try under way: the limit it is from, and that limit's room and
	// time a round trip took (on average); from 0: none.
	from               int
	fromRoom, fromTime float64
	fewer              bool // the last try from a steady limit was of fewer: the next is of more
}

// sample takes the time of a trip, rtt, which carried ops requests and
// came back while out trips were out, itself included.
func (g *gauge) sample(rtt time.Duration, out, ops int) {
	if g.fixed {
		return
	}
	g.trips++
	g.most = max(g.most, out)
	if out >= g.limit {
		g.busy++
		g.ops += ops
		g.sum += max(rtt, 1)
	}
	if g.trips < max(epochTrips, epochPerLimit*g.limit) {
		return
	}
	most, busy, ops, sum := g.most, g.busy, g.ops, g.sum
	g.trips, g.most, g.busy, g.ops, g.sum = 0, 0, 0, 0, 0
	switch {
	case g.settling: // round trips of the limit before, and the change's own
		g.settling = false
		return
	case busy < g.limit: // the limit was not in use: a try ends as it began, and a steady limit comes a fifth nearer what was
		if g.from != 0 {
			g.set(g.from)
		} else if most < g.limit {
			g.set(max(most, g.limit-max(1, g.limit/5)))
		}
		return
	}
	t := float64(sum) / float64(busy)
	room := float64(g.limit) * float64(ops) / float64(sum) // L*r/t, r = ops/busy
	switch {
	// A try of fewer kept is followed by another, weighed against the best
	// room so far, so that steps each within the margin add up to no more
	// than one; a try of more kept, by another weighed against it.
	case g.from > g.limit: // fewer, tried: kept, and fewer tried again, if the room stayed
		if room < g.fromRoom*lossShrink {
			g.set(g.from)
			return
		}
		g.shrink(max(room, g.fromRoom), t)
	case g.from != 0: // more, tried: kept, and more tried again, if the room grew or the time did not
		if room < g.fromRoom*gainGrow && t > g.fromTime*timeFlat {
			g.set(g.from)
			return
		}
		g.grow(room, t)
	default: // steady: after tryEvery epochs, a try from their average
		g.held++
		g.heldRoom += room
		g.heldTime += t
		if g.held < tryEvery {
			return
		}
		room, t = g.heldRoom/float64(g.held), g.heldTime/float64(g.held)
		if g.fewer = !g.fewer; g.fewer {
			g.shrink(room, t)
		} else {
			g.grow(room, t)
		}
	}
}

// set makes limit the limit, steady (no try under way) and settling.
func (g *gauge) set(limit int) {
	g.limit, g.from, g.settling = limit, 0, true
	g.held, g.heldRoom, g.heldTime = 0, 0, 0
}

// grow tries a quarter more round trips than the limit, whose room and
// time are room and t, if the ceiling lets it.
func (g *gauge) grow(room, t float64) {
	if g.limit == g.ceiling {
		g.set(g.limit)
		return
	}
	from := g.limit
	g.set(min(g.ceiling, g.limit+max(1, g.limit/4)))
	g.from, g.fromRoom, g.fromTime = from, room, t
}

// shrink tries a fifth fewer round trips than the limit, whose room and
// time are room and t, if there are more than one.
func (g *gauge) shrink(room, t float64) {
	if g.limit == 1 {
		g.set(1)
		return
	}
	from := g.limit
	g.set(g.limit - max(1, g.limit/5))
	g.from, g.fromRoom, g.fromTime = from, room, t
}
