package algorithms

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"time"
)

// The reference models: each algorithm's rule written as plainly as we can,
// with a full history of what was admitted and math/big arithmetic, sharing
// no code with the algorithms. Model tests and fuzz targets drive a model and
// the real algorithm through the same schedule and require identical
// decisions. Models take a non-decreasing now.

// model is a reference implementation of one algorithm.
type model interface {
	allowN(now time.Duration, n int) (Decision, error)
	admitted() []admission
}

// admission is one allowed request, and how long its work waits to start
// (leaky_bucket).
type admission struct {
	at, delay time.Duration
	n         int
}

// start returns when a's work starts: at + delay, which may pass the largest
// Duration.
func (a admission) start() *big.Int {
	return new(big.Int).Add(big.NewInt(int64(a.at)), big.NewInt(int64(a.delay)))
}

// history is the part every model shares: the list of admissions.
type history struct{ list []admission }

func (h *history) admitted() []admission { return h.list }

// unitsIn returns the units admitted at instants t with from < t <= to.
func (h *history) unitsIn(from, to time.Duration) int {
	units := 0
	for _, a := range h.list {
		if a.at > from && a.at <= to {
			units += a.n
		}
	}
	return units
}

// fit reports whether count + n <= limit, without overflow.
func fit(count, n, limit int) bool {
	sum := new(big.Int).Add(big.NewInt(int64(count)), big.NewInt(int64(n)))
	return sum.Cmp(big.NewInt(int64(limit))) <= 0
}

func rat(x int64) *big.Rat { return new(big.Rat).SetInt64(x) }

// ceilDur returns x rounded up, as a Duration.
func ceilDur(x *big.Rat) time.Duration {
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return time.Duration(q.Int64())
}

// floorInt returns x rounded down.
func floorInt(x *big.Rat) int {
	return int(new(big.Int).Quo(x.Num(), x.Denom()).Int64())
}

// bucketModel is token_bucket, gcra and leaky_bucket: a number of tokens,
// a fraction, refilled by elapsed × N / T up to B.
type bucketModel struct {
	history
	n, b   int
	t      time.Duration
	tokens *big.Rat
	last   time.Duration
	leaky  bool // report Delay: the time to refill what is missing now
}

func newBucketModel(p Params, leaky bool) *bucketModel {
	b := p.Burst
	if b == 0 {
		b = p.Limit
	}
	return &bucketModel{n: p.Limit, b: b, t: p.Window, tokens: rat(int64(b)), leaky: leaky}
}

// timeFor returns how long refilling x tokens takes, rounded up.
func (m *bucketModel) timeFor(x *big.Rat) time.Duration {
	return ceilDur(new(big.Rat).Mul(x, new(big.Rat).SetFrac64(int64(m.t), int64(m.n))))
}

func (m *bucketModel) allowN(now time.Duration, n int) (Decision, error) {
	if err := checkCount(n, m.b); err != nil {
		return Decision{}, err
	}
	refill := new(big.Rat).Mul(rat(int64(now-m.last)), new(big.Rat).SetFrac64(int64(m.n), int64(m.t)))
	m.tokens.Add(m.tokens, refill)
	if m.tokens.Cmp(rat(int64(m.b))) > 0 {
		m.tokens = rat(int64(m.b))
	}
	m.last = now
	missing := new(big.Rat).Sub(rat(int64(m.b)), m.tokens)
	if m.tokens.Cmp(rat(int64(n))) < 0 {
		return Decision{
			Limit:      m.n,
			Remaining:  floorInt(m.tokens),
			RetryAfter: m.timeFor(new(big.Rat).Sub(rat(int64(n)), m.tokens)),
			ResetAfter: m.timeFor(missing),
		}, nil
	}
	d := Decision{Allowed: true, Limit: m.n}
	if m.leaky {
		d.Delay = m.timeFor(missing)
	}
	m.tokens.Sub(m.tokens, rat(int64(n)))
	d.Remaining = floorInt(m.tokens)
	d.ResetAfter = m.timeFor(new(big.Rat).Sub(rat(int64(m.b)), m.tokens))
	m.list = append(m.list, admission{at: now, delay: d.Delay, n: n})
	return d, nil
}

