package redislimit

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// The script's answers, read into the ops' decisions.

// answer writes the answers of c's ops into them.
func (s *Store) answer(ops []chanlimit.StoreOp, c call) {
	vals, err := numbers(c.cmd)
	if err == nil && len(vals) == 0 {
		err = errors.New("redislimit: the script answered nothing")
	}
	if err != nil {
		for _, i := range c.ops {
			ops[i].Err = err
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
			op.Err = fmt.Errorf("redislimit: the Redis key %q holds a value that is not a state the script wrote (Reset drops it)", s.Key(op.Key))
			vals = vals[1:]
			continue
		}
		if len(vals) < size {
			op.Err = fmt.Errorf("redislimit: the script answered too few numbers for %d requests", len(c.ops))
			continue
		}
		if op.Kind != chanlimit.StoreRefund && op.Kind != chanlimit.StoreHold {
			op.Decision = combine(op.Policies, op.N, vals[2:size])
			if vals[1] > 0 {
				op.Decision = heldDecision(op.Policies, micro(vals[1]), op.Decision, vals[2:size])
			}
			op.Grant = uint64(vals[0])
			if op.Kind == chanlimit.StoreTurn && op.Decision.Delay > 0 {
				op.Decision.Allowed = false // its turn is to come: the script took nothing
			}
		}
		vals = vals[size:]
	}
}

// numbers returns the numbers a call of the script answered: a string
// of little-endian doubles, each an integer.
func numbers(cmd *redis.Cmd) ([]int64, error) {
	blob, err := cmd.Text()
	if err != nil {
		return nil, err
	}
	if len(blob)%8 != 0 {
		return nil, fmt.Errorf("redislimit: the script answered %d bytes, not a whole number of doubles", len(blob))
	}
	vals := make([]int64, len(blob)/8)
	for i := range vals {
		b := blob[8*i : 8*i+8]
		bits := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		vals[i] = int64(math.Float64frombits(bits))
	}
	return vals, nil
}

// combine returns the decision of the policies whose own decisions are
// vals (perPolicy numbers each) for n units, as a router combines them in
// memory: a policy that allowed what the others denied reports its state
// as it is (algorithms.Untaken), then algorithms.Combine; with RetryAfter
// in the whole microseconds the script answers. The policies' waits are
// combined as the in-memory rules' nanoseconds, not the microseconds they
// round up to: waits of 2.5 µs and 3 µs both say 3 µs, and the second is
// the longer. WouldDeny says that a dry-run policy denied.
func combine(policies []chanlimit.Policy, n int, vals []int64) chanlimit.Decision {
	allowed := true // by every enforced policy
	for j, p := range policies {
		allowed = allowed && (p.DryRun || vals[perPolicy*j] == 1)
	}
	var buf [4]chanlimit.Decision // most keys have a policy or two: no allocation
	ds, wouldDeny := buf[:0], false
	for j, p := range policies {
		v := vals[perPolicy*j : perPolicy*j+perPolicy]
		if p.DryRun {
			wouldDeny = wouldDeny || v[0] == 0
			continue
		}
		d := chanlimit.Decision{
			Allowed:    v[0] == 1,
			Limit:      p.Limit,
			Remaining:  int(v[1]),
			RetryAfter: micro(v[2]) - time.Duration(v[5]), // the rule's wait: the script rounded it up by v[5] ns
			ResetAfter: micro(v[3]),
			Delay:      micro(v[4]),
			Policy:     p.Name,
		}
		if !allowed && d.Allowed {
			algorithms.Untaken(&d, n, micro(v[6]))
		}
		ds = append(ds, d)
	}
	d := algorithms.Combine(ds)
	d.RetryAfter = (d.RetryAfter + time.Microsecond - 1).Truncate(time.Microsecond) // back up to the script's microseconds
	d.WouldDeny = wouldDeny
	return d
}

// micro returns us microseconds as a Duration.
func micro(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// heldDecision returns the decision on a key held for wait more, whose
// policies decided d, their own numbers vals, as a peek at the hold's
// end: a denial that takes nothing (Router.Hold), with the wait until the
// same request would be allowed, wait and then the policies' own, and
// the time until the key is untouched, wait and then the states' as they
// are at the end (each policy's as is).
func heldDecision(policies []chanlimit.Policy, wait time.Duration, d chanlimit.Decision, vals []int64) chanlimit.Decision {
	retry := wait
	if !d.Allowed {
		retry += d.RetryAfter
	}
	idle := time.Duration(0)
	for j, p := range policies {
		if !p.DryRun {
			idle = max(idle, micro(vals[perPolicy*j+6]))
		}
	}
	return chanlimit.Decision{RetryAfter: retry, ResetAfter: wait + idle}
}
