package httplimit

import (
	"strconv"
	"time"

	"github.com/chanlimit/chanlimit"
)

// The fields the middleware writes, as net/http's Header keys them
// (textproto.CanonicalMIMEHeaderKey): set directly, they need no
// canonicalising on each request.
const (
	fieldPolicy     = "Ratelimit-Policy" // RateLimit-Policy
	fieldRateLimit  = "Ratelimit"        // RateLimit
	fieldRetryAfter = "Retry-After"
)

// policyFields is what the fields say of one set of policies, formatted
// once: the RateLimit-Policy value, and the start of a RateLimit value for
// each policy (`"name";r=`). A dry-run policy is never advertised: it
// limits nobody. A set of dry-run policies alone has no fields.
type policyFields struct {
	set    []chanlimit.Policy // a Quota's Policies: the router's own slice for its set
	value  string
	starts []string // in the set's order
}

// newPolicyFields formats the fields of set.
func newPolicyFields(set []chanlimit.Policy) *policyFields {
	f := &policyFields{set: set, value: string(appendPolicies(nil, set))}
	for _, p := range set {
		f.starts = append(f.starts, string(append(appendString(nil, p.Name), ";r="...)))
	}
	return f
}

// same reports whether set is f's: the router hands the same slice for a
// set of policies while it is in use.
func (f *policyFields) same(set []chanlimit.Policy) bool {
	return len(set) == len(f.set) && (len(set) == 0 || &set[0] == &f.set[0])
}

// index returns the place in f's set of the policy named name, or -1.
func (f *policyFields) index(name string) int {
	for j := range f.set {
		if f.set[j].Name == name {
			return j
		}
	}
	return -1
}

// appendRateLimit appends to b the RateLimit value of the decision d,
// with q the quota of its key (of f's set), and returns it and the
// deciding member's t. It has a member for each policy q tells of, the
// deciding policy's first: `"name";r=Remaining;t=More`, More in whole
// seconds, rounded up. On a denial, the deciding member's t is d's
// RetryAfter (untilMore), which is the Retry-After too. If q tells
// nothing of the deciding policy (its rule panicked while asked), the
// value is that policy's member alone, from d. A denial by a hold
// (Router.Hold) has a member for each policy q tells of, in order, each
// with its own t, and its wait is the hold's.
func (f *policyFields) appendRateLimit(b []byte, d chanlimit.Decision, q *chanlimit.Quota) ([]byte, int64) {
	if f.value == "" { // dry-run policies alone: no fields, and nothing but a hold denies
		if !d.Allowed {
			return b, untilMore(d, 0)
		}
		return b, 0
	}
	if byHold(d) { // no policy decided: each tells its own, the wait is the hold's
		t := untilMore(d, 0)
		for k, pq := range q.Each {
			if k > 0 {
				b = append(b, ", "...)
			}
			b = appendCounts(append(b, f.starts[pq.Policy]...), pq.Remaining, seconds(pq.More))
		}
		return b, t
	}
	first, deciding := -1, f.index(d.Policy)
	for k, pq := range q.Each {
		if pq.Policy == deciding {
			first = k
			break
		}
	}
	if first < 0 {
		t := untilMore(d, 0)
		return appendCounts(append(appendString(b, d.Policy), ";r="...), d.Remaining, t), t
	}
	t := untilMore(d, q.Each[first].More)
	b = appendCounts(append(b, f.starts[q.Each[first].Policy]...), q.Each[first].Remaining, t)
	for k, pq := range q.Each {
		if k != first {
			b = appendCounts(append(append(b, ", "...), f.starts[pq.Policy]...), pq.Remaining, seconds(pq.More))
		}
	}
	return b, t
}

// byHold reports whether d is a denial by a hold (Router.Hold), which no
// policy decided: a router's policies all have names.
func byHold(d chanlimit.Decision) bool { return !d.Allowed && d.Policy == "" }

// appendPolicies appends the RateLimit-Policy value of set to b: each
// policy that is not dry-run as `"name";q=Limit;w=Window`, the window in
// whole seconds, rounded up.
func appendPolicies(b []byte, set []chanlimit.Policy) []byte {
	for _, p := range set {
		if p.DryRun {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = appendString(b, p.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, integer(int64(p.Limit)), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, seconds(p.Window), 10)
	}
	return b
}

// appendCounts appends the rest of a RateLimit member after `r=`:
// remaining, and t.
func appendCounts(b []byte, remaining int, t int64) []byte {
	b = strconv.AppendInt(b, integer(int64(max(remaining, 0))), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, t, 10)
}

// untilMore returns the t of the deciding member of d's RateLimit field,
// in whole seconds rounded up: for a denial, its RetryAfter (at least 1: a
// refusal never says "retry now"), which is its Retry-After too; for an
// allowance, more, the wait until the deciding policy has more than the
// Remaining d left (0 when it is whole).
func untilMore(d chanlimit.Decision, more time.Duration) int64 {
	if !d.Allowed {
		return max(seconds(d.RetryAfter), 1)
	}
	return seconds(more)
}

// maxInteger is the largest Structured Fields Integer (RFC 9651, 3.3.1):
// one of at most 15 digits.
const maxInteger = 999_999_999_999_999

// integer returns n, a Limit or a Remaining, capped at maxInteger, so that
// a policy with a larger Limit (math.MaxInt, say, for a key not limited in
// practice) still writes fields that parse. A Window or a wait in seconds
// needs no cap: a time.Duration is at most about 9.2e9 seconds.
func integer(n int64) int64 { return min(n, maxInteger) }

// seconds returns d in whole seconds, rounded up; 0 for d <= 0.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// appendString appends s to b as a Structured Fields String (RFC 8941,
// 3.3.3): quoted, with '"' and '\' escaped. A policy's name is printable
// ASCII (chanlimit checks it), which is all a String may hold.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// Fields returns the values of the fields Middleware writes for the
// decision d on a key whose quota is q (as AllowQuota, PeekQuota or
// WaitQuota wrote it with d): RateLimit-Policy, RateLimit, and for a
// refusal the Retry-After seconds (0 for an allowance). policy and
// rateLimit are "" for a key under dry-run policies alone, which has no
// fields. Another protocol's middleware writes the same values with it
// (package grpclimit, as header metadata).
func Fields(d chanlimit.Decision, q *chanlimit.Quota) (policy, rateLimit string, retryAfter int64) {
	f := newPolicyFields(q.Policies)
	rate, t := f.appendRateLimit(nil, d, q)
	if !d.Allowed {
		retryAfter = t
	}
	return f.value, string(rate), retryAfter
}
