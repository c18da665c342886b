package keytable

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/actor"
)

// TestQuotaOfEachPolicy: Quota tells each policy's own quota, in the set's
// order, changing nothing: a key never seen has every policy whole (its
// capacity, and no wait); a held one what each policy has left, and the
// wait until it has one more.
func TestQuotaOfEachPolicy(t *testing.T) {
	set := NewSet([]Policy{
		{Name: "second", Rule: NewRule(fixedWindow(3, s))},
		{Name: "minute", Rule: NewRule(fixedWindow(10, 60*s))},
	})
	tab := set.NewTable()
	var q Quota
	ok, err := tab.Quota("new", 0, &q)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Same(t, set, q.Set)
	assert.Equal(t, []PolicyQuota{{Policy: 0, Remaining: 3}, {Policy: 1, Remaining: 10}}, q.Policies, "whole")
	assert.Zero(t, tab.Len(), "an unseen key stays unseen")

	allow(t, tab, "k", 0, 3)
	ok, err = tab.Quota("k", 500*ms, &q)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []PolicyQuota{{Policy: 0, Remaining: 0, More: 500 * ms}, {Policy: 1, Remaining: 7, More: 59500 * ms}}, q.Policies)
	d, err := peek(tab, "k", 500*ms, 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "nothing was taken, nothing given")
	assert.Equal(t, 500*ms, d.RetryAfter)
}

// TestQuotaOfAPanickingRule: a rule that panics while asked drops the key,
// as for any call, and Quota returns the error with no policy's quota.
func TestQuotaOfAPanickingRule(t *testing.T) {
	tab := newPanicsOnMarked("PeekN")
	allow(t, tab, "k", 0, 2) // marked
	q := Quota{Policies: make([]PolicyQuota, 3)}
	ok, err := tab.Quota("k", 0, &q)
	require.ErrorIs(t, err, actor.ErrAlgorithmPanic)
	assert.False(t, ok)
	assert.Empty(t, q.Policies)
	assert.False(t, held(tab, "k"))
	assert.Equal(t, uint64(1), tab.Counts(0).Panicked)
	checkWhole(t, tab, 0)
}
