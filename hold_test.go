package chanlimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// held returns the denial a hold gives, with its wait.
func held(retryAfter, resetAfter time.Duration) chanlimit.Decision {
	return chanlimit.Decision{RetryAfter: retryAfter, ResetAfter: resetAfter}
}

// TestHoldIsExactForEveryAlgorithm: while a key is held, Allow and Peek
// deny it with the wait until the same request is allowed, the hold's
// end or, if the key's policies deny it then, their wait from the end;
// it is denied a nanosecond before that, and allowed at it, having taken
// nothing meanwhile: a twin router, never held, decides the same from then on.
func TestHoldIsExactForEveryAlgorithm(t *testing.T) {
	for _, algorithm := range registered {
		for _, c := range []struct {
			name  string
			taken int           // units taken before the hold
			hold  time.Duration // the hold's length
		}{
			{"Fresh", 0, 1500 * time.Millisecond},
			{"Touched", 1, 300 * time.Millisecond},
			{"ExhaustedLongHold", 3, 5 * time.Second},
			{"ExhaustedShortHold", 3, 100 * time.Millisecond},
		} {
			t.Run(algorithm+"/"+c.name, func(t *testing.T) {
				cfg := chanlimit.Config{Algorithm: algorithm, Limit: 3, Window: time.Second}
				r, clk := newRouter(t, cfg)
				twin, twinClk := newRouter(t, cfg)
				for _, rt := range []*chanlimit.Router{r, twin} {
					if c.taken > 0 {
						exhaust(t, rt, "k", c.taken)
					}
				}
				clk.Advance(10 * time.Millisecond)
				twinClk.Advance(10 * time.Millisecond)
				require.NoError(t, r.Hold(bg, "k", c.hold))

				// The policies' own wait at the hold's end, from the twin.
				twinClk.Advance(c.hold)
				atEnd := peekAt(t, twin, "k", 2)
				want := c.hold
				if !atEnd.Allowed {
					want += atEnd.RetryAfter
				}
				got := peekAt(t, r, "k", 2)
				assert.Equal(t, want, got.RetryAfter, "Peek's wait")
				assert.False(t, got.Allowed)
				assert.Zero(t, got.Remaining)
				assert.Zero(t, got.Limit)
				assert.Empty(t, got.Policy)
				assert.GreaterOrEqual(t, got.ResetAfter, c.hold, "a key held is not untouched before the hold's end")
				d := allowN(t, r, "k", 2)
				assert.Equal(t, got, d, "AllowN denies as Peek says")

				clk.Advance(want - time.Nanosecond)
				d = allowN(t, r, "k", 2)
				require.False(t, d.Allowed, "1ns before the wait")
				assert.Equal(t, time.Nanosecond, d.RetryAfter)
				clk.Advance(time.Nanosecond)
				twinClk.Advance(want - c.hold)
				assert.Equal(t, allowN(t, twin, "k", 2), allowN(t, r, "k", 2), "at the wait, as if never held: nothing was taken")
				assert.Equal(t, peekAt(t, twin, "k", 1), peekAt(t, r, "k", 1))
			})
		}
	}
}

// TestHoldOnlyMovesLater: a shorter hold changes nothing, a longer one
// moves the end, and a hold of 0 or less changes nothing, making no key.
func TestHoldOnlyMovesLater(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
	require.NoError(t, r.Hold(bg, "k", 5*time.Second))
	clk.Advance(time.Second)
	require.NoError(t, r.Hold(bg, "k", time.Second))
	assert.Equal(t, 4*time.Second, peekAt(t, r, "k", 1).RetryAfter, "a shorter hold changes nothing")
	require.NoError(t, r.Hold(bg, "k", 6*time.Second))
	assert.Equal(t, 6*time.Second, peekAt(t, r, "k", 1).RetryAfter, "a longer one moves the end")
	for _, d := range []time.Duration{0, -time.Second} {
		require.NoError(t, r.Hold(bg, "other", d))
		assert.True(t, peekAt(t, r, "other", 1).Allowed, "a hold of %v changes nothing", d)
	}
	st, err := r.Stats(bg)
	require.NoError(t, err)
	assert.Zero(t, st.Keys+st.Idle, "a hold is no key's state")
	assert.Zero(t, st.Denied, "peeks count nowhere")

	clk.Advance(6*time.Second - time.Nanosecond)
	assert.False(t, allowN(t, r, "k", 1).Allowed)
	clk.Advance(time.Nanosecond)
	assert.True(t, allowN(t, r, "k", 1).Allowed)
}