// logModel is sliding_window_log: count what was admitted in (now-T, now].
type logModel struct {
	history
	n int
	t time.Duration
}

func (m *logModel) allowN(now time.Duration, n int) (Decision, error) {
	if err := checkCount(n, m.n); err != nil {
		return Decision{}, err
	}
	count := m.unitsIn(now-m.t, now)
	if !fit(count, n, m.n) {
		// The count drops only when an admission leaves the window, at
		// its instant + T: try those instants in order.
		var leaves []time.Duration
		newest := time.Duration(math.MinInt64)
		for _, a := range m.list {
			if a.at+m.t > now {
				leaves = append(leaves, a.at+m.t-now)
			}
			newest = max(newest, a.at)
		}
		sort.Slice(leaves, func(i, j int) bool { return leaves[i] < leaves[j] })
		retry := time.Duration(-1)
		for _, w := range leaves {
			if fit(m.unitsIn(now+w-m.t, now+w), n, m.n) {
				retry = w
				break
			}
		}
		return Decision{Limit: m.n, Remaining: m.n - count, RetryAfter: retry, ResetAfter: newest + m.t - now}, nil
	}
	m.list = append(m.list, admission{at: now, n: n})
	return Decision{Allowed: true, Limit: m.n, Remaining: m.n - count - n, ResetAfter: m.t}, nil
}

// fixedModel is fixed_window: a window opens at the first admission after
// the previous window ended.
type fixedModel struct {
	history
	n      int
	t      time.Duration
	start  time.Duration
	opened bool
}

func (m *fixedModel) allowN(now time.Duration, n int) (Decision, error) {
	if err := checkCount(n, m.n); err != nil {
		return Decision{}, err
	}
	if !m.opened || now-m.start >= m.t {
		// A new window would open here: it holds any n <= N.
		m.start, m.opened = now, true
	}
	count := 0
	for _, a := range m.list {
		if a.at >= m.start && a.at < m.start+m.t {
			count += a.n
		}
	}
	end := m.start + m.t - now
	if !fit(count, n, m.n) {
		return Decision{Limit: m.n, Remaining: m.n - count, RetryAfter: end, ResetAfter: end}, nil
	}
	m.list = append(m.list, admission{at: now, n: n})
	return Decision{Allowed: true, Limit: m.n, Remaining: m.n - count - n, ResetAfter: end}, nil
}

// counterModel is sliding_window_counter: windows of T from an anchor,
// counted from the admissions; the previous window weighed by its overlap.
// Waits are found by binary search over the plain predicate, which only
// turns from false to true as time passes.
type counterModel struct {
	history
	n        int
	t        time.Duration
	anchor   time.Duration
	anchored bool
}

// at returns the windows at now: elapsed into the current one, and the
// units of the previous and current windows. ok is false when both are
// empty (the key is untouched).
func (m *counterModel) at(now time.Duration) (elapsed time.Duration, prev, cur int, ok bool) {
	if !m.anchored {
		return 0, 0, 0, false
	}
	k := (now - m.anchor) / m.t
	start := m.anchor + k*m.t
	for _, a := range m.list {
		switch {
		case a.at >= start && a.at < start+m.t:
			cur += a.n
		case a.at >= start-m.t && a.at < start:
			prev += a.n
		}
	}
	return now - start, prev, cur, prev > 0 || cur > 0
}

// fits reports whether n units fit at now: the previous window's units, as
// if spread evenly over its T nanoseconds, counted for the nanoseconds
// t - T < i <= now still inside the sliding window (T - 1 - e of them), in
// whole units rounded down, plus cur plus n, at most N.
func (m *counterModel) fits(now time.Duration, n int) bool {
	elapsed, prev, cur, ok := m.at(now)
	if !ok {
		return true
	}
	covered := int64(m.t - 1 - elapsed)
	weighed := new(big.Rat).Mul(rat(int64(prev)), new(big.Rat).SetFrac64(covered, int64(m.t)))
	est := new(big.Int).Quo(weighed.Num(), weighed.Denom()) // floor: both are >= 0
	est.Add(est, big.NewInt(int64(cur)))
	est.Add(est, big.NewInt(int64(n)))
	return est.Cmp(big.NewInt(int64(m.n))) <= 0
}

