package chanlimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// TestPoliciesOf: a key is under the router's policies until it has an
// override, under the override's until ClearOverride, and under the new
// router policies once SetPolicies has returned; a long key and a closed
// router are errors.
func TestPoliciesOf(t *testing.T) {
	second := chanlimit.Policy{Name: "second", Algorithm: "token_bucket", Limit: 5, Window: time.Second}
	hour := chanlimit.Policy{Name: "hour", Algorithm: "fixed_window", Limit: 100, Window: time.Hour}
	vip := chanlimit.Policy{Name: "vip", Algorithm: "gcra", Limit: 50, Window: time.Second, Burst: 60}
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{second, hour}, Partitions: 3, MaxKeyBytes: 8})

	got, err := r.PoliciesOf(bg, "a")
	require.NoError(t, err)
	assert.Equal(t, []chanlimit.Policy{second, hour}, got)

	require.NoError(t, r.SetOverride(bg, "b", vip))
	for _, key := range []string{"a", "c", "d", "e"} {
		got, err = r.PoliciesOf(bg, key)
		require.NoError(t, err)
		assert.Equal(t, []chanlimit.Policy{second, hour}, got, key)
	}
	got, err = r.PoliciesOf(bg, "b")
	require.NoError(t, err)
	assert.Equal(t, []chanlimit.Policy{vip}, got)

	require.NoError(t, r.SetPolicies(bg, hour))
	got, err = r.PoliciesOf(bg, "a")
	require.NoError(t, err)
	assert.Equal(t, []chanlimit.Policy{hour}, got)

	require.NoError(t, r.ClearOverride(bg, "b"))
	got, err = r.PoliciesOf(bg, "b")
	require.NoError(t, err)
	assert.Equal(t, []chanlimit.Policy{hour}, got)

	_, err = r.PoliciesOf(bg, strings.Repeat("k", 9))
	require.ErrorIs(t, err, chanlimit.ErrKeyTooLong)

	require.NoError(t, r.SetOverride(bg, "b", vip))
	require.NoError(t, r.Close())
	_, err = r.PoliciesOf(bg, "a")
	require.ErrorIs(t, err, chanlimit.ErrClosed)
}
