package redislimit_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/redislimit"
)

// ceilMicro rounds d up to the next microsecond, as the store's waits are.
func ceilMicro(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

// same requires a Redis-backed decision to be the in-memory one, its
// waits rounded up to the microsecond.
func same(t *testing.T, mem, red chanlimit.Decision, msg string, args ...any) {
	t.Helper()
	mem.RetryAfter, mem.ResetAfter, mem.Delay = ceilMicro(mem.RetryAfter), ceilMicro(mem.ResetAfter), ceilMicro(mem.Delay)
	require.Equalf(t, mem, red, msg, args...)
}

var parityPolicies = map[string][]chanlimit.Policy{
	"token_bucket":           {{Algorithm: "token_bucket", Limit: 7, Window: 3 * time.Second, Burst: 5}},
	"gcra":                   {{Algorithm: "gcra", Limit: 10, Window: time.Second, Burst: 4}},
	"leaky_bucket":           {{Algorithm: "leaky_bucket", Limit: 3, Window: time.Second, Burst: 6}},
	"sliding_window_log":     {{Algorithm: "sliding_window_log", Limit: 6, Window: 2 * time.Second}},
	"sliding_window_counter": {{Algorithm: "sliding_window_counter", Limit: 9, Window: 1500 * time.Millisecond}},
	"fixed_window":           {{Algorithm: "fixed_window", Limit: 5, Window: time.Second}},
	"two policies": {
		{Name: "second", Algorithm: "sliding_window_counter", Limit: 4, Window: time.Second},
		{Name: "minute", Algorithm: "token_bucket", Limit: 30, Window: time.Minute, Burst: 8},
	},
	"odd window": {{Algorithm: "sliding_window_counter", Limit: 7, Window: 999_983 * time.Microsecond}},
	// Dry-run policies: beside one that enforces, alone, and beside two.
	"dry-run beside": {
		{Name: "second", Algorithm: "token_bucket", Limit: 4, Window: time.Second},
		{Name: "shadow", Algorithm: "sliding_window_log", Limit: 2, Window: time.Second, DryRun: true},
	},
	"dry-run alone": {{Name: "shadow", Algorithm: "fixed_window", Limit: 3, Window: time.Second, DryRun: true}},
	"dry-run of two": {
		{Name: "shadow", Algorithm: "gcra", Limit: 2, Window: time.Second, DryRun: true},
		{Name: "second", Algorithm: "sliding_window_counter", Limit: 5, Window: time.Second},
		{Name: "minute", Algorithm: "leaky_bucket", Limit: 30, Window: time.Minute, Burst: 6},
	},
	// Large counts, where the counter's rounding to the nanosecond turns
	// at other instants than to the microsecond.
	"large counter": {{Algorithm: "sliding_window_counter", Limit: 5003, Window: 700 * time.Millisecond}},
	"large bucket":  {{Algorithm: "token_bucket", Limit: 100_000, Window: time.Hour, Burst: 3000}},
	// Units of one microsecond's refill (the script divides by neither
	// perUs nor perToken when it is 1), and of several.
	"fine bucket": {{Algorithm: "token_bucket", Limit: 2_000_000, Window: time.Second, Burst: 30}},
	"fine gcra":   {{Algorithm: "gcra", Limit: 1_000_000, Window: time.Second, Burst: 5}},
}

// TestParity: random schedules of requests, refunds and resets on the
// fake clock, through a router in memory and one on Redis, get the same
// decisions: the same Allowed,
// Remaining, Limit and Policy, and the same waits rounded up to the
// microsecond.
func TestParity(t *testing.T) {
	for name, policies := range parityPolicies {
		t.Run(name, func(t *testing.T) {
			parity(t, single(t), policies, 1500, uint64(len(name)), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
		})
	}
}

// TestParityNearTheEpoch: the same, on a clock that starts 100 ms after
// 1970, within a Window of it: an instant is then as small as a state's
// counts, and a fresh state must not take one for the other.
func TestParityNearTheEpoch(t *testing.T) {
	for name, policies := range parityPolicies {
		t.Run(name, func(t *testing.T) {
			parity(t, single(t), policies, 300, uint64(len(name)), time.Unix(0, 100_000_000))
		})
	}
}

// TestParityCluster runs a shorter schedule through the Cluster.
func TestParityCluster(t *testing.T) {
	parity(t, cluster(t), parityPolicies["two policies"], 500, 7, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
}

func parity(t *testing.T, client redis.UniversalClient, policies []chanlimit.Policy, steps int, seed uint64, start time.Time) {
	ctx := context.Background()
	clk := clock.NewFake(start)
	mem, err := chanlimit.New(chanlimit.Config{Policies: policies, Clock: clk})
	require.NoError(t, err)
	defer mem.Close()
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	red, err := chanlimit.New(chanlimit.Config{Policies: policies, Clock: clk, Store: st})
	require.NoError(t, err)
	defer red.Close()

	rng := rand.New(rand.NewPCG(seed, 42))
	keys := []string{"a", "b", "{c}", ""}
	capacity, dryOnly := math.MaxInt, true // the enforced policies': past a dry-run one's, it would deny
	for _, p := range policies {
		dryOnly = dryOnly && p.DryRun
	}
	for _, p := range policies {
		c := p.Limit
		if p.Burst > 0 {
			c = p.Burst
		}
		if !p.DryRun || dryOnly {
			capacity = min(capacity, c)
		}
	}
	held := 0
	for step := range steps {
		key := keys[rng.IntN(len(keys))]
		n := 1 + rng.IntN(min(capacity, 3))
		if rng.IntN(3) == 0 {
			n = 1 + rng.IntN(capacity) // large limits are reached too
		}
		switch k := rng.IntN(20); {
		case k < 3:
			// Whole microseconds: some steps short, some past a window.
			clk.Advance(time.Duration(rng.IntN(300_000)+1) * time.Microsecond)
		case k == 3:
			clk.Advance(time.Duration(rng.IntN(3_000_000)) * time.Microsecond)
		case k == 7:
			// Round steps, to land on the instants where the rules' rounding
			// turns (a weight of a whole number of units).
			b := []int64{1, 2, 3, 4, 5, 10}[rng.IntN(6)]
			a := 1 + rng.Int64N(b)
			clk.Advance((policies[0].Window * time.Duration(a) / time.Duration(b)).Truncate(time.Microsecond))
		case k == 10 && rng.IntN(2) == 0 && clk.Now().Sub(start) >= 50*time.Millisecond:
			// A step back, as a wall clock may take: a key's state is then
			// ahead of now, and its waits count from its own instant.
			clk.Advance(-time.Duration(rng.IntN(50_000)+1) * time.Microsecond)
		case k == 4:
			require.NoError(t, mem.Reset(ctx, key))
			require.NoError(t, red.Reset(ctx, key))
		case k == 11 && rng.IntN(3) == 0:
			// A hold, of whole microseconds: short, or past a window.
			d := time.Duration(rng.IntN(2_000_000)+1) * time.Microsecond
			require.NoError(t, mem.Hold(ctx, key, d))
			require.NoError(t, red.Hold(ctx, key, d), "step %d: Hold(%q, %v)", step, key, d)
			held++
		case k == 8 || k == 9:
			if rng.IntN(4) == 0 {
				n = capacity + 1 + rng.IntN(3) // more than a key ever took: no more than an untouched key has
			}
			require.NoError(t, mem.Refund(ctx, key, n))
			require.NoError(t, red.Refund(ctx, key, n), "step %d: Refund(%q, %d)", step, key, n)
		case k == 5:
			a, aerr := mem.Peek(ctx, key, n)
			b, berr := red.Peek(ctx, key, n)
			require.NoError(t, aerr)
			require.NoError(t, berr)
			same(t, a, b, "step %d: Peek(%q, %d)", step, key, n)
		case k == 6:
			reqs := make([]chanlimit.Request, 1+rng.IntN(6))
			for i := range reqs {
				reqs[i] = chanlimit.Request{Key: keys[rng.IntN(len(keys))], N: 1 + rng.IntN(min(capacity, 2))}
			}
			a, b := make([]chanlimit.Decision, len(reqs)), make([]chanlimit.Decision, len(reqs))
			require.NoError(t, mem.AllowBatch(ctx, reqs, a))
			require.NoError(t, red.AllowBatch(ctx, reqs, b))
			for i := range reqs {
				same(t, a[i], b[i], "step %d: AllowBatch item %d %+v", step, i, reqs[i])
			}
		default:
			a, aerr := mem.AllowN(ctx, key, n)
			b, berr := red.AllowN(ctx, key, n)
			require.NoError(t, aerr)
			require.NoError(t, berr)
			same(t, a, b, "step %d: AllowN(%q, %d)", step, key, n)
		}
	}
	s, err := red.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, s.StoreErrors)
	// The schedule went both ways.
	require.Greater(t, s.Allowed, uint64(steps/50), "allowed")
	if dryOnly {
		require.Greater(t, s.WouldDeny, uint64(steps/50), "would deny")
	} else {
		require.Greater(t, s.Denied, uint64(steps/50), "denied")
	}
	m, err := mem.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, m.Allowed, s.Allowed)
	require.Equal(t, m.WouldDeny, s.WouldDeny)
	require.Positive(t, held, "holds")
	t.Logf("%d allowed, %d denied, %d holds", s.Allowed, s.Denied, held)
}

// TestParityEdges: each algorithm, filled to its capacity, then asked at
// the instants where its arithmetic turns: a window's end, its half, a
// microsecond either side.
func TestParityEdges(t *testing.T) {
	client := single(t)
	for name, policies := range parityPolicies {
		w := policies[0].Window
		for _, step := range []time.Duration{w, w / 2, w - time.Microsecond, w + time.Microsecond, 2 * w, w / 3} {
			t.Run(name+"/"+step.String(), func(t *testing.T) {
				ctx := context.Background()
				clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
				mem, err := chanlimit.New(chanlimit.Config{Policies: policies, Clock: clk})
				require.NoError(t, err)
				defer mem.Close()
				st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t)})
				require.NoError(t, err)
				red, err := chanlimit.New(chanlimit.Config{Policies: policies, Clock: clk, Store: st})
				require.NoError(t, err)
				defer red.Close()
				for i := range 3 {
					for j := range 12 {
						a, aerr := mem.AllowN(ctx, "k", 1)
						b, berr := red.AllowN(ctx, "k", 1)
						require.NoError(t, aerr)
						require.NoError(t, berr)
						same(t, a, b, "round %d, request %d", i, j)
					}
					clk.Advance(step.Truncate(time.Microsecond))
				}
			})
		}
	}
}

