package chanlimit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// wrappedBucket is a rule of one's own that wraps token_bucket, as the
// supervision tests' rules wrap fixed_window: it adds nothing, but embeds
// *algorithms.TokenBucket, whose Adopt it thereby has.
type wrappedBucket struct{ *algorithms.TokenBucket }

// TestCarryAWrappedBuiltInUnderEqualPolicies: a rule that embeds a
// built-in Machine is an Adopter by the embedded method; a change to equal
// Params must change no decision (Adopter's contract), so SetPolicies of
// the same policies, or an override of the same policies, forgives no key.
func TestCarryAWrappedBuiltInUnderEqualPolicies(t *testing.T) {
	name := fmt.Sprint("test_wrapped_", registrations.Add(1))
	require.NoError(t, chanlimit.Register[algorithms.TokenBucketState](name, func(p algorithms.Params) (wrappedBucket, error) {
		tb, err := algorithms.NewTokenBucket(p)
		return wrappedBucket{tb}, err
	}))
	p := chanlimit.Policy{Name: "w", Algorithm: name, Limit: 3, Window: time.Hour}
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{p}, Partitions: 1})
	require.True(t, allowN(t, r, "k", 3).Allowed)
	require.False(t, peekAt(t, r, "k", 1).Allowed)
	require.NoError(t, r.SetPolicies(bg, p))
	assert.False(t, peekAt(t, r, "k", 1).Allowed, "SetPolicies of the same policy forgave the key")
	require.NoError(t, r.SetOverride(bg, "k", p))
	assert.False(t, peekAt(t, r, "k", 1).Allowed, "an override of the same policy forgave the key")
}
