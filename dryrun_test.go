package chanlimit_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/model"
)

func TestDecisionDoesNotGrow(t *testing.T) {
	// Allowed and WouldDeny share the word before Limit.
	assert.Equal(t, unsafe.Sizeof(struct {
		b  bool
		i  int
		r  int
		d1 time.Duration
		d2 time.Duration
		d3 time.Duration
		s  string
	}{}), unsafe.Sizeof(chanlimit.Decision{}))
}

// dryTrio is three routers on one clock: with the enforced policies and
// the dry-run ones (both), with the enforced ones alone (enforced), and
// with the dry-run ones alone, enforced (shadow).
type dryTrio struct {
	both, enforced, shadow *chanlimit.Router
	clk                    *clock.Fake
	capacity               int // the enforced policies': a larger n is refused
}

func newDryTrio(t *testing.T, enforced, dry []chanlimit.Policy) *dryTrio {
	t.Helper()
	clk := clock.NewFake(epoch)
	mk := func(ps []chanlimit.Policy) *chanlimit.Router {
		if len(ps) == 0 {
			return nil
		}
		r, err := chanlimit.New(chanlimit.Config{Policies: ps, Clock: clk, Partitions: 1})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, r.Close()) })
		return r
	}
	var both []chanlimit.Policy
	both = append(both, enforced...)
	for _, p := range dry {
		p.DryRun = true
		both = append(both, p)
	}
	capacity := math.MaxInt
	for _, p := range enforced {
		capacity = min(capacity, cmp.Or(p.Burst, p.Limit))
	}
	return &dryTrio{both: mk(both), enforced: mk(enforced), shadow: mk(dry), clk: clk, capacity: capacity}
}

// check requires got, both's answer, to be enforced's answer want (or
// the all-allowing decision without enforced policies), with WouldDeny
// set exactly when shadow denied (or refused an n above its capacity).
func (tr *dryTrio) check(t *testing.T, what string, got chanlimit.Decision, err error, want chanlimit.Decision, wantErr error, shadow chanlimit.Decision, shadowErr error) {
	t.Helper()
	if tr.enforced == nil {
		want, wantErr = chanlimit.Decision{Allowed: true}, nil
	}
	require.Equal(t, wantErr == nil, err == nil, "%s: error %v, enforced alone %v", what, err, wantErr)
	if err != nil {
		require.Equal(t, chanlimit.Decision{}, got, what)
		return
	}
	if shadowErr != nil && !errors.Is(shadowErr, chanlimit.ErrExceedsCapacity) {
		require.NoError(t, shadowErr, what)
	}
	want.WouldDeny = shadowErr != nil || !shadow.Allowed
	require.Equal(t, want, got, what)
}

// step plays one request on the three: AllowN, Peek or a batch of three.
func (tr *dryTrio) step(t *testing.T, what string, rng *rand.Rand, n int) (wouldDeny int) {
	t.Helper()
	ask := func(r *chanlimit.Router, peek bool, n int) (chanlimit.Decision, error) {
		if r == nil {
			return chanlimit.Decision{}, nil
		}
		if peek {
			return r.Peek(bg, "k", n)
		}
		return r.AllowN(bg, "k", n)
	}
	switch rng.IntN(5) {
	case 0, 1, 2:
		peek := rng.IntN(4) == 0
		got, err := ask(tr.both, peek, n)
		want, wantErr := ask(tr.enforced, peek, n)
		var shadow chanlimit.Decision
		var shadowErr error
		if err == nil { // an n the enforced policies refuse is decided by none
			shadow, shadowErr = ask(tr.shadow, peek, n)
		}
		tr.check(t, fmt.Sprintf("%s: AllowN(%d) peek %v", what, n, peek), got, err, want, wantErr, shadow, shadowErr)
		if err == nil && got.WouldDeny && !peek {
			wouldDeny++
		}
	case 3:
		reqs := []chanlimit.Request{{Key: "k", N: n}, {Key: "k", N: 1}, {Key: "k", N: n}}
		got, want, shadow := make([]chanlimit.Decision, 3), make([]chanlimit.Decision, 3), make([]chanlimit.Decision, 3)
		err := tr.both.AllowBatch(bg, reqs, got)
		var wantErr error
		if tr.enforced != nil {
			wantErr = tr.enforced.AllowBatch(bg, reqs, want)
		}
		require.Equal(t, wantErr == nil, err == nil, "%s: batch", what)
		for k, req := range reqs {
			if req.N > tr.capacity { // refused: decided by none
				require.Equal(t, chanlimit.Decision{}, got[k], "%s: batch item %d (%d)", what, k, req.N)
				continue
			}
			d, err := ask(tr.shadow, false, req.N)
			shadow[k] = d
			tr.check(t, fmt.Sprintf("%s: batch item %d (%d)", what, k, req.N), got[k], nil, want[k], nil, shadow[k], err)
			if got[k].WouldDeny {
				wouldDeny++
			}
		}
	default:
		n := 1 + rng.IntN(2*n)
		require.NoError(t, tr.both.Refund(bg, "k", n))
		if tr.enforced != nil {
			require.NoError(t, tr.enforced.Refund(bg, "k", n))
		}
		require.NoError(t, tr.shadow.Refund(bg, "k", n))
	}
	return wouldDeny
}

