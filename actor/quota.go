package actor

import (
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// A request may ask for its key's quota beside its decision (AllowQuota,
// PeekQuota, WaitQuota): what the key has under each of its policies,
// written into the caller's Quota before the answer is sent, in
// the same round trip. It is what an HTTP RateLimit field tells.

// fillQuota writes into q what key has under each of its policies at now,
// once d was decided on it (Quoter). While callers wait on
// the key, what it has is the line's: every policy then says 0 remaining,
// and the wait a request of one unit would have in line. A table that
// cannot tell each policy's (no Quoter) gives the deciding policy's alone,
// from d; one whose rule panics (the table has dealt with it), none: the
// decision stands.
func (l *loop) fillQuota(key string, now time.Duration, d *algorithms.Decision, q *Quota) {
	ok, err := l.keys.quotaOf(key, now, q)
	switch {
	case err != nil: // the rule dropped the key: a line's head may be granted now, as in lineWait
		q.Policies = q.Policies[:0]
		if ln := l.waits.lineOf(key); ln != nil && len(ln.queue) > 0 {
			l.waits.reschedule(ln, now)
		}
		return
	case !ok:
		q.Policies = q.Policies[:0]
		if j := policyIndex(q.Set, d.Policy); j >= 0 {
			more := d.RetryAfter
			if d.Allowed {
				more = l.untilMore(key, now, d.Remaining)
			}
			q.Policies = append(q.Policies, PolicyQuota{Policy: j, Remaining: d.Remaining, More: more})
		}
	}
	if ln := l.waits.lineOf(key); ln != nil && len(ln.queue) > 0 {
		in, err := l.inLine(key, 1, now, ln)
		if err != nil {
			q.Policies = q.Policies[:0]
			return
		}
		for i := range q.Policies {
			q.Policies[i].Remaining, q.Policies[i].More = 0, in.RetryAfter
		}
	}
}

// decided reports whether a request answered err has a decision to tell
// the quota of: it has no error, or was denied at once because its wait
// would pass ctx's deadline.
func decided(err error) bool {
	if err == nil {
		return true
	}
	_, late := err.(*tooLate)
	return late
}

// policyIndex returns the place of the policy named name in set, or -1,
// as for a table that named no set.
func policyIndex(set PolicySet, name string) int {
	if set == nil {
		return -1
	}
	return set.Index(name)
}
