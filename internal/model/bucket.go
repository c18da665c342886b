package model

import (
	"math/big"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// bucket is the model of token_bucket, GCRA and leaky_bucket: a bucket of
// burst tokens, a fraction, full until the first admission and refilled by
// elapsed × limit / window, never above burst. A request for n takes n
// tokens if there are at least n.
type bucket struct {
	history
	limit, burst int
	window       time.Duration
	tokens       *big.Rat      // at last, the instant of the latest admission
	last         time.Duration // meaningless before the first admission
	leaky        bool          // report Delay: the time to refill what is missing now
	refunded     bool          // a Refund gave tokens back: Admitted counts more than the bucket took
}

func newBucket(p algorithms.Params, leaky bool) *bucket {
	b := p.Burst
	if b == 0 {
		b = p.Limit
	}
	return &bucket{limit: p.Limit, burst: b, window: p.Window, tokens: rat(int64(b)), leaky: leaky}
}

func (m *bucket) Capacity() int { return m.burst }

// tokensAt returns the tokens in the bucket at now: full if nothing was
// ever admitted, else those left at the latest admission plus the refill
// since, at most burst.
func (m *bucket) tokensAt(now time.Duration) *big.Rat {
	full := rat(int64(m.burst))
	if len(m.list) == 0 {
		return full
	}
	t := new(big.Rat).Mul(rat(int64(now-m.last)), new(big.Rat).SetFrac64(int64(m.limit), int64(m.window)))
	t.Add(t, m.tokens)
	if t.Cmp(full) > 0 {
		return full
	}
	return t
}

// timeFor returns how long refilling x tokens takes, rounded up.
func (m *bucket) timeFor(x *big.Rat) time.Duration {
	return ceilDur(new(big.Rat).Mul(x, new(big.Rat).SetFrac64(int64(m.window), int64(m.limit))))
}

func (m *bucket) AllowN(now time.Duration, n int) (algorithms.Decision, error) {
	if err := checkCount(n, m.burst); err != nil {
		return algorithms.Decision{}, err
	}
	tokens := m.tokensAt(now)
	d := algorithms.Decision{Limit: m.limit}
	if tokens.Cmp(rat(int64(n))) < 0 {
		d.Remaining = m.Remaining(now)
		d.RetryAfter = m.timeFor(new(big.Rat).Sub(rat(int64(n)), tokens))
		d.ResetAfter = m.ResetAfter(now)
		return d, nil
	}
	d.Allowed = true
	if m.leaky {
		d.Delay = m.timeFor(new(big.Rat).Sub(rat(int64(m.burst)), tokens))
	}
	m.tokens, m.last = tokens.Sub(tokens, rat(int64(n))), now
	m.admit(now, d.Delay, n)
	d.Remaining = m.Remaining(now)
	d.ResetAfter = m.ResetAfter(now)
	return d, nil
}

func (m *bucket) PeekN(now time.Duration, n int) (algorithms.Decision, error) {
	c := *m
	c.history = m.copied()
	c.tokens = new(big.Rat).Set(m.tokens)
	return c.AllowN(now, n)
}

// Refund puts n tokens back at now, up to burst. The admissions stay as
// they were: a bucket that was refunded admits more than its rate in any
// span (Refunded).
func (m *bucket) Refund(now time.Duration, n int) {
	if n < 1 || len(m.list) == 0 {
		return
	}
	t := m.tokensAt(now)
	if t.Add(t, rat(int64(n))).Cmp(rat(int64(m.burst))) > 0 {
		t = rat(int64(m.burst))
	}
	m.tokens, m.last, m.refunded = t, now, true
}

// Refunded reports whether a Refund gave the bucket tokens back.
func (m *bucket) Refunded() bool { return m.refunded }

// Remaining returns the whole tokens at now.
func (m *bucket) Remaining(now time.Duration) int { return floorInt(m.tokensAt(now)) }

// ResetAfter returns the time until the bucket is full.
func (m *bucket) ResetAfter(now time.Duration) time.Duration {
	return m.timeFor(new(big.Rat).Sub(rat(int64(m.burst)), m.tokensAt(now)))
}
