package chanlimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// TestStoreRefund: with a Store, a refund is made in the store, as the
// same refund in memory is; a waiter on the key is granted by it.
func TestStoreRefund(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clk := clock.NewFake(storeStart)
		st := newMemStore(clk, FailClosed)
		r, err := New(Config{Limit: 3, Window: time.Hour, Clock: clk, Store: st})
		require.NoError(t, err)
		defer r.Close()
		mem, err := New(Config{Limit: 3, Window: time.Hour, Clock: clk})
		require.NoError(t, err)
		defer mem.Close()
		for _, l := range []*Router{r, mem} {
			_, err := l.AllowN(ctx, "k", 3)
			require.NoError(t, err)
		}
		clk.Advance(time.Minute)
		for _, l := range []*Router{r, mem} {
			require.NoError(t, l.Refund(ctx, "k", 2))
			require.NoError(t, l.Refund(ctx, "nobody", 2))
		}
		for _, key := range []string{"k", "nobody"} {
			a, aerr := mem.Peek(ctx, key, 3)
			b, berr := r.Peek(ctx, key, 3)
			require.NoError(t, aerr)
			require.NoError(t, berr)
			assert.Equal(t, a, b, key)
		}
		st.mu.Lock()
		assert.Equal(t, 1, st.byKey["k"][StoreRefund], "the refund went to the store")
		st.mu.Unlock()

		waited := make(chan error, 1)
		go func() {
			_, err := r.WaitN(ctx, "k", 3)
			waited <- err
		}()
		synctest.Wait()
		require.NoError(t, r.Refund(ctx, "k", 1))
		synctest.Wait()
		select {
		case err := <-waited:
			require.NoError(t, err)
		default:
			t.Fatal("the waiter was not granted by the refund")
		}
	})
}

// TestStoreRefundFails: a refund the store cannot take fails, whatever the
// FailMode, and is never made on the local keys, which did not grant it.
func TestStoreRefundFails(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []FailMode{FailClosed, FailOpen, FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := clock.NewFake(storeStart)
			st := newMemStore(clk, mode)
			r, err := New(Config{Limit: 2, Window: time.Hour, Clock: clk, Store: st})
			require.NoError(t, err)
			defer r.Close()
			st.down.Store(true)
			if mode == FailLocal {
				_, err := r.AllowN(ctx, "k", 2) // the local keys grant it
				require.NoError(t, err)
			}
			err = r.Refund(ctx, "k", 1)
			require.ErrorIs(t, err, ErrStoreUnavailable)
			require.ErrorIs(t, err, errDown)
			if mode == FailLocal {
				d, err := r.AllowN(ctx, "k", 1)
				require.NoError(t, err)
				assert.False(t, d.Allowed, "the local keys got nothing back")
			}
			s, err := r.Stats(ctx)
			require.NoError(t, err)
			assert.NotZero(t, s.StoreErrors)
		})
	}
}
