package keytable

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// dryTable returns the keys of a set with an enforced fixed window of 2
// per minute and a dry-run one of 1 per minute.
func dryTable() *Keys {
	return NewKeys(NewSet([]Policy{
		{Name: "enforced", Algorithm: "fixed_window", Params: Params{Limit: 2, Window: time.Minute}, Rule: NewRule(fixedWindow(2, time.Minute))},
		{Name: "shadow", Algorithm: "fixed_window", Params: Params{Limit: 1, Window: time.Minute}, Rule: NewRule(fixedWindow(1, time.Minute)), DryRun: true},
	}))
}

// TestGiveBackLeavesTheDryRunPolicies: a grant given back (its caller
// left) goes back to the enforced policies alone, since a dry-run policy
// counts each request decided; a Refund goes to both.
func TestGiveBackLeavesTheDryRunPolicies(t *testing.T) {
	tab := dryTable()
	var d algorithms.Decision
	require.NoError(t, tab.AllowN("k", 0, 1, &d))
	require.Equal(t, algorithms.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Minute, Policy: "enforced"}, d)
	require.NoError(t, tab.GiveBack("k", 0, 1))
	require.NoError(t, tab.PeekN("k", s, 1, &d))
	assert.Equal(t, algorithms.Decision{Allowed: true, WouldDeny: true, Limit: 2, Remaining: 1, ResetAfter: time.Minute, Policy: "enforced"}, d,
		"the enforced window has both units again; the shadow still holds its one")
	require.NoError(t, tab.Refund("k", s, 1))
	require.NoError(t, tab.PeekN("k", s, 1, &d))
	assert.False(t, d.WouldDeny, "a Refund goes to the shadow too")
}

// TestAllowTurnDecidesTheDryRunPoliciesOnItsGrant: a turn the enforced
// policies deny leaves the dry-run ones as they were; one they grant is
// decided by them too.
func TestAllowTurnDecidesTheDryRunPoliciesOnItsGrant(t *testing.T) {
	tab := dryTable()
	var d algorithms.Decision
	require.NoError(t, tab.AllowN("k", 0, 2, &d))
	assert.True(t, d.WouldDeny, "2 units pass the shadow's 1")
	require.NoError(t, tab.AllowTurn("k", s, 1, &d))
	assert.Equal(t, algorithms.Decision{Limit: 2, RetryAfter: time.Minute - s, ResetAfter: time.Minute - s, Policy: "enforced"}, d,
		"denied: the shadow is not asked")
	require.NoError(t, tab.AllowTurn("k", time.Minute, 1, &d))
	assert.Equal(t, algorithms.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Minute, Policy: "enforced"}, d,
		"granted in a new minute: the shadow allows")
	require.NoError(t, tab.AllowN("k", time.Minute, 1, &d))
	assert.True(t, d.WouldDeny, "the turn took the shadow's unit")
}

// TestWouldDenyNamesAreBounded: past actor.MaxPolicyNames names, the
// counts of a new dry-run policy name are under actor.OtherPolicies,
// none lost.
func TestWouldDenyNamesAreBounded(t *testing.T) {
	var c Counts
	const names = actor.MaxPolicyNames + 10
	for i := range names {
		c.AddWouldDeny(fmt.Sprint("p", i), 3)
	}
	assert.Len(t, c.WouldDeny, actor.MaxPolicyNames+1)
	assert.Equal(t, uint64(3*10), c.WouldDeny[actor.OtherPolicies])
	sum := uint64(0)
	for _, n := range c.WouldDeny {
		sum += n
	}
	assert.Equal(t, uint64(3*names), sum)
}
