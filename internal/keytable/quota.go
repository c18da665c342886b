package keytable

import "time"

// A key's quota under each of its policies (Table.Quota): what each
// policy, asked alone, says the key has left, and how long until it has
// more.

// quota asks each policy alone about the key's state at now, changing
// nothing: a request of one unit gives its Remaining (one more if it is
// allowed, since Remaining counts after the request), and one of a unit
// more than that the wait until it has more.
func (t *table[S]) quota(key string, now time.Duration, fs []PolicyQuota) ([]PolicyQuota, error) {
	i, held := t.lookup(key)
	if !held {
		i = none // the fresh states: what a key never seen has
	}
	fs = fs[:0]
	err := t.ask(i, func() {
		d := &t.peeked
		for _, j := range t.set.enforced { // a dry-run policy is never advertised
			c := t.cols[j]
			c.decide(i, now, 1, d, false)
			q := PolicyQuota{Policy: j, Remaining: max(d.Remaining, 0)}
			if d.Allowed {
				q.Remaining++
			}
			if q.Remaining < t.set.capacities[j] {
				if c.decide(i, now, q.Remaining+1, d, false); !d.Allowed {
					q.More = d.RetryAfter
				}
			}
			fs = append(fs, q)
		}
	})
	t.clearFresh()
	if err != nil {
		return fs[:0], err
	}
	return fs, nil
}
