package chanlimit

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// holdStore is a memStore that holds each call with an op on key, while
// holding is set, until it is released (a token on release) or the test
// ends: a store slow on one key. It counts the refunds it is asked for,
// grants given back (StoreGiveBack) included, whether it answers them or
// not.
type holdStore struct {
	*memStore
	key     string
	kind    StoreOpKind // if set, only ops of that kind are held
	holding atomic.Bool
	release chan struct{}
	held    atomic.Int64
	refunds atomic.Int64
}

func newHoldStore(clk clock.Clock, mode FailMode, key string) *holdStore {
	s := &holdStore{memStore: newMemStore(clk, mode), key: key, release: make(chan struct{})}
	s.holding.Store(true)
	return s
}

func (s *holdStore) Decide(ctx context.Context, ops []StoreOp) {
	for _, op := range ops {
		if op.Kind == StoreRefund || op.Kind == StoreGiveBack {
			s.refunds.Add(1)
		}
	}
	for _, op := range ops {
		if op.Key == s.key && s.holding.Load() && (s.kind == 0 || op.Kind == s.kind) {
			s.held.Add(1)
			select {
			case <-s.release:
			case <-s.quit:
			}
			break
		}
	}
	s.memStore.Decide(ctx, ops)
}

// routerOn returns a router with cfg on store, whose memStore is m,
// closed (and m's held calls let go) when the test ends.
func routerOn(t *testing.T, m *memStore, store Store, cfg Config) *Router {
	t.Helper()
	cfg.Store = store
	r, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		close(m.quit) // nothing stays held, if the test failed
		_ = r.Close()
	})
	return r
}

// returns reports whether f, run on a goroutine of its own, has returned
// once every goroutine of the bubble is blocked.
func returns(f func()) bool {
	var done atomic.Bool
	go func() {
		f()
		done.Store(true)
	}()
	synctest.Wait()
	return done.Load()
}

// TestStoreSlowKeyStallsNoOther: while the store is slow on one key, the
// other keys of its partition are served: no round trip on that key (a
// WaitN's grant, its line's head, the quota of a grant, a refund) runs on
// the partition's goroutine. Each case failed before: AllowN on "fast"
// waited for "slow".
func TestStoreSlowKeyStallsNoOther(t *testing.T) {
	for _, c := range []struct {
		name string
		slow func(t *testing.T, r *Router, st *holdStore) // sets a call on "slow" out, held
	}{
		{"a WaitN granted at once", func(t *testing.T, r *Router, st *holdStore) {
			go func() { _, _ = r.WaitN(context.Background(), "slow", 1) }()
		}},
		{"the head of a line, due", func(t *testing.T, r *Router, st *holdStore) {
			st.holding.Store(false)
			d, err := r.AllowN(context.Background(), "slow", 2)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			st.holding.Store(true)
			go func() { _, _ = r.WaitN(context.Background(), "slow", 1) }() // denied, then due in 1 s
			synctest.Wait()
			st.release <- struct{}{} // the first decision, a denial
			synctest.Wait()
			time.Sleep(time.Second) // synctest's clock: the line is due
		}},
		{"the quota of a grant", func(t *testing.T, r *Router, st *holdStore) {
			st.kind = StorePeek // the grant goes by; the peek of one more unit is held
			go func() {
				var q Quota
				_, _ = r.AllowQuota(context.Background(), "slow", 1, &q)
			}()
		}},
		{"the refund of a caller that left", func(t *testing.T, r *Router, st *holdStore) {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { _, _ = r.AllowN(ctx, "slow", 1) }()
			synctest.Wait()
			cancel()
			synctest.Wait()
			st.release <- struct{}{} // the grant lands; its caller has left
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newHoldStore(clock.Real(), FailClosed, "slow")
				r := routerOn(t, st.memStore, st, Config{Limit: 2, Window: time.Second, Partitions: 1})
				c.slow(t, r, st)
				synctest.Wait()
				require.Positive(t, st.held.Load(), "a call on slow is held")
				assert.True(t, returns(func() {
					d, err := r.AllowN(context.Background(), "fast", 1)
					assert.NoError(t, err)
					assert.True(t, d.Allowed)
				}), "AllowN on another key returns while the store holds slow")
			})
		})
	}
}