// TestParityCounterWaits: a sliding_window_counter with a large previous
// window, asked for every n at a few instants: the waits, rounded to the
// microsecond from the nanosecond, match for each.
func TestParityCounterWaits(t *testing.T) {
	ctx := context.Background()
	p := []chanlimit.Policy{{Algorithm: "sliding_window_counter", Limit: 5003, Window: 700 * time.Millisecond}}
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	mem, err := chanlimit.New(chanlimit.Config{Policies: p, Clock: clk})
	require.NoError(t, err)
	defer mem.Close()
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	red, err := chanlimit.New(chanlimit.Config{Policies: p, Clock: clk, Store: st})
	require.NoError(t, err)
	defer red.Close()
	for _, r := range []*chanlimit.Router{mem, red} {
		d, err := r.AllowN(ctx, "k", 5003)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	for _, step := range []time.Duration{700 * time.Millisecond, 123_457 * time.Microsecond, 299_999 * time.Microsecond} {
		clk.Advance(step)
		for n := 1; n <= 5003; n += 1 + n/1000 {
			a, aerr := mem.Peek(ctx, "k", n)
			b, berr := red.Peek(ctx, "k", n)
			require.NoError(t, aerr)
			require.NoError(t, berr)
			same(t, a, b, "after %v: Peek(%d)", step, n)
		}
	}
}

// TestParityTies: two policies whose waits round up to the same
// microsecond name, as in memory, the one whose wait is longer in
// nanoseconds. A bucket with a token every 2.5 µs and a window of 3 µs,
// both spent: their waits, 2.5 µs and 3 µs, both say 3 µs; memory names
// the window. The same for a sliding_window_counter's waits, rounded up
// from the nanosecond, beside other algorithms'. Before, Redis named the
// first policy on such a tie ("bucket, window" and "counter, log"
// failed).
func TestParityTies(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		policies []chanlimit.Policy
	}{
		{"bucket, window", []chanlimit.Policy{
			{Name: "bucket", Algorithm: "token_bucket", Limit: 2, Window: 5 * time.Microsecond, Burst: 1},
			{Name: "window", Algorithm: "fixed_window", Limit: 1, Window: 3 * time.Microsecond},
		}},
		{"window, bucket", []chanlimit.Policy{
			{Name: "window", Algorithm: "fixed_window", Limit: 1, Window: 3 * time.Microsecond},
			{Name: "bucket", Algorithm: "token_bucket", Limit: 2, Window: 5 * time.Microsecond, Burst: 1},
		}},
		{"bucket, counter", []chanlimit.Policy{
			{Name: "bucket", Algorithm: "gcra", Limit: 3, Window: 10 * time.Microsecond, Burst: 1},
			{Name: "counter", Algorithm: "sliding_window_counter", Limit: 3, Window: 7 * time.Microsecond},
		}},
		{"counter, window", []chanlimit.Policy{
			{Name: "counter", Algorithm: "sliding_window_counter", Limit: 3, Window: 7 * time.Microsecond},
			{Name: "window", Algorithm: "fixed_window", Limit: 2, Window: 5 * time.Microsecond},
		}},
		{"counter, log", []chanlimit.Policy{
			{Name: "counter", Algorithm: "sliding_window_counter", Limit: 5, Window: 11 * time.Microsecond},
			{Name: "log", Algorithm: "sliding_window_log", Limit: 3, Window: 6 * time.Microsecond},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
			mem, err := chanlimit.New(chanlimit.Config{Policies: c.policies, Clock: clk})
			require.NoError(t, err)
			defer mem.Close()
			st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
			require.NoError(t, err)
			red, err := chanlimit.New(chanlimit.Config{Policies: c.policies, Clock: clk, Store: st})
			require.NoError(t, err)
			defer red.Close()
			denials := 0
			for i := range 200 {
				a, aerr := mem.AllowN(ctx, "k", 1)
				b, berr := red.AllowN(ctx, "k", 1)
				require.NoError(t, aerr)
				require.NoError(t, berr)
				same(t, a, b, "request %d", i)
				if !a.Allowed {
					denials++
				}
				clk.Advance(time.Duration(i%3) * time.Microsecond)
			}
			require.Positive(t, denials)
		})
	}
}
