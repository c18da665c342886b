package chanlimit

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// TestStoreHold: a router on a Store holds through it (StoreHold), so
// another router on the same store holds the key too; d <= 0 is sent
// nowhere.
func TestStoreHold(t *testing.T) {
	clk := clock.NewFake(storeStart)
	store := newMemStore(clk, FailClosed)
	cfg := Config{Limit: 2, Window: time.Second, Clock: clk, Store: store}
	one, err := New(cfg)
	require.NoError(t, err)
	defer one.Close()
	other, err := New(cfg)
	require.NoError(t, err)
	defer other.Close()
	ctx := context.Background()

	require.NoError(t, one.Hold(ctx, "k", 0))
	assert.Zero(t, store.kinds[StoreHold].Load(), "a hold of 0 is sent nowhere")
	require.NoError(t, one.Hold(ctx, "k", 3*time.Second))
	d, err := other.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, Decision{RetryAfter: 3 * time.Second, ResetAfter: 3 * time.Second}, d, "held for the other router too")
	clk.Advance(3 * time.Second)
	d, err = other.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

// refusingHold is a store that cannot hold.
type refusingHold struct{ *memStore }

func (s refusingHold) Decide(ctx context.Context, ops []StoreOp) {
	var others []StoreOp
	var at []int
	for i := range ops {
		if ops[i].Kind == StoreHold {
			ops[i].Err = errors.ErrUnsupported
			continue
		}
		others, at = append(others, ops[i]), append(at, i)
	}
	s.memStore.Decide(ctx, others)
	for k, i := range at {
		ops[i] = others[k]
	}
}

// TestStoreHoldUnsupported: a store that cannot hold makes Hold return
// an error wrapping errors.ErrUnsupported, whatever the FailMode, and
// holds nothing.
func TestStoreHoldUnsupported(t *testing.T) {
	for _, mode := range []FailMode{FailClosed, FailOpen, FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := clock.NewFake(storeStart)
			r, err := New(Config{Limit: 2, Window: time.Second, Clock: clk, Store: refusingHold{newMemStore(clk, mode)}})
			require.NoError(t, err)
			defer r.Close()
			ctx := context.Background()
			err = r.Hold(ctx, "k", time.Second)
			require.ErrorIs(t, err, errors.ErrUnsupported)
			assert.NotErrorIs(t, err, ErrStoreUnavailable, "the store answered")
			d, err := r.AllowN(ctx, "k", 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed)
			st, err := r.Stats(ctx)
			require.NoError(t, err)
			assert.Zero(t, st.StoreErrors)
		})
	}
}

// TestStoreHoldWithALine: a request on a key held whose line has waiters
// is denied as a hold's denial (no policy, no Limit), as in memory, and
// is counted under no policy.
func TestStoreHoldWithALine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(storeStart)
		r, err := New(Config{Limit: 1, Window: time.Second, Clock: clk, Store: newMemStore(clk, FailClosed)})
		require.NoError(t, err)
		defer r.Close()
		ctx := context.Background()
		d, err := r.AllowN(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		done := make(chan error, 1)
		go func() {
			_, err := r.WaitN(ctx, "k", 1)
			done <- err
		}()
		synctest.Wait()
		require.NoError(t, r.Hold(ctx, "k", 5*time.Second))
		clk.Advance(time.Second) // the head's turn: denied by the hold
		synctest.Wait()
		d, err = r.AllowN(ctx, "k", 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Empty(t, d.Policy)
		assert.Zero(t, d.Limit)
		clk.Advance(4 * time.Second)
		synctest.Wait()
		require.NoError(t, <-done, "the waiter, at the hold's end")
		st, err := r.Stats(ctx)
		require.NoError(t, err)
		for _, p := range st.Policies {
			assert.Zero(t, p.Denied, p.Name)
		}
	})
}