// TestDryRunMatchesTheRoutersAlone: on random schedules, for every
// algorithm as an enforced policy beside every algorithm as a dry-run
// one (and two enforced beside one, and a dry-run one alone), a router
// with both decides, field by field, as a router with the enforced
// policies alone, and its WouldDeny says exactly what a router with the
// dry-run policy alone, enforced, decides. Stats.WouldDeny counts those
// decisions, not the peeks.
func TestDryRunMatchesTheRoutersAlone(t *testing.T) {
	names := model.Names()
	type combo struct {
		enforced, dry []string
	}
	var combos []combo
	for _, a := range names {
		for _, b := range names {
			combos = append(combos, combo{[]string{a}, []string{b}})
		}
		combos = append(combos, combo{nil, []string{a}}, combo{[]string{a, "fixed_window"}, []string{"sliding_window_log"}})
	}
	for ci, c := range combos {
		t.Run(fmt.Sprintf("%v+dry%v", c.enforced, c.dry), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci), 17))
			for s := range 3 {
				policy := func(name, algorithm string) chanlimit.Policy {
					p := policyParams(rng, algorithm)
					return chanlimit.Policy{Name: name, Algorithm: algorithm, Limit: p.Limit, Window: p.Window, Burst: p.Burst}
				}
				var enforced, dry []chanlimit.Policy
				for j, a := range c.enforced {
					enforced = append(enforced, policy(fmt.Sprint("e", j), a))
				}
				for j, a := range c.dry {
					dry = append(dry, policy(fmt.Sprint("d", j), a))
				}
				tr := newDryTrio(t, enforced, dry)
				window := time.Minute
				wouldDeny := 0
				for i := range 80 {
					switch rng.IntN(4) {
					case 0:
						tr.clk.Advance(time.Duration(rng.Int64N(int64(window))))
					case 1:
						tr.clk.Advance(time.Duration(rng.Int64N(int64(window)/50 + 1)))
					}
					n := 1 + rng.IntN(8) // past some capacities: refused, or WouldDeny
					wouldDeny += tr.step(t, fmt.Sprintf("schedule %d, step %d", s, i), rng, n)
				}
				st, err := tr.both.Stats(bg)
				require.NoError(t, err)
				assert.EqualValues(t, wouldDeny, st.WouldDeny, "schedule %d", s)
			}
		})
	}
}

// TestDryRunWaitN: a waiter waits for the enforced policies alone, and
// the dry-run one decides its grant, once.
func TestDryRunWaitN(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
			{Name: "second", Limit: 1, Window: time.Second},
			{Name: "shadow", Algorithm: "fixed_window", Limit: 2, Window: time.Hour, DryRun: true},
		}})
		var got []chanlimit.Decision
		for range 4 {
			ch := goWait(bg, r, "k", 1)
			w, ok := answer(ch)
			for !ok {
				advance(clk, 100*time.Millisecond)
				w, ok = answer(ch)
			}
			require.NoError(t, w.err)
			got = append(got, w.d)
		}
		for i, d := range got {
			assert.True(t, d.Allowed, "wait %d", i)
			assert.Equal(t, "second", d.Policy)
			assert.Equal(t, i >= 2, d.WouldDeny, "wait %d: the shadow's hour holds 2", i)
		}
		st, err := r.Stats(bg)
		require.NoError(t, err)
		assert.EqualValues(t, 2, st.WouldDeny)
		assert.EqualValues(t, 4, st.Allowed)
	})
}