// TestStoreRefundGoesWhereGrantCame: a grant the FailMode made because the
// store failed (FailOpen's, FailLocal's) is never given back to the
// store, which never took it, when its caller has left: FailLocal gives
// it back to its local keys, FailOpen to nobody. Before, both sent the
// store a refund.
func TestStoreRefundGoesWhereGrantCame(t *testing.T) {
	for _, mode := range []FailMode{FailOpen, FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newHoldStore(clock.Real(), mode, "k")
				st.down.Store(true)
				r := routerOn(t, st.memStore, st, Config{Limit: 3, Window: time.Hour, Partitions: 1})
				ctx, cancel := context.WithCancel(context.Background())
				go func() { _, _ = r.AllowN(ctx, "k", 1) }()
				synctest.Wait()
				cancel() // the caller leaves while its call is out
				synctest.Wait()
				st.holding.Store(false)
				st.release <- struct{}{} // the store fails it: the FailMode grants it
				synctest.Wait()
				assert.Zero(t, st.refunds.Load(), "no refund to the store, which granted nothing")

				d, err := r.AllowN(context.Background(), "k", 1)
				require.NoError(t, err)
				assert.True(t, d.Allowed)
				if mode == FailLocal {
					assert.Equal(t, 2, d.Remaining, "the local keys got their grant back")
				}
			})
		})
	}
}

// TestStoreParkedBehindHead: while a line's head is out to the store, a
// request on its key that does not join the line waits behind it, and is
// decided once the head has been: after the waiter's grant, not before.
func TestStoreParkedBehindHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newHoldStore(clock.Real(), FailClosed, "k")
		r := routerOn(t, st.memStore, st, Config{Limit: 2, Window: time.Hour, Partitions: 1})
		ctx := context.Background()
		waited := make(chan Decision, 1)
		go func() {
			d, err := r.WaitN(ctx, "k", 1)
			assert.NoError(t, err)
			waited <- d
		}()
		synctest.Wait()
		require.EqualValues(t, 1, st.held.Load(), "the head is out")
		var d Decision
		require.False(t, returns(func() {
			var err error
			d, err = r.AllowN(ctx, "k", 1)
			assert.NoError(t, err)
		}), "AllowN on the key waits behind its line's head")
		st.holding.Store(false)
		st.release <- struct{}{}
		synctest.Wait()
		assert.Equal(t, 1, (<-waited).Remaining, "the waiter first")
		assert.True(t, d.Allowed)
		assert.Zero(t, d.Remaining, "then AllowN, after it")
	})
}

// TestStoreHeadLeftWhileOut: a waiter that leaves while its decision is
// out to the store takes nothing: the store's grant, when it lands, is
// given back to the store.
func TestStoreHeadLeftWhileOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newHoldStore(clock.Real(), FailClosed, "k")
		r := routerOn(t, st.memStore, st, Config{Limit: 2, Window: time.Hour, Partitions: 1})
		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan error, 1)
		go func() {
			_, err := r.WaitN(ctx, "k", 1)
			left <- err
		}()
		synctest.Wait()
		cancel()
		synctest.Wait()
		require.ErrorIs(t, <-left, context.Canceled)
		st.holding.Store(false)
		st.release <- struct{}{} // granted, to nobody
		synctest.Wait()
		assert.EqualValues(t, 1, st.refunds.Load(), "given back to the store")
		d, err := r.Peek(context.Background(), "k", 2)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "nothing taken: %+v", d)
		s, err := r.Stats(context.Background())
		require.NoError(t, err)
		assert.Zero(t, s.Waiting)
	})
}

// TestStoreFirstWaiterDeadline: through a store, a WaitN whose wait would
// pass its deadline fails at once (as soon as its first decision lands)
// with an error matching context.DeadlineExceeded, takes nothing, and
// counts as a denial.
func TestStoreFirstWaiterDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(clock.Real(), FailClosed)
		r, err := New(Config{Limit: 1, Window: time.Hour, Partitions: 1, Store: st})
		require.NoError(t, err)
		defer r.Close()
		require.True(t, r.Allow("k"))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		_, err = r.WaitN(ctx, "k", 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Zero(t, time.Since(start), "at once, not at the deadline")
		s, err := r.Stats(context.Background())
		require.NoError(t, err)
		assert.EqualValues(t, 1, s.Denied)
		assert.Zero(t, s.Waiting)
	})
}

