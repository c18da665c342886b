package chanlimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// Adversarial tests of the errors of SetPolicies, SetOverride,
// ClearOverride and New with policies, against their doc comments and
// README: each is the error said, names the policy and the field, and
// changes nothing.

// TestPolicyErrorsNameThePolicyAndTheField: each bad policy, in New,
// SetPolicies and SetOverride, is an ErrInvalidConfig whose message names
// the method (or Policies), the policy's index and name, and the field.
func TestPolicyErrorsNameThePolicyAndTheField(t *testing.T) {
	good := chanlimit.Policy{Name: "ok", Limit: 1, Window: time.Second}
	tests := []struct {
		name  string
		bad   chanlimit.Policy
		field string
	}{
		{"ZeroLimit", chanlimit.Policy{Name: "x", Window: time.Second}, "Limit: must be > 0 (got 0)"},
		{"NegativeLimit", chanlimit.Policy{Name: "x", Limit: -3, Window: time.Second}, "Limit: must be > 0 (got -3)"},
		{"ZeroWindow", chanlimit.Policy{Name: "x", Limit: 1}, "Window: must be > 0 (got 0s)"},
		{"NegativeBurst", chanlimit.Policy{Name: "x", Limit: 1, Window: time.Second, Burst: -1}, "Burst: must be >= 0"},
		{"BurstOnAWindow", chanlimit.Policy{Name: "x", Algorithm: "sliding_window_log", Limit: 1, Window: time.Second, Burst: 2}, "Burst"},
		{"Unknown", chanlimit.Policy{Name: "x", Algorithm: "nope", Limit: 1, Window: time.Second}, `Algorithm: "nope" is not registered`},
		{"ControlInName", chanlimit.Policy{Name: "x\x7f", Limit: 1, Window: time.Second}, "Name: "},
		{"RefusedByConstructor", chanlimit.Policy{Name: "x", Algorithm: "test_refuses", Limit: 1, Window: time.Second}, "not today"},
		{"ConstructorPanics", chanlimit.Policy{Name: "x", Algorithm: "test_panics", Limit: 1, Window: time.Second}, "boom"},
		{"NoCapacity", chanlimit.Policy{Name: "x", Algorithm: "test_no_capacity", Limit: 1, Window: time.Second}, "Capacity is 0"},
	}
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{good}, MaxOverrides: 1})
	require.True(t, allowN(t, r, "k", 1).Allowed)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{good, tt.bad}})
			require.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
			where := fmt.Sprintf("[1] (%q): ", tt.bad.Name)
			assert.ErrorContains(t, err, "Policies"+where)
			assert.ErrorContains(t, err, tt.field)
			for method, call := range map[string]func() error{
				"SetPolicies": func() error { return r.SetPolicies(bg, good, tt.bad) },
				"SetOverride": func() error { return r.SetOverride(bg, "k", good, tt.bad) },
			} {
				err := call()
				require.ErrorIs(t, err, chanlimit.ErrInvalidConfig, method)
				assert.ErrorContains(t, err, "invalid config: "+method+where, method)
				assert.ErrorContains(t, err, tt.field, method)
			}
		})
	}
	assert.Equal(t, []chanlimit.Policy{{Name: "ok", Algorithm: "token_bucket", Limit: 1, Window: time.Second}}, r.Policies())
	st := stats(t, r)
	assert.Zero(t, st.Overrides)
	assert.Zero(t, st.Panicked, "a constructor's panic in a refused policy is no partition's")
	assert.False(t, peekAt(t, r, "k", 1).Allowed, "k's state is as it was")
	require.NoError(t, r.SetOverride(bg, "k", good), "MaxOverrides' room was not taken by the refusals")
}