// TestDryRunOnly: a key under dry-run policies alone is always allowed,
// with nothing else set, and ErrExceedsCapacity never comes.
func TestDryRunOnly(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "shadow", Limit: 2, Window: time.Hour, DryRun: true},
	}})
	want := []chanlimit.Decision{{Allowed: true}, {Allowed: true}, {Allowed: true, WouldDeny: true}, {Allowed: true, WouldDeny: true}}
	for i, n := range []int{1, 1, 1, 5} {
		d, err := r.AllowN(bg, "k", n)
		require.NoError(t, err)
		assert.Equal(t, want[i], d, "request %d of %d", i, n)
	}
	require.NoError(t, r.Refund(bg, "k", 1))
	assert.Equal(t, chanlimit.Decision{Allowed: true}, allowN(t, r, "k", 1), "the refund went to the shadow")
}

// TestDryRunSnapshots: a snapshot holds which policies are dry-run, the
// overrides' too, and restores where the shadow policy has since been
// promoted; a snapshot of the format before (testdata/version3.snapshot,
// taken at epoch + 10s of a router with policies second (token_bucket,
// 3/s) and minute (fixed_window, 5/min) that had allowed 2 on a, b and vip
// at epoch, vip under an override vip (gcra, 10/s), then 1 more on a)
// restores as it did.
func TestDryRunSnapshots(t *testing.T) {
	policies := []chanlimit.Policy{
		{Name: "second", Limit: 3, Window: time.Second},
		{Name: "minute", Algorithm: "fixed_window", Limit: 5, Window: time.Minute, DryRun: true},
	}
	src, clk := newRouter(t, chanlimit.Config{Policies: policies})
	require.NoError(t, src.SetOverride(bg, "vip", chanlimit.Policy{Name: "vip", Limit: 10, Window: time.Second, DryRun: true}))
	for range 3 {
		allowN(t, src, "a", 2)
		clk.Advance(time.Second)
	}
	var buf bytes.Buffer
	require.NoError(t, src.Snapshot(bg, &buf))

	dst, _ := newRouter(t, chanlimit.Config{Policies: policies})
	require.NoError(t, dst.Restore(bg, bytes.NewReader(buf.Bytes())))
	got, err := dst.PoliciesOf(bg, "vip")
	require.NoError(t, err)
	assert.Equal(t, []chanlimit.Policy{{Name: "vip", Algorithm: "token_bucket", Limit: 10, Window: time.Second, DryRun: true}}, got)
	assert.Equal(t, chanlimit.Decision{Allowed: true, WouldDeny: true, Limit: 3, Remaining: 1, ResetAfter: 666666667, Policy: "second"},
		allowN(t, dst, "a", 2), "the shadow minute holds the 6 units a took")

	promoted := []chanlimit.Policy{policies[0], policies[1]}
	promoted[1].DryRun = false
	enforcing, _ := newRouter(t, chanlimit.Config{Policies: promoted})
	require.NoError(t, enforcing.Restore(bg, bytes.NewReader(buf.Bytes())), "a shadow promoted keeps its state")
	assert.Equal(t, "minute", allowN(t, enforcing, "a", 2).Policy)

	v3, err := os.ReadFile("testdata/version3.snapshot")
	require.NoError(t, err)
	old, oldClk := newRouter(t, chanlimit.Config{Partitions: 3, Policies: []chanlimit.Policy{
		{Name: "second", Limit: 3, Window: time.Second},
		{Name: "minute", Algorithm: "fixed_window", Limit: 5, Window: time.Minute},
	}})
	oldClk.Set(epoch.Add(10 * time.Second))
	require.NoError(t, old.Restore(bg, bytes.NewReader(v3)))
	ps, err := old.PoliciesOf(bg, "vip")
	require.NoError(t, err)
	assert.Equal(t, []chanlimit.Policy{{Name: "vip", Algorithm: "gcra", Limit: 10, Window: time.Second}}, ps)
	d := allowN(t, old, "a", 3)
	assert.False(t, d.Allowed)
	assert.Equal(t, "minute", d.Policy, "a took 3 of minute's 5")
	assert.Equal(t, 2, d.Remaining)
	assert.True(t, allowN(t, old, "b", 3).Allowed)
}

// TestDryRunNeverAdvertisedOrWaitedFor: the quota of a key tells of its
// enforced policies alone.
func TestDryRunQuota(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "shadow", Limit: 1, Window: time.Hour, DryRun: true},
		{Name: "second", Limit: 5, Window: time.Second},
	}})
	var q chanlimit.Quota
	d, err := r.AllowQuota(context.Background(), "k", 1, &q)
	require.NoError(t, err)
	assert.Equal(t, "second", d.Policy)
	assert.Equal(t, []chanlimit.PolicyQuota{{Policy: 1, Remaining: 4, More: 200 * time.Millisecond}}, q.Each)
}