// remaining returns the most units that fit at now.
func (m *counterModel) remaining(now time.Duration) int {
	lo, hi := 0, m.n // fits(lo) or lo == 0
	for lo < hi {
		mid := lo + (hi-lo)/2 + 1
		if m.fits(now, mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// firstWait returns the least w in [1, limit] with ok(now+w).
func firstWait(now, limit time.Duration, ok func(time.Duration) bool) time.Duration {
	lo, hi := time.Duration(1), limit
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(now + mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func (m *counterModel) allowN(now time.Duration, n int) (Decision, error) {
	if err := checkCount(n, m.n); err != nil {
		return Decision{}, err
	}
	d := Decision{Limit: m.n}
	if m.fits(now, n) {
		if _, _, _, ok := m.at(now); !ok {
			m.anchor, m.anchored = now, true
		}
		m.list = append(m.list, admission{at: now, n: n})
		d.Allowed = true
	} else {
		d.RetryAfter = firstWait(now, 2*m.t, func(t time.Duration) bool { return m.fits(t, n) })
	}
	d.Remaining = m.remaining(now)
	if _, _, _, ok := m.at(now); ok {
		d.ResetAfter = firstWait(now, 2*m.t, func(t time.Duration) bool {
			_, _, _, touched := m.at(t)
			return !touched
		})
	}
	return d, nil
}

// newModel returns the reference model of the named algorithm.
func newModel(name string, p Params) model {
	switch name {
	case tokenBucket, gcra:
		return newBucketModel(p, false)
	case leakyBucket:
		return newBucketModel(p, true)
	case slidingWindowLog:
		return &logModel{n: p.Limit, t: p.Window}
	case fixedWindow:
		return &fixedModel{n: p.Limit, t: p.Window}
	case slidingWindowCounter:
		return &counterModel{n: p.Limit, t: p.Window}
	}
	panic("no model for " + name)
}

// sameError reports whether a and b are the same error (both nil
// included): they match the same sentinel.
func sameError(a, b error) bool { return sentinel(a) == sentinel(b) }

func sentinel(err error) error {
	for _, s := range []error{errInvalidCount, errExceedsCapacity, ErrInvalidParams} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// checkWindowInvariant checks, over a model's admissions, the bound its
// algorithm promises on what any span of one Window holds.
func checkWindowInvariant(name string, p Params, adm []admission) error {
	most := map[string]int{
		slidingWindowLog:     p.Limit,
		fixedWindow:          2 * p.Limit,
		slidingWindowCounter: 2 * p.Limit,
	}
	bound, ok := most[name]
	if !ok || p.Limit > math.MaxInt/2 {
		return nil
	}
	// The span (t-T, t] holding the most ends at an admission.
	for _, end := range adm {
		units := 0
		for _, a := range adm {
			if a.at > end.at-p.Window && a.at <= end.at {
				units += a.n
			}
		}
		if units > bound {
			return fmt.Errorf("%s: %d units admitted in the Window ending at %v, more than %d", name, units, end.at, bound)
		}
	}
	return nil
}

// checkSpacing checks that leaky_bucket's admitted work starts evenly
// spaced: between the starts of two admissions lie at least the units
// admitted between them × T/N, rounded down to the nanosecond.
func checkSpacing(p Params, adm []admission) error {
	for i := range adm {
		units := new(big.Int)
		for j := i + 1; j < len(adm); j++ {
			units.Add(units, big.NewInt(int64(adm[j-1].n)))
			need := new(big.Int).Mul(units, big.NewInt(int64(p.Window)))
			need.Quo(need, big.NewInt(int64(p.Limit)))
			if gap := new(big.Int).Sub(adm[j].start(), adm[i].start()); gap.Cmp(need) < 0 {
				return fmt.Errorf("leaky_bucket: work admitted at %v starts %v after work admitted at %v, %v units apart: want at least %v",
					adm[j].at, gap, adm[i].at, units, need)
			}
		}
	}
	return nil
}