// TestHoldEndsWithReset: Reset ends a hold, as it drops the key's state.
func TestHoldEndsWithReset(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
	exhaust(t, r, "k", 2)
	require.NoError(t, r.Hold(bg, "k", time.Hour))
	assert.False(t, allowN(t, r, "k", 1).Allowed)
	require.NoError(t, r.Reset(bg, "k"))
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: time.Second, Policy: "default"}, allowN(t, r, "k", 3))
}

// TestHoldErrors: a Hold fails as AllowN does.
func TestHoldErrors(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second, MaxKeyBytes: 4})
	require.ErrorIs(t, r.Hold(bg, strings.Repeat("k", 5), time.Second), chanlimit.ErrKeyTooLong)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	require.ErrorIs(t, r.Hold(ctx, "k", time.Second), context.Canceled)
	assert.True(t, peekAt(t, r, "k", 1).Allowed, "not held")
	require.NoError(t, r.Close())
	require.ErrorIs(t, r.Hold(bg, "k", time.Second), chanlimit.ErrClosed)
}

// TestHoldWaitersKeepTheirPlaces: callers waiting on a key held are
// served from the hold's end, in order, each exactly at its turn, and a
// caller that comes meanwhile is denied with its wait behind them.
func TestHoldWaitersKeepTheirPlaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		exhaust(t, r, "k", 1)
		a := goWait(bg, r, "k", 1) // due at 1s
		b := goWait(bg, r, "k", 1) // due at 2s
		require.Equal(t, 2, waiting(t, r))
		require.NoError(t, r.Hold(bg, "k", 5*time.Second))

		d := allowN(t, r, "k", 1)
		assert.Equal(t, 7*time.Second, d.RetryAfter, "behind the two, after the hold")
		assert.Zero(t, d.Limit)

		advance(clk, 5*time.Second-time.Nanosecond)
		_, done := answer(a)
		require.False(t, done, "1ns before the hold's end")
		advance(clk, time.Nanosecond)
		w, done := answer(a)
		require.True(t, done, "the head at the hold's end")
		require.NoError(t, w.err)
		assert.True(t, w.d.Allowed)
		_, done = answer(b)
		require.False(t, done)
		advance(clk, time.Second-time.Nanosecond)
		_, done = answer(b)
		require.False(t, done, "1ns before its turn")
		advance(clk, time.Nanosecond)
		w, done = answer(b)
		require.True(t, done, "the next, a second later")
		assert.True(t, w.d.Allowed)
		assert.Zero(t, waiting(t, r))
	})
}

// TestHoldWaitBeyondTheDeadline: a WaitN whose deadline comes before the
// hold's end is refused at once, as for any wait past its deadline.
func TestHoldWaitBeyondTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
		require.NoError(t, r.Hold(bg, "k", time.Minute))
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		d, err := r.WaitN(ctx, "k", 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Minute, d.RetryAfter)
		st, err := r.Stats(bg)
		require.NoError(t, err)
		assert.Equal(t, uint64(1), st.Denied)
	})
}

// TestHoldBatchAndDryRun: a batch's items on a key held are denied and
// take nothing, the others decided as ever; a dry-run policy decides
// nothing on a key held, so counts no would-deny; Stats counts the
// denials, TopDenied and the policies' counts do not (no policy denied).
func TestHoldBatchAndDryRun(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "enforced", Limit: 3, Window: time.Second},
		{Name: "shadow", Limit: 1, Window: time.Second, DryRun: true},
	}})
	require.NoError(t, r.Hold(bg, "k", time.Second))
	out := make([]chanlimit.Decision, 4)
	require.NoError(t, r.AllowBatch(bg, []chanlimit.Request{{Key: "k", N: 1}, {Key: "j", N: 1}, {Key: "k", N: 2}, {Key: "j", N: 1}}, out))
	assert.Equal(t, held(time.Second, time.Second), out[0])
	assert.True(t, out[1].Allowed)
	assert.Equal(t, held(time.Second, time.Second), out[2])
	assert.True(t, out[3].Allowed)
	assert.True(t, out[3].WouldDeny, "the dry-run policy decides j's as ever")
	_, err := r.AllowN(bg, "k", 4)
	require.ErrorIs(t, err, chanlimit.ErrExceedsCapacity, "errors first, held or not")

	st, err := r.Stats(bg)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), st.Denied)
	assert.Equal(t, uint64(1), st.WouldDeny, "j's alone")
	for _, p := range st.Policies {
		assert.Zero(t, p.Denied, p.Name)
	}
	top, err := r.TopDenied(bg, 10)
	require.NoError(t, err)
	assert.Empty(t, top, "no policy denied k")

	clk.Advance(time.Second)
	d := allowN(t, r, "k", 3)
	assert.True(t, d.Allowed, "the enforced policy had everything left")
	assert.True(t, d.WouldDeny, "and the dry-run one counted nothing: 3 > its 1")
}

