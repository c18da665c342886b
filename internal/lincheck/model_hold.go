package lincheck

import (
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// The specification of a key held (Router.Hold), in memory (see model.go).

// holdDenial is the answer to a request of n units on ss at now, on a key
// held until end, after now: denied, taking nothing, with the wait until
// the same request is allowed (pastHold), and the time until the key is
// neither held nor touched; no Policy, no Limit, nothing left.
func (m *Model) holdDenial(ss []saved, now, end time.Duration, n int) algorithms.Decision {
	return algorithms.Decision{
		RetryAfter: m.pastHold(ss, end, n) - now,
		ResetAfter: max(end-now, m.enforcedResetAfter(ss, now)),
	}
}

// pastHold returns the instant a request of n units on ss, held until
// end, is allowed: the end, or later if the enforced policies deny it
// then, by their own wait.
func (m *Model) pastHold(ss []saved, end time.Duration, n int) time.Duration {
	if d, _ := m.decide(ss, end, n, modeAsk); !d.Allowed {
		return end + d.RetryAfter
	}
	return end
}
