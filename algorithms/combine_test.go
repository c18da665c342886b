package algorithms_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit/algorithms"
)

// TestCombine: the decision of several policies, step by step.
func TestCombine(t *testing.T) {
	allow := func(name string, limit, remaining int, reset, delay time.Duration) algorithms.Decision {
		return algorithms.Decision{Allowed: true, Policy: name, Limit: limit, Remaining: remaining, ResetAfter: reset, Delay: delay}
	}
	deny := func(name string, limit, remaining int, retry, reset time.Duration) algorithms.Decision {
		return algorithms.Decision{Policy: name, Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
	}
	for _, tc := range []struct {
		name string
		ds   []algorithms.Decision
		want algorithms.Decision
	}{
		{"no policy enforced: allowed, nothing else", nil, algorithms.Decision{Allowed: true}},
		{"one policy: its decision", []algorithms.Decision{allow("a", 10, 3, time.Second, 0)}, allow("a", 10, 3, time.Second, 0)},
		{
			"allowed: the fewest Remaining decides; the largest ResetAfter and Delay",
			[]algorithms.Decision{allow("a", 10, 7, time.Second, 0), allow("b", 5, 2, time.Millisecond, 3*time.Millisecond), allow("c", 100, 9, time.Hour, 0)},
			algorithms.Decision{Allowed: true, Policy: "b", Limit: 5, Remaining: 2, ResetAfter: time.Hour, Delay: 3 * time.Millisecond},
		},
		{
			"allowed, a tie on Remaining: the first",
			[]algorithms.Decision{allow("a", 10, 2, time.Second, 0), allow("b", 5, 2, time.Second, 0)},
			allow("a", 10, 2, time.Second, 0),
		},
		{
			"denied: the denying policy with the longest wait, though another has fewer Remaining",
			[]algorithms.Decision{allow("a", 10, 0, time.Minute, 0), deny("b", 5, 1, time.Second, time.Second), deny("c", 3, 2, 2*time.Second, 2*time.Second)},
			algorithms.Decision{Policy: "c", Limit: 3, Remaining: 0, RetryAfter: 2 * time.Second, ResetAfter: time.Minute},
		},
		{
			"denied, a tie on the wait: the first",
			[]algorithms.Decision{deny("a", 10, 0, time.Second, time.Second), deny("b", 5, 0, time.Second, time.Second)},
			deny("a", 10, 0, time.Second, time.Second),
		},
		{
			"denied: an allowing policy's Delay is not the request's",
			[]algorithms.Decision{allow("a", 10, 4, time.Second, time.Millisecond), deny("b", 5, 0, time.Second, time.Second)},
			deny("b", 5, 0, time.Second, time.Second),
		},
		{
			"denied by one nanosecond more",
			[]algorithms.Decision{deny("a", 10, 0, 3*time.Microsecond, time.Second), deny("b", 5, 0, 3*time.Microsecond+1, time.Second)},
			deny("b", 5, 0, 3*time.Microsecond+1, time.Second),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]algorithms.Decision(nil), tc.ds...)
			assert.Equal(t, tc.want, algorithms.Combine(tc.ds))
			assert.Equal(t, in, tc.ds, "Combine changes no decision of ds")
		})
	}
}