// TestHoldQuotaTellsThePolicies: the Quota methods report each policy's
// own state on a key held.
func TestHoldQuotaTellsThePolicies(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
	exhaust(t, r, "k", 1)
	require.NoError(t, r.Hold(bg, "k", time.Minute))
	var q chanlimit.Quota
	d, err := r.AllowQuota(bg, "k", 1, &q)
	require.NoError(t, err)
	assert.Equal(t, time.Minute, d.RetryAfter)
	require.Len(t, q.Each, 1)
	assert.Equal(t, 2, q.Each[0].Remaining, "the policy's own")
}

// TestHoldPinsTheKey: a key held is never evicted to make room, so its
// state and its hold stay; a hold on a new key needs room as a request
// does, and holds count under MaxKeys.
func TestHoldPinsTheKey(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Minute, MaxKeys: 2, Partitions: 1, EvictLRU: true})
	exhaust(t, r, "a", 2)
	require.NoError(t, r.Hold(bg, "a", time.Second))
	exhaust(t, r, "b", 1)
	exhaust(t, r, "c", 1) // evicts b, the least recently used but for a, held
	assert.Equal(t, time.Second, peekAt(t, r, "a", 1).RetryAfter, "a is held still")
	clk.Advance(time.Second)
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 3, ResetAfter: time.Minute - time.Second, Policy: "default"}, peekAt(t, r, "a", 1), "and keeps what it took")
	st, err := r.Stats(bg)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.Evicted)

	require.NoError(t, r.Hold(bg, "x", time.Hour))
	require.NoError(t, r.Hold(bg, "y", time.Hour))
	require.ErrorIs(t, r.Hold(bg, "z", time.Hour), chanlimit.ErrTooManyKeys, "two holds fill MaxKeys 2")
	require.NoError(t, r.Hold(bg, "x", 2*time.Hour), "a key held already needs no room")

	full, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Minute, MaxKeys: 1, Partitions: 1})
	exhaust(t, full, "a", 1)
	require.ErrorIs(t, full.Hold(bg, "b", time.Second), chanlimit.ErrTooManyKeys, "no room for b, as AllowN would find")
	require.NoError(t, full.Hold(bg, "a", time.Second), "a has its room")
}

// TestHoldEndedMakesRoom: holds that ended are let go, and make room for
// others.
func TestHoldEndedMakesRoom(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Minute, MaxKeys: 1, Partitions: 1, EvictLRU: true})
	require.NoError(t, r.Hold(bg, "x", time.Second))
	require.ErrorIs(t, r.Hold(bg, "y", time.Second), chanlimit.ErrTooManyKeys)
	clk.Advance(time.Second)
	require.NoError(t, r.Hold(bg, "y", time.Second), "x's hold ended")
	assert.True(t, peekAt(t, r, "x", 1).Allowed)
}

// TestHoldNotInSnapshots: a snapshot leaves holds out, and Restore drops
// those of the router it restores.
func TestHoldNotInSnapshots(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
	exhaust(t, r, "k", 1)
	require.NoError(t, r.Hold(bg, "k", time.Hour))
	require.NoError(t, r.Hold(bg, "j", time.Hour))
	var buf bytes.Buffer
	require.NoError(t, r.Snapshot(bg, &buf))
	saved := buf.Bytes()

	fresh, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
	require.NoError(t, fresh.Restore(bg, bytes.NewReader(saved)))
	assert.Equal(t, 1, peekAt(t, fresh, "k", 1).Remaining, "k's state, and no hold")
	assert.True(t, peekAt(t, fresh, "j", 1).Allowed)

	require.NoError(t, r.Restore(bg, bytes.NewReader(saved)))
	assert.True(t, peekAt(t, r, "k", 1).Allowed, "Restore drops the holds")
}

