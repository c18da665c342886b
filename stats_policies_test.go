package chanlimit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// TestStatsPolicies: Stats.Policies counts each policy's denials (the
// deciding one's, Decision.Policy) and each dry-run policy's would-be
// denials, by name, over the router's policies and the overrides', every
// name listed in name order, a Peek not counted.
func TestStatsPolicies(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Partitions: 2, Policies: []chanlimit.Policy{
		{Name: "second", Limit: 2, Window: time.Second},
		{Name: "hour", Limit: 3, Window: time.Hour},
		{Name: "trial", Limit: 1, Window: time.Hour, DryRun: true},
	}})
	require.NoError(t, r.SetOverride(bg, "vip", chanlimit.Policy{Name: "vip", Limit: 1, Window: time.Hour}))
	for range 3 {
		r.Allow("a") // 2 granted, the third denied by second; trial would deny the second and the third
	}
	_, err := r.Peek(bg, "a", 1)
	require.NoError(t, err)
	r.Allow("vip")
	r.Allow("vip") // denied by vip
	out := make([]chanlimit.Decision, 3)
	require.NoError(t, r.AllowBatch(bg, []chanlimit.Request{{Key: "b", N: 1}, {Key: "b", N: 1}, {Key: "b", N: 1}}, out)) // as a's
	st := stats(t, r)
	assert.Equal(t, []chanlimit.PolicyStats{
		{Name: "hour"},
		{Name: "second", Denied: 2},
		{Name: "trial", WouldDeny: 4},
		{Name: "vip", Denied: 1},
	}, st.Policies)
	assert.Nil(t, st.Partitions[0].Policies)
	assert.Equal(t, uint64(3), st.Denied, "as Stats counts them")
	assert.Equal(t, uint64(4), st.WouldDeny)
}

// TestStatsPoliciesPastTheCap: past MaxPolicyStats names, the rest are
// summed under "other".
func TestStatsPoliciesPastTheCap(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour, MaxOverrides: 100})
	for i := range chanlimit.MaxPolicyStats + 5 {
		key := fmt.Sprintf("k%03d", i)
		require.NoError(t, r.SetOverride(bg, key, chanlimit.Policy{Name: fmt.Sprintf("p%03d", i), Limit: 1, Window: time.Hour}))
		r.Allow(key)
		r.Allow(key)
	}
	st := stats(t, r)
	require.Len(t, st.Policies, chanlimit.MaxPolicyStats+1)
	assert.Equal(t, "default", st.Policies[0].Name, "the router's own policy, first in name order")
	assert.Equal(t, chanlimit.PolicyStats{Name: "p062", Denied: 1}, st.Policies[chanlimit.MaxPolicyStats-1])
	assert.Equal(t, chanlimit.PolicyStats{Name: "other", Denied: 6}, st.Policies[chanlimit.MaxPolicyStats])
}

// TestStatsPoliciesAPolicyNamedOther: a policy of the router named
// "other" is listed once: by itself while the names fit, and summed with
// the rest under "other" past MaxPolicyStats names, never twice (which
// would make one series twice, as promlimit writes them).
func TestStatsPoliciesAPolicyNamedOther(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "other", Limit: 1, Window: time.Hour}}, MaxOverrides: 100})
	r.Allow("x")
	r.Allow("x") // denied by "other", the router's own
	st := stats(t, r)
	assert.Equal(t, []chanlimit.PolicyStats{{Name: "other", Denied: 1}}, st.Policies)

	for i := range chanlimit.MaxPolicyStats + 1 {
		key := fmt.Sprintf("k%03d", i)
		require.NoError(t, r.SetOverride(bg, key, chanlimit.Policy{Name: fmt.Sprintf("p%03d", i), Limit: 1, Window: time.Hour}))
		r.Allow(key)
		r.Allow(key)
	}
	st = stats(t, r)
	require.Len(t, st.Policies, chanlimit.MaxPolicyStats+1)
	names := map[string]int{}
	for _, p := range st.Policies {
		names[p.Name]++
	}
	assert.Equal(t, 1, names["other"], "one entry named other: %v", st.Policies)
	assert.Equal(t, chanlimit.PolicyStats{Name: "p063", Denied: 1}, st.Policies[chanlimit.MaxPolicyStats-1])
	assert.Equal(t, chanlimit.PolicyStats{Name: "other", Denied: 2}, st.Policies[chanlimit.MaxPolicyStats], "p064's and the router's own")
}