// TestStoreTries: a pipeline's tries through a store go out in a trip
// as a batch's items do: an item granted at once stands; one that would
// wait its turn (leaky_bucket's Delay) is left not Allowed, having taken
// nothing in the store (a turn takes only when it is granted), so there
// is nothing to give back; one on a key with a line is answered as in
// line.
func TestStoreTries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newHoldStore(clock.Real(), FailClosed, "lined")
		st.holding.Store(false)
		r := routerOn(t, st.memStore, st, Config{Algorithm: "leaky_bucket", Limit: 2, Window: time.Second, Partitions: 1})
		ctx := context.Background()
		require.True(t, r.Allow("later")) // its next unit's turn is 500 ms away
		require.True(t, r.Allow("lined"))
		go func() { _, _ = r.WaitN(ctx, "lined", 1) }() // it waits its turn, 500 ms
		synctest.Wait()
		refunds := st.refunds.Load()

		reqs := []Request{{Key: "now", N: 1}, {Key: "later", N: 1}, {Key: "lined", N: 1}}
		out, errs := make([]Decision, 3), make([]error, 3)
		require.NoError(t, r.TryWaitEach(ctx, reqs, out, errs))
		assert.Equal(t, []error{nil, nil, nil}, errs)
		assert.True(t, out[0].Allowed, "granted at once")
		assert.False(t, out[1].Allowed, "its turn is to come")
		assert.False(t, out[2].Allowed, "behind the line")
		assert.Positive(t, out[2].RetryAfter)
		assert.Equal(t, refunds, st.refunds.Load(), "later's turn took nothing: nothing given back")
		d, err := r.Peek(ctx, "later", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, 500*time.Millisecond, d.Delay, "later has one unit queued, as before the try: %+v", d)
	})
}

// TestStoreWaitQuotaLeavesWhileItsPeekIsHeld: a WaitQuota granted on a
// Store whose quota's peek is held returns its context's error as soon as
// the context ends, and its grant is given back once the peek lands.
// Before, the caller's leave found no waiter in the line and passed by:
// the caller waited for the peek, however long the store held it, and
// returned the grant long past its deadline.
func TestStoreWaitQuotaLeavesWhileItsPeekIsHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newHoldStore(clock.Real(), FailClosed, "k")
		st.kind = StorePeek // the grant goes by; the peek of one more unit is held
		r := routerOn(t, st.memStore, st, Config{Limit: 3, Window: time.Hour, Partitions: 1})
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan error, 1)
		go func() {
			var q Quota
			_, err := r.WaitQuota(ctx, "k", 1, &q)
			got <- err
		}()
		synctest.Wait()
		require.EqualValues(t, 1, st.held.Load(), "the grant's quota peek is held")
		cancel()
		synctest.Wait()
		select {
		case err := <-got:
			assert.ErrorIs(t, err, context.Canceled)
		default:
			t.Fatal("WaitQuota did not return when its context ended")
		}
		st.holding.Store(false)
		close(st.release)
		synctest.Wait()
		d, err := r.Peek(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.Equal(t, 2, d.Remaining, "the grant was given back: 3 units, less the peek's 1")
		assert.EqualValues(t, 1, st.refunds.Load())
	})
}

// TestStoreTryOnAFullLine: through a Store too, a try on a key whose line
// is full fails with ErrTooManyWaiters.
func TestStoreTryOnAFullLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(clock.Real(), FailClosed)
		r := routerOn(t, st, st, Config{Limit: 1, Window: time.Hour, Partitions: 1, MaxWaiters: 1})
		ctx := context.Background()
		require.True(t, r.Allow("k"))
		go func() { _, _ = r.WaitN(ctx, "k", 1) }()
		synctest.Wait()
		out, errs := make([]Decision, 1), make([]error, 1)
		require.NoError(t, r.TryWaitEach(ctx, []Request{{Key: "k", N: 1}}, out, errs))
		assert.ErrorIs(t, errs[0], ErrTooManyWaiters)
	})
}

// TestStoreQuotaPoliciesAreNotTheOps: a caller who writes to a Quota's
// Policies (which nobody may) changes nothing a Store enforces. Before,
// the ops to the store carried that very slice: a key limited to 1 an
// hour was allowed 5 of 5 once a caller had raised its Limit.
func TestStoreQuotaPoliciesAreNotTheOps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(clock.Real(), FailClosed)
		r := routerOn(t, st, st, Config{Limit: 1, Window: time.Hour, Partitions: 1})
		ctx := context.Background()
		var q Quota
		_, err := r.AllowQuota(ctx, "a", 1, &q)
		require.NoError(t, err)
		q.Policies[0].Limit = 1000
		allowed := 0
		for range 5 {
			if r.Allow("b") {
				allowed++
			}
		}
		assert.Equal(t, 1, allowed, "the store enforces the router's policies")
	})
}
