package chanlimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// Adversarial tests of overrides: their count under cancellations, the
// cap on keys, expiry and Stats of keys under overrides.

// hasVIP reports whether key is under an override named "vip", by the
// policy that decides a Peek.
func hasVIP(t *testing.T, r *chanlimit.Router, key string) bool {
	t.Helper()
	return peekAt(t, r, key, 1).Policy == "vip"
}

// TestOverrideCountHoldsUnderCancellations: callers set and clear the
// overrides of 24 keys (across partitions) with contexts cancelled at
// random; Stats.Overrides is then the number of keys that really have one,
// never above MaxOverrides, and the router's own count agrees: exactly
// MaxOverrides - Stats.Overrides more can be set.
func TestOverrideCountHoldsUnderCancellations(t *testing.T) {
	const maxOverrides = 7
	vip := chanlimit.Policy{Name: "vip", Limit: 50, Window: time.Minute}
	vip2 := chanlimit.Policy{Name: "vip", Algorithm: "fixed_window", Limit: 40, Window: time.Minute}
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Minute, Partitions: 3, MailboxSize: 2, MaxOverrides: maxOverrides})
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 5))
			for range 400 {
				ctx, cancel := context.WithCancel(bg)
				if rng.IntN(2) == 0 {
					go cancel()
				}
				key := keys[rng.IntN(len(keys))]
				var err error
				switch rng.IntN(5) {
				case 0, 1:
					err = r.SetOverride(ctx, key, vip)
				case 2:
					err = r.SetOverride(ctx, key, vip2)
				case 3:
					err = r.ClearOverride(ctx, key)
				default:
					_, err = r.AllowN(ctx, key, 1)
				}
				cancel()
				if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, chanlimit.ErrTooManyOverrides) {
					t.Errorf("%s: %v", key, err)
				}
				// (Stats.Overrides is a sum of the partitions' counts, each
				// taken as its turn comes: while overrides change, it may
				// pass MaxOverrides without any instant having more. It
				// is checked once the changes are over.)
			}
		})
	}
	wg.Wait()
	have := 0
	for _, k := range keys {
		if hasVIP(t, r, k) {
			have++
		}
	}
	st := stats(t, r)
	assert.Equal(t, have, st.Overrides, "Stats.Overrides counts the keys that have one")
	assert.LessOrEqual(t, st.Overrides, maxOverrides)
	set := 0
	for i := range maxOverrides + 3 {
		err := r.SetOverride(bg, fmt.Sprint("fresh-", i), vip)
		if err == nil {
			set++
			continue
		}
		require.ErrorIs(t, err, chanlimit.ErrTooManyOverrides)
	}
	assert.Equal(t, maxOverrides-have, set, "the router's count is right: room for exactly the rest")
}

// TestOverrideKeysDoNotCountAgainstMaxKeys: keys with an override hold
// their states beside MaxKeys' share; a full partition still admits
// nothing new, and forgives no key.
func TestOverrideKeysDoNotCountAgainstMaxKeys(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Hour, Partitions: 1, MaxKeys: 3, MaxOverrides: 4})
	vip := chanlimit.Policy{Name: "vip", Limit: 9, Window: time.Hour}
	for i := range 3 {
		require.NoError(t, r.SetOverride(bg, fmt.Sprint("vip-", i), vip))
		require.True(t, allowN(t, r, fmt.Sprint("vip-", i), 4).Allowed)
	}
	for i := range 3 {
		require.True(t, allowN(t, r, fmt.Sprint("plain-", i), 2).Allowed, "MaxKeys counts the keys without an override")
	}
	_, err := r.AllowN(bg, "plain-3", 1)
	require.ErrorIs(t, err, chanlimit.ErrTooManyKeys)
	st := stats(t, r)
	assert.Equal(t, 6, st.Keys)
	assert.Equal(t, uint64(1), st.Refused)
	assert.Zero(t, st.Evicted)

	// A key that gets an override leaves MaxKeys' share: room for one.
	require.NoError(t, r.SetOverride(bg, "plain-0", vip))
	assert.Equal(t, 6, peekAt(t, r, "plain-0", 3).Remaining, "vip is a new name: plain-0 starts untouched under it")
	require.True(t, allowN(t, r, "plain-3", 1).Allowed)
	assert.Equal(t, 6, stats(t, r).Keys, "3 under vip, plain-1 to plain-3 (plain-0 holds nothing under vip)")
}