// TestAdministrativeCallsOnAClosedRouter: SetPolicies, SetOverride and
// ClearOverride return ErrClosed once the router is closed; bad input is
// still reported first, as it is by AllowN.
func TestAdministrativeCallsOnAClosedRouter(t *testing.T) {
	r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second, Partitions: 3})
	require.NoError(t, err)
	require.NoError(t, r.Close())
	p := chanlimit.Policy{Limit: 2, Window: time.Second}
	assert.ErrorIs(t, r.SetPolicies(bg, p), chanlimit.ErrClosed)
	assert.ErrorIs(t, r.SetOverride(bg, "k", p), chanlimit.ErrClosed)
	assert.ErrorIs(t, r.ClearOverride(bg, "k"), chanlimit.ErrClosed)
	assert.ErrorIs(t, r.SetPolicies(bg), chanlimit.ErrInvalidConfig)
	assert.ErrorIs(t, r.SetOverride(bg, strings.Repeat("k", chanlimit.DefaultMaxKeyBytes+1), p), chanlimit.ErrKeyTooLong)
	assert.Equal(t, 1, r.Policies()[0].Limit, "SetPolicies of a closed router switched nothing: it has one partition... or none")
}

// TestAdministrativeCallsWithADoneContext: a ctx done before the call
// returns ctx.Err() (wrapped), and SetPolicies then changes nothing.
func TestAdministrativeCallsWithADoneContext(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Partitions: 3})
	require.True(t, allowN(t, r, "k", 1).Allowed)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	p := chanlimit.Policy{Name: "new", Limit: 5, Window: time.Second}
	for range 20 { // admin's select may take the token: both ways
		assert.ErrorIs(t, r.SetPolicies(ctx, p), context.Canceled)
		assert.ErrorIs(t, r.SetOverride(ctx, "k", p), context.Canceled)
		assert.ErrorIs(t, r.ClearOverride(ctx, "k"), context.Canceled)
	}
	assert.Equal(t, "default", r.Policies()[0].Name)
	assert.False(t, peekAt(t, r, "k", 1).Allowed, "k's state and policies are as they were")
	assert.Zero(t, stats(t, r).Overrides)

	// An administrative call waiting for another one's token gives up
	// when its ctx ends.
	ctx, cancel = context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	require.NoError(t, r.SetOverride(ctx, "k", p))
	assert.Equal(t, 1, stats(t, r).Overrides)
}

// TestTooManyOverridesNamesTheCap: ErrTooManyOverrides says the cap;
// changing the override of a key that has one, or clearing it, is never
// refused at the cap.
func TestTooManyOverridesNamesTheCap(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Partitions: 2, MaxOverrides: 2})
	p := chanlimit.Policy{Name: "vip", Limit: 5, Window: time.Second}
	require.NoError(t, r.SetOverride(bg, "a", p))
	require.NoError(t, r.SetOverride(bg, "b", p))
	err := r.SetOverride(bg, "c", p)
	require.ErrorIs(t, err, chanlimit.ErrTooManyOverrides)
	assert.ErrorContains(t, err, "MaxOverrides is 2")
	require.NoError(t, r.SetOverride(bg, "a", p), "the same override again")
	require.NoError(t, r.SetOverride(bg, "a", chanlimit.Policy{Name: "vip", Limit: 6, Window: time.Second}), "another override")
	require.NoError(t, r.ClearOverride(bg, "c"), "a key without one")
	assert.Equal(t, 2, stats(t, r).Overrides)
}

// TestNewPoliciesWithSingleFieldsSet: any single field set beside Policies
// is an ErrInvalidConfig, Window and Algorithm included.
func TestNewPoliciesWithSingleFieldsSet(t *testing.T) {
	ps := []chanlimit.Policy{{Limit: 1, Window: time.Second}}
	for name, cfg := range map[string]chanlimit.Config{
		"Algorithm": {Algorithm: "gcra", Policies: ps},
		"Window":    {Window: time.Second, Policies: ps},
		"Limit":     {Limit: 1, Policies: ps},
		"Burst":     {Burst: 1, Policies: ps},
	} {
		_, err := chanlimit.New(cfg)
		assert.ErrorIs(t, err, chanlimit.ErrInvalidConfig, name)
		assert.ErrorContains(t, err, "both set", name)
	}
	_, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{}})
	assert.ErrorIs(t, err, chanlimit.ErrInvalidConfig, "an empty Policies is no limit")
}
