package redislimit

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chanlimit/chanlimit"
)

// What a pipeline of the script's calls carries: a burst's ops grouped
// into calls (calls), each with its keys and arguments (build), and each
// set of policies as the script takes it (policyArgs).

// policySet is a set of policies as the script takes it (desc), or the
// error that says why it cannot (err: Check's).
type policySet struct {
	desc string
	arg  any // desc, as an argument: made once
	err  error
	most int // the most units its enforced policies can grant at once (math.MaxInt: none enforced)
}

// setKey is a set of policies as the store knows it: by its slice, whose
// policies never change (a StoreOp's Policies are not to).
type setKey struct {
	first *chanlimit.Policy
	n     int
}

func keyOf(policies []chanlimit.Policy) setKey { return setKey{&policies[0], len(policies)} }

// policyArgs returns the script's argument for a set of policies: for
// each, its algorithm, limit, window in µs, capacity, the bucket's units
// refilled per µs and units in a token, as little-endian doubles, then its
// field ("algorithm|name"), after its length in 2 bytes. Routers hand the
// store the same slice for a set of policies each time, so it is made once
// per set; and the script, which keeps the sets it has made by this
// string, makes each once. Policies that Check refuses (a router never
// hands them over) have its error instead.
func (s *Store) policyArgs(policies []chanlimit.Policy) *policySet {
	id := keyOf(policies)
	if a, ok := s.args.Load(id); ok {
		return a.(*policySet)
	}
	if err := s.Check(policies); err != nil {
		return &policySet{err: fmt.Errorf("redislimit: %w", err)}
	}
	var b []byte
	most := math.MaxInt
	for _, p := range policies {
		w := uint64(p.Window / time.Microsecond)
		capacity := p.Limit
		if p.Burst > 0 {
			capacity = p.Burst
		}
		if !p.DryRun {
			most = min(most, capacity)
		}
		perUs, perToken := perUnits(uint64(p.Limit), w)
		alg := float64(scriptAlgorithm[p.Algorithm])
		if p.DryRun {
			alg = -alg // the script's mark of a dry-run policy
		}
		for _, v := range []float64{alg, float64(p.Limit), float64(w), float64(capacity), float64(perUs), float64(perToken)} {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
		field := p.Algorithm + "|" + p.Name
		b = binary.LittleEndian.AppendUint16(b, uint16(len(field)))
		b = append(b, field...)
	}
	set := &policySet{desc: string(b), most: most}
	set.arg = set.desc
	if s.cached.Add(1) > 1024 { // sets let go (SetOverride, SetPolicies) are not kept for ever
		s.args.Clear()
		s.cached.Store(0)
	}
	s.args.Store(id, set)
	return set
}

// MaxPerCall is the most requests one call of the script decides: a
// burst larger than that goes as several calls in its pipeline, so that
// no call holds Redis long.
const MaxPerCall = 128

// maxAnswers is the most numbers one call answers (1 + 7 per policy for
// each allow or peek): Lua moves at most about 8,000 values at once.
const maxAnswers = 4096

// answers returns how many numbers the script answers op with.
func answers(op *chanlimit.StoreOp) int {
	switch op.Kind {
	case chanlimit.StoreAllow, chanlimit.StorePeek, chanlimit.StoreTurn, chanlimit.StoreDryRun:
		return 2 + perPolicy*len(op.Policies) // the key's generation, the wait for its hold's end, then each policy's
	case chanlimit.StoreRefund, chanlimit.StoreHold:
		return 1 // 0, or -1 for a corrupt key, which fails it
	}
	return 0 // a reset or a give back: nobody waits for its answer
}

// perPolicy is how many numbers the script answers for each policy of a
// request: allowed, remaining, retry after, reset after, delay (µs), by
// how many ns the retry after was rounded up, and, where it allowed what
// the others denied, its reset after as it is.
const perPolicy = 7

// call is one script call of a pipeline: the requests it decides, by
// their index in the burst, their Redis keys, and its number among the
// store's calls.
type call struct {
	ops     []int
	answers int // the numbers the script answers them with
	seq     uint64
	keys    []string // ops' keys, in order
	args    []any
	cmd     *redis.Cmd
}

// calls groups ops into the script's calls, with their Redis keys: in
// order, by hash slot on a Cluster, at most MaxPerCall a call, and at
// most maxAnswers numbers.
func (s *Store) calls(ops []chanlimit.StoreOp) []call {
	var calls []call
	var open map[uint16]int // on a Cluster, the call of each slot still open to more ops
	if s.cluster {
		open = map[uint16]int{}
	}
	last := -1 // on a single node, the call open to more ops
	for i := range ops {
		if ops[i].Err != nil { // answered already: not sent
			continue
		}
		key, n := s.Key(ops[i].Key), answers(&ops[i])
		var slot uint16
		c, ok := last, last >= 0
		if s.cluster {
			slot = hashSlot(key)
			c, ok = open[slot]
		}
		if !ok || len(calls[c].ops) == MaxPerCall || calls[c].answers+n > maxAnswers {
			c = len(calls)
			room := min(len(ops)-i, MaxPerCall) // on a single node, as many as it will have
			calls = append(calls, call{ops: make([]int, 0, room), keys: make([]string, 0, room)})
			if s.cluster {
				open[slot] = c
			}
			last = c
		}
		calls[c].ops = append(calls[c].ops, i)
		calls[c].keys = append(calls[c].keys, key)
		calls[c].answers += n
	}
	return calls
}

// generation returns the generation op carries to the script: for a
// give-back, its grant's (StoreOp.Grant); for any other request, a number
// drawn for its key, which the script keeps if the request makes the
// key's states afresh (a new key, or one Reset since). Drawn at random,
// from 2^52 (a double holds it exactly), so that no two stores, nor a
// store before and after a restart, draw the same for one key but by a
// chance of about one in 2^52.
func generation(op *chanlimit.StoreOp) uint64 {
	if op.Kind == chanlimit.StoreGiveBack {
		return op.Grant
	}
	return 1 + rand.Uint64N(1<<52-1)
}

// maxHold is the longest hold the script keeps, about 100 years: the end
// of a hold, in microseconds since 1970, stays below 2^53, as every
// number the script keeps does.
const maxHold = 100 * 365 * 24 * time.Hour

// holdMicros returns d, a hold, in whole microseconds, rounded up (so
// that a hold is never shorter than asked), at most maxHold's.
func holdMicros(d time.Duration) int64 {
	d = min(d, maxHold)
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// build numbers calls, and writes into each the script's arguments: the numbers, packed as little-endian doubles in one string
// (every one is an integer below 2^53, exact in a double), then the
// store's id, the call's number and its sets of policies (policyArgs).
func (s *Store) build(ops []chanlimit.StoreOp, calls []call) {
	first, low, keep := s.flights.take(len(calls))
	for k := range calls {
		c := &calls[k]
		c.seq = first + uint64(k)
		blob := make([]byte, 0, 8*(6+len(keep)+5*len(c.ops)))
		put := func(v float64) { blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(v)) }
		put(float64(Grace.Milliseconds()))
		put(float64(ClockGrace.Milliseconds()))
		put(float64(s.replay.Milliseconds()))
		put(float64(low))
		put(float64(c.seq))
		put(float64(len(keep)))
		for _, seq := range keep {
			put(float64(seq))
		}
		args := make([]any, 3, 4)
		args[1], args[2] = s.idArg, strconv.FormatUint(c.seq, 10)
		sets := make([]setKey, 0, 4) // the call's sets of policies: a few, found by a look at each
		for _, i := range c.ops {
			op := &ops[i]
			set := slices.Index(sets, keyOf(op.Policies))
			if set < 0 {
				set = len(sets)
				sets = append(sets, keyOf(op.Policies))
				args = append(args, s.policyArgs(op.Policies).arg)
			}
			now := int64(-1)
			if !op.Now.IsZero() {
				now = op.Now.UnixMicro()
			}
			put(float64(op.Kind))
			if op.Kind == chanlimit.StoreHold {
				put(float64(holdMicros(op.Hold)))
			} else {
				put(float64(op.N))
			}
			put(float64(set + 1))
			put(float64(now))
			put(float64(generation(op)))
		}
		args[0] = blob
		c.args = args
	}
}
