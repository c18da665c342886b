package redislimit

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// redisModel is a store's round trips to a Redis: each takes a fixed
// part (the network) and Redis's work on the calls out, which it serves
// one after another: perCall a call and perOp a request; with noise of
// up to jitter times it either way. A caller answered sends its next
// request think later, at random up to it (its own work, and its
// partition's), so answers of one trip come back one by one.
type redisModel struct {
	network, perCall, perOp time.Duration
	jitter                  float64
	think                   time.Duration
}

// event is a caller's request sent (ops 0), or a trip back.
type event struct {
	at       time.Duration
	ops      int // the trip's requests
	rtt      time.Duration
	outAfter int // trips out while it was
}

type events []event

func (e events) Len() int           { return len(e) }
func (e events) Less(i, j int) bool { return e[i].at < e[j].at }
func (e events) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)        { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// run simulates callers that each send a request as soon as its last is
// answered, after its think time, through g's limit: a request that finds
// a round trip free goes at once, with any that wait; one that finds all
// out waits for the next to come back, and goes with every request
// waiting then. It returns the limit after each trip back, for trips
// trips.
func (g *gauge) run(m redisModel, callers, trips int) []int {
	rng := rand.New(rand.NewPCG(1, 2))
	var q events
	for range callers {
		heap.Push(&q, event{at: time.Duration(rng.Int64N(int64(m.think) + 1))})
	}
	out, opsOut, waiting := 0, 0, 0
	send := func(now time.Duration) {
		for out < g.limit && waiting > 0 {
			ops := waiting
			work := time.Duration(out+1)*m.perCall + time.Duration(opsOut+ops)*m.perOp
			rtt := time.Duration(float64(m.network+work) * (1 + m.jitter*(2*rng.Float64()-1)))
			out++
			opsOut += ops
			waiting = 0
			heap.Push(&q, event{at: now + rtt, ops: ops, rtt: rtt, outAfter: out})
		}
	}
	limits := make([]int, 0, trips)
	for len(limits) < trips {
		e := heap.Pop(&q).(event)
		if e.ops == 0 { // a request sent
			waiting++
			send(e.at)
			continue
		}
		g.sample(e.rtt, out, e.ops)
		out--
		opsOut -= e.ops
		limits = append(limits, g.limit)
		for range e.ops {
			heap.Push(&q, event{at: e.at + time.Duration(rng.Int64N(int64(m.think)+1))})
		}
		send(e.at)
	}
	return limits
}

// within returns the share of the last half of limits that are from lo
// to hi: where the limit settled, tries included.
func within(limits []int, lo, hi int) float64 {
	last := limits[len(limits)/2:]
	in := 0
	for _, l := range last {
		if lo <= l && l <= hi {
			in++
		}
	}
	return float64(in) / float64(len(last))
}

// TestGaugeFindsWhatBoundsRedis: the limit on round trips out grows where
// their time does not grow with them (a distant Redis), to about what
// the callers use; and keeps to a few where their time grows with them
// and fewer decide more (a Redis whose CPU is the bound); with noise or
// without, from a limit low or high.
func TestGaugeFindsWhatBoundsRedis(t *testing.T) {
	distant := redisModel{network: 2 * time.Millisecond, perCall: 10 * time.Microsecond, perOp: time.Microsecond, think: 50 * time.Microsecond}
	cpuBound := redisModel{network: 40 * time.Microsecond, perCall: 40 * time.Microsecond, perOp: 5 * time.Microsecond, think: 20 * time.Microsecond}
	noisy := func(m redisModel) redisModel { m.jitter = 0.5; return m }
	for _, c := range []struct {
		name    string
		m       redisModel
		callers int
		lo, hi  int // where the limit is, four round trips in five, once settled
	}{
		{"distant, 8 callers", distant, 8, 7, 10}, // 7: now and then a try of fewer; 10: of more
		{"distant and noisy, 8 callers", noisy(distant), 8, 6, 10},
		// 64 callers of the distant Redis decide the most a second with 16
		// to 20 round trips out, and within 3% of it with 10 to 32 (each
		// more costs Redis a call): the gauge is to be on that plateau.
		{"distant, 64 callers", distant, 64, 10, MaxRoundTrips},
		{"distant and noisy, 64 callers", noisy(distant), 64, 10, MaxRoundTrips},
		{"CPU-bound, 64 callers", cpuBound, 64, 1, 2},
		{"CPU-bound and noisy, 64 callers", noisy(cpuBound), 64, 1, 3},
		{"CPU-bound, 8 callers", cpuBound, 8, 1, 2},
		{"CPU-bound and noisy, 500 callers", noisy(cpuBound), 500, 1, 3},
		{"one caller", distant, 1, 1, 2},
	} {
		for _, start := range []int{DefaultRoundTrips, MaxRoundTrips} {
			t.Run(fmt.Sprintf("%s, from %d", c.name, start), func(t *testing.T) {
				t.Parallel()
				g := gauge{limit: start, ceiling: MaxRoundTrips}
				limits := g.run(c.m, c.callers, 40_000)
				assert.GreaterOrEqual(t, within(limits, c.lo, c.hi), 0.8, "the limit from %d to %d", c.lo, c.hi)
			})
		}
	}
}

// TestGaugeFollowsTheLoad: a limit grown for 64 callers of a distant
// Redis comes down to what 8 use, and to a few once Redis's CPU is the
// bound.
func TestGaugeFollowsTheLoad(t *testing.T) {
	distant := redisModel{network: 2 * time.Millisecond, perCall: 10 * time.Microsecond, perOp: time.Microsecond, think: 50 * time.Microsecond}
	cpuBound := redisModel{network: 40 * time.Microsecond, perCall: 40 * time.Microsecond, perOp: 5 * time.Microsecond, think: 20 * time.Microsecond}
	g := gauge{limit: DefaultRoundTrips, ceiling: MaxRoundTrips}
	require.GreaterOrEqual(t, within(g.run(distant, 64, 60_000), 10, MaxRoundTrips), 0.8)
	assert.GreaterOrEqual(t, within(g.run(distant, 8, 60_000), 7, 10), 0.8, "fewer callers")
	assert.GreaterOrEqual(t, within(g.run(cpuBound, 64, 60_000), 1, 2), 0.8, "Redis's CPU the bound")
}

// TestGaugeFixed: with RoundTrips set, the limit stays, whatever the
// round trips' time.
func TestGaugeFixed(t *testing.T) {
	g := gauge{limit: 3, ceiling: 3, fixed: true}
	limits := g.run(redisModel{network: 2 * time.Millisecond, think: 50 * time.Microsecond}, 64, 10_000)
	assert.Equal(t, 1.0, within(limits, 3, 3))
}

// TestLanesTokens: the tokens given are the limit's: when it rises, a
// trip coming back gives back its token and as many more; when it falls,
// trips coming back keep theirs until the tokens given are within it.
func TestLanesTokens(t *testing.T) {
	l := newLanes(0)
	require.Len(t, l.free, DefaultRoundTrips)
	take := func(n int) {
		for range n {
			<-l.free
			l.took()
		}
	}
	take(4)
	l.mu.Lock()
	l.gauge.limit = 2 // as a try of fewer would
	l.mu.Unlock()
	l.back(-1, 0)
	l.back(-1, 0)
	assert.Empty(t, l.free, "two trips out, two tokens given: the limit's")
	l.back(-1, 0)
	assert.Len(t, l.free, 1)

	l.mu.Lock()
	l.gauge.limit = 6 // as a try of more would
	l.mu.Unlock()
	l.back(-1, 0)
	assert.Len(t, l.free, 6, "no trip out: every token of the limit free")
	take(6)
	l.mu.Lock()
	l.gauge.limit = MaxRoundTrips
	l.mu.Unlock()
	l.back(-1, 0)
	assert.Len(t, l.free, MaxRoundTrips-5, "never more than the ceiling given")
}
