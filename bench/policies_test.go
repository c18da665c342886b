package bench

import (
	"testing"
	"time"

	"github.com/chanlimit/chanlimit"
)

// BenchmarkAllowPolicies: chanlimit's Allow on 1,000 keys, one goroutine,
// under one policy and under two (a token bucket per second and a sliding
// window log per minute, or a token bucket and a fixed window), every
// request allowed: what a second policy adds to a decision.
func BenchmarkAllowPolicies(b *testing.B) {
	const huge = 1 << 30 // admits every request
	second := chanlimit.Policy{Name: "second", Limit: huge, Window: time.Second}
	cases := []struct {
		name     string
		policies []chanlimit.Policy
	}{
		{"token_bucket", []chanlimit.Policy{second}},
		{"token_bucket+fixed_window", []chanlimit.Policy{second, {Name: "minute", Algorithm: "fixed_window", Limit: huge, Window: time.Minute}}},
		{"token_bucket+token_bucket", []chanlimit.Policy{second, {Name: "minute", Limit: huge, Window: time.Minute}}},
	}
	for _, c := range cases {
		b.Run("policies="+c.name, func(b *testing.B) {
			im := impl{c.name, func(tb testing.TB, _ policy) limiter {
				return newChanlimitWith(tb, chanlimit.Config{Policies: c.policies})
			}}
			benchAllow(b, im, admitAll, keys(1000), 0)
		})
	}
}
