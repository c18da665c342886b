package redislimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit"
)

// The script's answers, read into the ops' decisions.

// answer writes the answers of c's ops into them.
func (s *Store) answer(ops []chanlimit.StoreOp, c call) {
	vals, err := c.cmd.Int64Slice()
	if err == nil && len(vals) == 0 {
		err = errors.New("redislimit: the script answered nothing")
	}
	if err != nil {
		for _, i := range c.ops {
			ops[i].Err = unavailable(err)
		}
		return
	}
	vals = vals[1:] // whether the call changed a key
	for _, i := range c.ops {
		op := &ops[i]
		size := answers(op)
		if size == 0 {
			continue
		}
		if len(vals) > 0 && vals[0] == -1 {
			op.Err = unavailable(fmt.Errorf("redislimit: the Redis key %q holds a value that is not a state the script wrote (Reset drops it)", s.Key(op.Key)))
			vals = vals[1:]
			continue
		}
		if len(vals) < size {
			op.Err = unavailable(fmt.Errorf("redislimit: the script answered too few numbers for %d requests", len(c.ops)))
			continue
		}
		if op.Kind != chanlimit.StoreRefund {
			op.Decision = combine(op.Policies, vals[0] == 1, vals[1:size])
		}
		vals = vals[size:]
	}
}

// combine returns the decision of the policies whose decisions are vals
// (perPolicy numbers each), as chanlimit combines them: of the policies
// that are not dry-run, Remaining the smallest, ResetAfter (and, allowed,
// Delay) the largest, RetryAfter the largest wait of the policies that
// denied; the policy that decided is, on a denial, the denying one with
// the longest wait, and otherwise the one with the fewest Remaining, the
// first on a tie. The longest wait is the in-memory rules' (their
// nanoseconds), not the microseconds they round up to: waits of 2.5 µs
// and 3 µs both say 3 µs, and the second is the longer. WouldDeny says
// that a dry-run policy denied; with no other policy, the decision is
// allowed and says nothing else.
func combine(policies []chanlimit.Policy, allowed bool, vals []int64) chanlimit.Decision {
	var d chanlimit.Decision
	by, enforced := -1, false
	for j, p := range policies {
		v := vals[perPolicy*j : perPolicy*j+perPolicy]
		if p.DryRun {
			d.WouldDeny = d.WouldDeny || v[0] == 0
			continue
		}
		if !enforced {
			d.Allowed, d.Remaining, enforced = allowed, int(v[1]), true
		}
		remaining, reset := int(v[1]), micro(v[3])
		d.Remaining = min(d.Remaining, remaining)
		d.ResetAfter = max(d.ResetAfter, reset)
		switch {
		case allowed:
			d.Delay = max(d.Delay, micro(v[4]))
			if by < 0 || remaining < int(vals[perPolicy*by+1]) {
				by = j
			}
		case v[0] == 0 && (by < 0 || longer(v, vals[perPolicy*by:])):
			by = j
		}
	}
	if !enforced {
		return chanlimit.Decision{Allowed: true, WouldDeny: d.WouldDeny} // dry-run policies alone
	}
	if !allowed {
		d.RetryAfter = micro(vals[perPolicy*by+2])
	}
	d.Limit, d.Policy = policies[by].Limit, policies[by].Name
	return d
}

// longer reports whether the wait a policy answered in a is longer than
// the one in b, in nanoseconds: its microseconds, less what was rounded
// up.
func longer(a, b []int64) bool {
	if a[2] != b[2] {
		return a[2] > b[2]
	}
	return a[5] < b[5]
}

// micro returns us microseconds as a Duration.
func micro(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