// TestHoldOutlivesPolicyChanges: a hold is the key's, not its policies':
// it stays when the key gets an override, loses it, or the router's
// policies are switched, and the wait after it is the new policies'.
func TestHoldOutlivesPolicyChanges(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
	require.NoError(t, r.Hold(bg, "k", 10*time.Second))
	require.NoError(t, r.SetOverride(bg, "k", chanlimit.Policy{Name: "vip", Limit: 9, Window: time.Second}))
	assert.Equal(t, held(10*time.Second, 10*time.Second), allowN(t, r, "k", 9), "held under its override")
	require.NoError(t, r.ClearOverride(bg, "k"))
	require.NoError(t, r.SetPolicies(bg, chanlimit.Policy{Name: "slow", Algorithm: "fixed_window", Limit: 1, Window: time.Minute}))
	clk.Advance(5 * time.Second)
	assert.Equal(t, held(5*time.Second, 5*time.Second), allowN(t, r, "k", 1), "held under the new policies")
	clk.Advance(5 * time.Second)
	d := allowN(t, r, "k", 1)
	assert.True(t, d.Allowed)
	assert.Equal(t, "slow", d.Policy)
}

// TestHoldWaitQuota: a wait refused at once on a key held tells the key's
// quota, each policy's own, as any wait refused at once does.
func TestHoldWaitQuota(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
	exhaust(t, r, "k", 1)
	require.NoError(t, r.Hold(bg, "k", time.Minute))
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	var q chanlimit.Quota
	d, err := r.WaitQuota(ctx, "k", 1, &q)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, time.Minute, d.RetryAfter)
	require.Len(t, q.Each, 1)
	assert.Equal(t, 2, q.Each[0].Remaining)
}

// TestHoldLogged: LogDecisions logs a denial by a hold as a denial.
func TestHoldLogged(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second, Observe: chanlimit.LogDecisions(l)})
	require.NoError(t, r.Hold(bg, "k", time.Minute))
	require.False(t, allowN(t, r, "k", 1).Allowed)
	assert.Contains(t, buf.String(), "allowed=false")
	assert.Contains(t, buf.String(), "retry_after=1m0s")
}

// TestHoldRuleThatExits: a rule that ends the goroutine while a key held
// is decided (its peek at the hold's end) fails that request alone, and
// drops the key, counted, as when it does so on any key.
func TestHoldRuleThatExits(t *testing.T) {
	armed := new(atomic.Bool)
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) peekExits { return peekExits{fw, armed} })
	r, clk := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Minute, Partitions: 1})
	exhaust(t, r, "k", 1)
	require.NoError(t, r.Hold(bg, "k", time.Second))
	armed.Store(true)
	_, err := r.AllowN(bg, "k", 2)
	armed.Store(false)
	require.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	st, err := r.Stats(bg)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.Panicked)
	clk.Advance(time.Second)
	assert.Equal(t, 2, allowN(t, r, "k", 1).Remaining, "the key was dropped")
}

// TestHoldAKeyWithItsRoom: a key in its partition's table has its room,
// and is held however many keys are held without a state.
func TestHoldAKeyWithItsRoom(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Minute, MaxKeys: 2, Partitions: 1})
	require.NoError(t, r.Hold(bg, "x", time.Hour))
	require.NoError(t, r.Hold(bg, "y", time.Hour))
	exhaust(t, r, "a", 1)
	require.NoError(t, r.Hold(bg, "a", time.Second))
	assert.Equal(t, time.Second, peekAt(t, r, "a", 1).RetryAfter)
}

// TestHoldAndResetGrowNothing: holding a key and resetting it, again and
// again, keeps the partition's holds to what is held.
func TestHoldAndResetGrowNothing(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Minute, Partitions: 1})
	var before, after runtime.MemStats
	cycle := func(n int) {
		for range n {
			require.NoError(t, r.Hold(bg, "k", time.Hour))
			require.NoError(t, r.Reset(bg, "k"))
		}
	}
	cycle(1000)
	runtime.GC()
	runtime.ReadMemStats(&before)
	cycle(100_000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	assert.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(1<<20), "100,000 holds let go keep under 1 MiB")
}