// TestClearOverrideIntoAFullPartition: a key whose override is cleared
// goes back under MaxKeys with its state. When its partition's share is
// held, the key is not forgiven: MaxKeys is passed, and no new key is
// admitted until the partition is below its share again.
func TestClearOverrideIntoAFullPartition(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Minute, Partitions: 1, MaxKeys: 2})
	require.NoError(t, r.SetOverride(bg, "vip", chanlimit.Policy{Name: "default", Limit: 5, Window: time.Minute}))
	require.True(t, allowN(t, r, "vip", 5).Allowed)
	require.True(t, allowN(t, r, "a", 1).Allowed)
	require.True(t, allowN(t, r, "b", 1).Allowed)
	require.NoError(t, r.ClearOverride(bg, "vip"))
	assert.False(t, peekAt(t, r, "vip", 1).Allowed, "vip kept its (empty) bucket")
	st := stats(t, r)
	assert.Equal(t, 3, st.Keys, "three keys under a MaxKeys of 2")
	_, err := r.AllowN(bg, "c", 1)
	assert.ErrorIs(t, err, chanlimit.ErrTooManyKeys)
	// a and b are idle again after 30s (a token each at 2 a minute); vip not.
	clk.Advance(30 * time.Second)
	_, err = r.AllowN(bg, "c", 1)
	assert.NoError(t, err, "two idle keys make room below the share")
	st = stats(t, r)
	assert.LessOrEqual(t, st.Keys+st.Idle, 2, "back within MaxKeys: %+v", st)
	d := peekAt(t, r, "vip", 1)
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 2, ResetAfter: time.Minute, Policy: "default"}, d,
		"vip is never forgiven: an empty bucket, refilled for 30s, has one token")
}

// TestOverrideKeysExpireInTurn: keys under ten overrides (ten tables)
// become idle and are let go, one table per burst in turn, while the
// router's table is busy too; Stats counts them in Keys, then in Idle.
func TestOverrideKeysExpireInTurn(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second, Partitions: 1, MaxOverrides: 10})
	for i := range 10 {
		key := fmt.Sprint("o", i)
		require.NoError(t, r.SetOverride(bg, key, chanlimit.Policy{Name: "vip", Limit: 10 + i, Window: time.Second}))
		for k := range 3 { // three keys of their own each
			require.True(t, allowN(t, r, fmt.Sprint(key, "-", k), 1).Allowed)
		}
		require.True(t, allowN(t, r, key, 1).Allowed)
	}
	assert.Equal(t, 10+30, stats(t, r).Keys)
	clk.Advance(time.Second) // all untouched, within their grace
	st := stats(t, r)
	assert.Zero(t, st.Keys)
	assert.Equal(t, 40, st.Idle)
	clk.Advance(2 * time.Second) // grace over
	for i := range 40 {
		allowN(t, r, fmt.Sprint("busy-", i), 2) // the router's table, busy: a new key each burst
		clk.Advance(time.Second)
	}
	st = stats(t, r)
	assert.LessOrEqual(t, st.Keys+st.Idle, 3, "only the latest busy keys are held: %+v", st)
	assert.Equal(t, uint64(40+40-st.Keys-st.Idle), st.Expired, "every key under an override was let go: %+v", st)
	assert.Equal(t, 10, st.Overrides)
	for i := range 10 {
		assert.Equal(t, 9+i, allowN(t, r, fmt.Sprint("o", i), 1).Remaining, "o%d: under its override, untouched", i)
	}
}

// TestResetAndClearOverrideMidTraffic: Reset of a key with an override,
// and SetOverride/ClearOverride, racing with its traffic on a frozen
// clock: the override stays through Resets; every grant is under the
// policy the decision names, and Reset aside, no grant is lost or doubled:
// the router's count of allowed equals what the callers were told.
func TestResetAndClearOverrideMidTraffic(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Hour, Partitions: 2, MaxOverrides: 1})
	vip := chanlimit.Policy{Name: "vip", Limit: 1000, Window: time.Hour}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total uint64
	)
	for range 4 {
		wg.Go(func() {
			for range 300 {
				d, err := r.AllowN(bg, "k", 1)
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					mu.Lock()
					total++
					mu.Unlock()
				}
				if d.Policy != "vip" && d.Policy != "default" {
					t.Errorf("decided by %q", d.Policy)
				}
			}
		})
	}
	for i := range 200 {
		switch i % 4 {
		case 0:
			require.NoError(t, r.SetOverride(bg, "k", vip))
		case 1:
			require.NoError(t, r.Reset(bg, "k"))
		case 2:
			require.NoError(t, r.ClearOverride(bg, "k"))
		default:
			require.NoError(t, r.Reset(bg, "k"))
		}
	}
	wg.Wait()
	st := stats(t, r)
	assert.Equal(t, total, st.Allowed)
	assert.Equal(t, 0, st.Overrides, "the last change cleared it")
	assert.Zero(t, st.Panicked)
}

