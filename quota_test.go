package chanlimit_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// TestQuota: AllowQuota, PeekQuota and WaitQuota write what the key has
// under each policy with their decision; Policies is the same slice for
// the set on every call, and another for an override's; a request that
// fails leaves q empty, and a nil q asks for none.
func TestQuota(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "second", Algorithm: "fixed_window", Limit: 2, Window: time.Second},
		{Name: "minute", Algorithm: "fixed_window", Limit: 5, Window: time.Minute},
	}})
	ctx := context.Background()
	var q chanlimit.Quota
	d, err := r.AllowQuota(ctx, "k", 1, &q)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Len(t, q.Policies, 2)
	assert.Equal(t, "second", q.Policies[0].Name)
	assert.Equal(t, []chanlimit.PolicyQuota{{Policy: 0, Remaining: 1, More: time.Second}, {Policy: 1, Remaining: 4, More: time.Minute}}, q.Each)
	first := &q.Policies[0]

	d, err = r.PeekQuota(ctx, "k", 1, &q)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Same(t, first, &q.Policies[0], "the same slice for the set")
	assert.Equal(t, 1, q.Each[0].Remaining, "a peek takes nothing")

	wctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	d, err = r.WaitQuota(wctx, "k", 1, &q)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 0, q.Each[0].Remaining)

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // shorter than the wait, longer than the call
	defer cancel()
	d, err = r.WaitQuota(short, "k", 1, &q) // its grant would come in a second
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, d.Allowed)
	assert.Positive(t, d.RetryAfter)
	require.Len(t, q.Each, 2, "a wait refused at once says what the key has")
	assert.Equal(t, 3, q.Each[1].Remaining, "two of the minute's five taken")

	_, err = r.AllowQuota(ctx, "k", 3, &q)
	require.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)
	assert.Nil(t, q.Policies)
	assert.Empty(t, q.Each)

	require.NoError(t, r.SetOverride(ctx, "vip", chanlimit.Policy{Name: "vip", Limit: 100, Window: time.Second}))
	_, err = r.AllowQuota(ctx, "vip", 1, &q)
	require.NoError(t, err)
	require.Len(t, q.Policies, 1)
	assert.Equal(t, "vip", q.Policies[0].Name)
	assert.Equal(t, 99, q.Each[0].Remaining)

	d, err = r.AllowQuota(ctx, "other", 1, nil)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	clk.Advance(time.Second)
}

// peekExits is a fixed window whose PeekN calls runtime.Goexit while
// armed: a quota's asking of each policy then ends the partition's
// goroutine, after the request's decision.
type peekExits struct {
	*algorithms.FixedWindow
	armed *atomic.Bool
}

func (m peekExits) PeekN(s *algorithms.FixedWindowState, now time.Duration, n int, d *chanlimit.Decision) {
	if m.armed.Load() {
		runtime.Goexit()
	}
	m.FixedWindow.PeekN(s, now, n, d)
}

// TestQuotaOfARuleThatExits: a request whose quota's asking ends the
// goroutine fails with ErrAlgorithmPanic, and its Quota is empty. Before,
// its Policies were set beside the error.
func TestQuotaOfARuleThatExits(t *testing.T) {
	armed := new(atomic.Bool)
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) peekExits { return peekExits{fw, armed} })
	r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 10, Window: time.Minute})
	ctx := context.Background()
	armed.Store(true)
	var q chanlimit.Quota
	_, err := r.AllowQuota(ctx, "k", 1, &q)
	armed.Store(false)
	require.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	assert.Nil(t, q.Policies)
	assert.Empty(t, q.Each)
}

// TestQuotaRefusing: the policies that refuse a request, the deciding
// one first, then each other whose own quota is short of n; none for an
// allowance, a hold's denial, or a quota that tells nothing of the
// deciding policy.
func TestQuotaRefusing(t *testing.T) {
	q := &chanlimit.Quota{
		Policies: []chanlimit.Policy{{Name: "second"}, {Name: "hour"}, {Name: "day"}},
		Each:     []chanlimit.PolicyQuota{{Policy: 0, Remaining: 0}, {Policy: 1, Remaining: 1}, {Policy: 2, Remaining: 90}},
	}
	denied := func(policy string) chanlimit.Decision {
		return chanlimit.Decision{Policy: policy, RetryAfter: time.Second}
	}
	assert.Equal(t, []chanlimit.PolicyQuota{{Policy: 1, Remaining: 1}, {Policy: 0, Remaining: 0}}, q.Refusing(denied("hour"), 2))
	assert.Equal(t, []chanlimit.PolicyQuota{{Policy: 0, Remaining: 0}}, q.Refusing(denied("second"), 1))
	assert.Nil(t, q.Refusing(chanlimit.Decision{Allowed: true, Policy: "second"}, 1))
	assert.Nil(t, q.Refusing(chanlimit.Decision{RetryAfter: time.Second}, 1), "a hold's denial: no policy")
	assert.Nil(t, (&chanlimit.Quota{Policies: q.Policies}).Refusing(denied("second"), 1), "nothing told of the deciding policy")
}