// TestEvictLRUFloodWithOverridesChanging: a flood of new keys with
// EvictLRU while overrides are set and cleared on keys that hold state:
// the keys under an override keep theirs, never evicted; the router's
// table never holds more than its share for long (a cleared key comes
// back over it, and the next new key evicts down to the share).
func TestEvictLRUFloodWithOverridesChanging(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 4, Window: time.Hour, Partitions: 2, MaxKeys: 10, EvictLRU: true, MaxOverrides: 4})
	vip := chanlimit.Policy{Name: "vip", Limit: 100, Window: time.Hour}
	for i := range 4 {
		require.NoError(t, r.SetOverride(bg, fmt.Sprint("vip-", i), vip))
		require.True(t, allowN(t, r, fmt.Sprint("vip-", i), 10*(i+1)).Allowed)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for k := range 3000 {
			if _, err := r.AllowN(bg, fmt.Sprint("flood-", k), 1); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 50 {
		require.NoError(t, r.ClearOverride(bg, "vip-3"))
		require.NoError(t, r.SetOverride(bg, "vip-3", vip))
	}
	wg.Wait()
	for i := range 4 {
		d := peekAt(t, r, fmt.Sprint("vip-", i), 1)
		if i < 3 {
			assert.Equal(t, 100-10*(i+1)-1, d.Remaining, "vip-%d kept its state", i)
		}
	}
	allowN(t, r, "last-a", 1)
	allowN(t, r, "last-b", 1)
	st := stats(t, r)
	assert.LessOrEqual(t, st.Keys, 10+4, "%+v", st)
	assert.Equal(t, 4, st.Overrides)
	assert.Positive(t, st.Evicted)
}

// TestBatchCapacityIsPerKeyWithOverrides: in one batch, an n within an
// override's capacity but above the router's is allowed on the key with
// the override and refused alone on a key without; the refusal names the
// policy of the smallest capacity, and takes nothing.
func TestBatchCapacityIsPerKeyWithOverrides(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "small", Limit: 2, Window: time.Second},
		{Name: "big", Algorithm: "fixed_window", Limit: 9, Window: time.Second},
	}, Partitions: 2, MaxOverrides: 1})
	require.NoError(t, r.SetOverride(bg, "vip", chanlimit.Policy{Name: "big", Algorithm: "fixed_window", Limit: 9, Window: time.Second}))
	reqs := []chanlimit.Request{{"plain", 1}, {"vip", 5}, {"plain", 5}, {"vip", 4}, {"plain", 1}, {"vip", 1}}
	out := make([]chanlimit.Decision, len(reqs))
	err := r.AllowBatch(bg, reqs, out)
	require.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)
	assert.ErrorContains(t, err, "request 2")
	assert.ErrorContains(t, err, `policy "small"`)
	assert.Equal(t, []bool{true, true, false, true, true, false}, []bool{out[0].Allowed, out[1].Allowed, out[2].Allowed, out[3].Allowed, out[4].Allowed, out[5].Allowed})
	assert.Equal(t, chanlimit.Decision{}, out[2], "refused: a zero Decision")
	assert.Equal(t, chanlimit.Decision{Limit: 9, RetryAfter: time.Second, ResetAfter: time.Second, Policy: "big"}, out[5], "vip took 9 of 9")
	assert.Equal(t, 0, out[4].Remaining, "plain took 1 and 1 of small's 2: the refused 5 took nothing")
	st := stats(t, r)
	assert.Equal(t, uint64(4), st.Allowed)
	assert.Equal(t, uint64(1), st.Denied)
	_, err = r.Peek(bg, "vip", 10)
	assert.ErrorContains(t, err, "capacity 9")
	_, err = r.Peek(bg, "plain", 3)
	assert.ErrorContains(t, err, "capacity 2")
}
