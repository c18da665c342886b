package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/redislimit"
)

// TestAcrossInstances: two routers, as two processes would be, each with
// its own client of one Redis, 32 goroutines each on one key, Limit 100
// per hour on Redis's clock: exactly 100 allowed in all.
func TestAcrossInstances(t *testing.T) {
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			pre := prefix(t)
			var allowed, denied atomic.Int64
			var wg sync.WaitGroup
			for range 2 {
				client := clientOf(t, name)
				st, err := redislimit.NewStore(client, redislimit.Options{Prefix: pre})
				require.NoError(t, err)
				r, err := chanlimit.New(chanlimit.Config{Limit: 100, Window: time.Hour, Store: st})
				require.NoError(t, err)
				defer r.Close()
				for range 32 {
					wg.Go(func() {
						for range 10 {
							d, err := r.AllowN(context.Background(), "shared", 1)
							if !assert.NoError(t, err) {
								return
							}
							if d.Allowed {
								allowed.Add(1)
							} else {
								denied.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			assert.EqualValues(t, 100, allowed.Load())
			assert.EqualValues(t, 2*32*10-100, denied.Load())
		})
	}
}

// TestBatchAcrossInstances: AllowBatch from two routers on one Redis
// takes exactly the quota, too.
func TestBatchAcrossInstances(t *testing.T) {
	pre := prefix(t)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: pre})
		require.NoError(t, err)
		r, err := chanlimit.New(chanlimit.Config{Limit: 50, Window: time.Hour, Store: st})
		require.NoError(t, err)
		defer r.Close()
		for range 8 {
			wg.Go(func() {
				reqs := make([]chanlimit.Request, 20)
				for i := range reqs {
					reqs[i] = chanlimit.Request{Key: fmt.Sprint("k", i%2), N: 1}
				}
				out := make([]chanlimit.Decision, len(reqs))
				if !assert.NoError(t, r.AllowBatch(context.Background(), reqs, out)) {
					return
				}
				for _, d := range out {
					if d.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	assert.EqualValues(t, 2*50, allowed.Load(), "50 on each of two keys")
}

// TestNoScript: a Redis that lost its scripts (SCRIPT FLUSH, as after a
// restart or a failover) answers every request once the store has loaded
// the script again: nothing fails, nothing is lost.
func TestNoScript(t *testing.T) {
	client := single(t)
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 10, Window: time.Hour, Store: st})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	for i := range 10 {
		if i%3 == 0 {
			require.NoError(t, client.ScriptFlush(ctx).Err())
		}
		d, err := r.AllowN(ctx, "k", 1)
		require.NoError(t, err, i)
		require.True(t, d.Allowed, i)
		require.Equal(t, 9-i, d.Remaining)
	}
	require.NoError(t, client.ScriptFlush(ctx).Err())
	out := make([]chanlimit.Decision, 5)
	require.NoError(t, r.AllowBatch(ctx, []chanlimit.Request{{Key: "k", N: 1}, {Key: "a", N: 1}, {Key: "b", N: 2}, {Key: "k", N: 1}, {Key: "a", N: 1}}, out))
	assert.False(t, out[0].Allowed)
	assert.True(t, out[1].Allowed)
	assert.Equal(t, 8, out[2].Remaining)
	assert.Equal(t, 8, out[4].Remaining)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, s.StoreErrors)
}

// TestRestart: Redis stopped mid-run fails requests (FailClosed) within
// their context's deadline, counted in StoreErrors; started again, with
// its state and scripts lost, it answers again.
func TestRestart(t *testing.T) {
	srv := newServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	defer client.Close()
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t), Pause: -1})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 3, Window: time.Hour, Store: st})
	require.NoError(t, err)
	defer r.Close()

	ctx := context.Background()
	require.True(t, r.Allow("k"))
	srv.stop()
	for range 3 {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := r.AllowN(ctx, "k", 1)
		cancel()
		require.ErrorIs(t, err, redislimit.ErrStoreUnavailable)
	}
	assert.False(t, r.Allow("k"))
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 4, s.StoreErrors)

	srv.start() // empty: no state, no script
	for i := range 3 {
		d, err := r.AllowN(ctx, "k", 1)
		require.NoError(t, err, i)
		assert.True(t, d.Allowed, i)
	}
	assert.False(t, r.Allow("k"))
}

// unreachable returns a client of an address nobody listens on.
func unreachable(t *testing.T) *redis.Client {
	srv := newServer(t)
	srv.stop()
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFailModes: against an address nobody answers, each FailMode does
// what it says, every call returns, and every request counts in
// StoreErrors. NewStore and New need no Redis.
func TestFailModes(t *testing.T) {
	ctx := context.Background()
	t.Run("FailClosed", func(t *testing.T) {
		st, err := redislimit.NewStore(unreachable(t), redislimit.Options{})
		require.NoError(t, err)
		r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Store: st})
		require.NoError(t, err)
		defer r.Close()
		_, err = r.AllowN(ctx, "k", 1)
		require.ErrorIs(t, err, redislimit.ErrStoreUnavailable)
		var opErr *net.OpError
		assert.True(t, errors.As(err, &opErr), "the client's error is wrapped: %v", err)
		assert.False(t, r.Allow("k"))
		require.ErrorIs(t, r.AllowBatch(ctx, []chanlimit.Request{{Key: "a", N: 1}, {Key: "b", N: 1}}, make([]chanlimit.Decision, 2)), redislimit.ErrStoreUnavailable)
		s, err := r.Stats(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 4, s.StoreErrors)
	})
	t.Run("FailOpen", func(t *testing.T) {
		st, err := redislimit.NewStore(unreachable(t), redislimit.Options{FailMode: redislimit.FailOpen})
		require.NoError(t, err)
		r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Store: st})
		require.NoError(t, err)
		defer r.Close()
		for range 5 {
			assert.True(t, r.Allow("k"))
		}
		s, err := r.Stats(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 5, s.StoreErrors)
	})
	t.Run("FailLocal", func(t *testing.T) {
		clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
		st, err := redislimit.NewStore(unreachable(t), redislimit.Options{FailMode: redislimit.FailLocal})
		require.NoError(t, err)
		r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Store: st, Clock: clk})
		require.NoError(t, err)
		defer r.Close()
		assert.True(t, r.Allow("k"))
		assert.True(t, r.Allow("k"))
		assert.False(t, r.Allow("k"), "decided in memory, under the same policy")
		clk.Advance(time.Second)
		assert.True(t, r.Allow("k"))
		s, err := r.Stats(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 4, s.StoreErrors)
	})
}

// TestFailLocalComesBack: FailLocal decides in memory while Redis is
// down, and on Redis again once it answers.
func TestFailLocalComesBack(t *testing.T) {
	srv := newServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	defer client.Close()
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t), FailMode: redislimit.FailLocal, Pause: -1})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Hour, Store: st})
	require.NoError(t, err)
	defer r.Close()
	assert.True(t, r.Allow("k"))
	assert.True(t, r.Allow("k"))
	assert.False(t, r.Allow("k"), "Redis's quota")
	srv.stop()
	assert.True(t, r.Allow("k"), "the local table's own quota")
	assert.True(t, r.Allow("k"))
	assert.False(t, r.Allow("k"))
	srv.start() // empty
	assert.True(t, r.Allow("k"), "Redis again")
	n, err := client.Exists(context.Background(), st.Key("k")).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)
}

// TestCheck: policies the script cannot decide exactly are refused by
// New, with ErrInvalidConfig and the reason.
func TestCheck(t *testing.T) {
	st, err := redislimit.NewStore(single(t), redislimit.Options{})
	require.NoError(t, err)
	for _, c := range []struct {
		policy chanlimit.Policy
		why    string
	}{
		{chanlimit.Policy{Limit: 10, Window: time.Second + time.Nanosecond}, "microseconds"},
		{chanlimit.Policy{Limit: 10, Window: 24 * time.Hour * 365, Burst: 1 << 30}, "too large"},
		{chanlimit.Policy{Algorithm: "sliding_window_counter", Limit: 1 << 30, Window: 24 * time.Hour}, "too large"},
	} {
		_, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{c.policy}, Store: st})
		require.ErrorIs(t, err, chanlimit.ErrInvalidConfig, "%+v", c.policy)
		require.ErrorContains(t, err, c.why)
	}
	_, err = redislimit.NewStore(nil, redislimit.Options{})
	require.Error(t, err)
	_, err = redislimit.NewStore(single(t), redislimit.Options{FailMode: 7})
	require.Error(t, err)
}

// TestExpiry: a key's state lives in Redis at least its ResetAfter, and
// not much more (Grace); the key that holds a call's answers, as long as
// the client may send the call again. Reset drops the state, and the key
// lives on only for the Reset's own retries.
func TestExpiry(t *testing.T) {
	client := single(t)
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 10, Window: 10 * time.Second, Store: st, Partitions: 1})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	out := make([]chanlimit.Decision, 2)
	require.NoError(t, r.AllowBatch(ctx, []chanlimit.Request{{Key: "first", N: 4}, {Key: "k", N: 4}}, out)) // one call
	d := out[1]
	ttl, err := client.PTTL(ctx, st.Key("k")).Result()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ttl, d.ResetAfter-100*time.Millisecond, "the TTL counts down from when it was set")
	assert.LessOrEqual(t, ttl, d.ResetAfter+redislimit.Grace+time.Millisecond)
	ttl, err = client.PTTL(ctx, st.Key("first")).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 20*time.Second, "the call's answers, kept for the client's retries")
	require.NoError(t, r.Reset(ctx, "k"))
	after, err := r.Peek(ctx, "k", 1)
	require.NoError(t, err)
	fresh, err := r.Peek(ctx, "never", 1)
	require.NoError(t, err)
	assert.Equal(t, fresh, after, "Reset drops the key's state")
	ttl, err = client.PTTL(ctx, st.Key("k")).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, redislimit.ReplayWindow, "what is left, the Reset's answers, is kept for its retries alone")
}

// TestWaitThroughRedis: WaitN on a Redis-backed router grants the waiters
// of a key in their order, at their times on the fake clock.
func TestWaitThroughRedis(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second, Store: st, Clock: clk})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	require.True(t, r.Allow("k"))
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			_, err := r.WaitN(ctx, "k", 1)
			assert.NoError(t, err)
			order <- i
		})
		for {
			s, err := r.Stats(ctx)
			require.NoError(t, err)
			if s.Waiting == i+1 {
				break
			}
			time.Sleep(time.Millisecond) // for the goroutine to join the line: not the limiter's time
		}
	}
	for i := range 3 {
		require.NoError(t, clk.BlockUntilContext(ctx, 1))
		clk.Advance(time.Second)
		assert.Equal(t, i, <-order)
	}
	wg.Wait()
}

// TestOverridesThroughRedis: an override's policies go to Redis with the
// key.
func TestOverridesThroughRedis(t *testing.T) {
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Hour, Store: st})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	require.NoError(t, r.SetOverride(ctx, "vip", chanlimit.Policy{Name: "vip", Limit: 3, Window: time.Hour}))
	for range 3 {
		d, err := r.AllowN(ctx, "vip", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, "vip", d.Policy)
	}
	assert.False(t, r.Allow("vip"))
	assert.True(t, r.Allow("x"))
	assert.False(t, r.Allow("x"))
	require.NoError(t, r.SetPolicies(ctx, chanlimit.Policy{Limit: 2, Window: time.Hour}))
	assert.False(t, r.Allow("x"), "the key keeps its state (no token left), read under the new Limit")
	assert.True(t, r.Allow("z"))
	assert.True(t, r.Allow("z"))
	assert.False(t, r.Allow("z"))
}

// TestPause: once a round trip has failed for want of a connection, the
// store leaves Redis alone for Options.Pause: requests fail at once,
// without dialling; with Pause below 0, each dials.
func TestPause(t *testing.T) {
	for _, c := range []struct {
		pause time.Duration
		more  bool // the calls after the first dial
	}{
		{time.Hour, false},
		{-1, true},
	} {
		t.Run(c.pause.String(), func(t *testing.T) {
			srv := newServer(t)
			srv.stop()
			var dials atomic.Int64
			client := redis.NewClient(&redis.Options{
				Addr: srv.addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: 100 * time.Millisecond,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					var d net.Dialer
					return d.DialContext(ctx, network, addr)
				},
			})
			defer client.Close()
			st, err := redislimit.NewStore(client, redislimit.Options{Pause: c.pause, FailMode: redislimit.FailOpen})
			require.NoError(t, err)
			r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Hour, Store: st, Partitions: 1})
			require.NoError(t, err)
			defer r.Close()
			const calls = 5
			assert.True(t, r.Allow("k"), "FailOpen")
			first := dials.Load()
			require.Positive(t, first)
			for range calls - 1 {
				assert.True(t, r.Allow("k"), "FailOpen")
			}
			if c.more {
				assert.GreaterOrEqual(t, dials.Load(), first+calls-1, "each call dials")
			} else {
				assert.Equal(t, first, dials.Load(), "no call dials during the pause")
			}
			s, err := r.Stats(context.Background())
			require.NoError(t, err)
			assert.EqualValues(t, calls, s.StoreErrors)
		})
	}
}

// TestLargeBatch: a batch larger than MaxPerCall goes as several calls of
// the script in one pipeline, in order: each key gets exactly its quota,
// on a single node and on the Cluster.
func TestLargeBatch(t *testing.T) {
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			client := clientOf(t, name)
			st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t)})
			require.NoError(t, err)
			r, err := chanlimit.New(chanlimit.Config{Limit: 50, Window: time.Hour, Store: st, Partitions: 1})
			require.NoError(t, err)
			defer r.Close()
			reqs := make([]chanlimit.Request, 10*redislimit.MaxPerCall)
			for i := range reqs {
				reqs[i] = chanlimit.Request{Key: fmt.Sprint("k", i%10), N: 1}
			}
			out := make([]chanlimit.Decision, len(reqs))
			require.NoError(t, r.AllowBatch(context.Background(), reqs, out))
			remaining := map[string]int{}
			for i, d := range out {
				key := reqs[i].Key
				if i < 500 {
					require.True(t, d.Allowed, i)
					require.Equal(t, 49-i/10, d.Remaining, i)
				} else {
					require.False(t, d.Allowed, i)
				}
				remaining[key] = d.Remaining
			}
			for key, n := range remaining {
				assert.Zero(t, n, key)
			}
		})
	}
}

// TestDecideRefusesWhatItCannotDecide: Decide called directly (as a
// router never does) with a request under no policy, or under a policy
// Check refuses, fails that request alone, and decides the others of the
// same call. Before, no policy panicked, and a Name too long for the
// script's arguments was cut in them.
func TestDecideRefusesWhatItCannotDecide(t *testing.T) {
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	ok := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: 2, Window: time.Hour}}
	long := []chanlimit.Policy{{Name: strings.Repeat("n", 1<<16), Algorithm: "fixed_window", Limit: 2, Window: time.Hour}}
	huge := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: math.MaxInt64, Window: time.Hour}}
	ops := []chanlimit.StoreOp{
		{Kind: chanlimit.StoreAllow, Key: "a", N: 1, Policies: ok},
		{Kind: chanlimit.StoreAllow, Key: "b", N: 1},
		{Kind: chanlimit.StoreAllow, Key: "c", N: 1, Policies: long},
		{Kind: chanlimit.StoreAllow, Key: "d", N: 1, Policies: huge},
		{Kind: chanlimit.StoreAllow, Key: "a", N: 1, Policies: ok},
	}
	st.Decide(context.Background(), ops)
	require.NoError(t, ops[0].Err)
	require.NoError(t, ops[4].Err)
	assert.True(t, ops[0].Decision.Allowed)
	assert.Equal(t, 0, ops[4].Decision.Remaining, "both of a's requests decided, in order")
	assert.ErrorContains(t, ops[1].Err, "no policy")
	assert.ErrorContains(t, ops[2].Err, "too long")
	assert.ErrorContains(t, ops[3].Err, "too large")
}

// TestDecideTellsSetsBySlice: two requests whose policies are a slice and
// a prefix of it (one first policy, two sets) are decided each under its
// own set, in one call. Before, a set was known by its first policy
// alone, and the second request was decided under the first's set.
func TestDecideTellsSetsBySlice(t *testing.T) {
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	ps := []chanlimit.Policy{
		{Name: "a", Algorithm: "fixed_window", Limit: 5, Window: time.Hour},
		{Name: "b", Algorithm: "fixed_window", Limit: 1, Window: time.Hour},
	}
	ops := []chanlimit.StoreOp{
		{Kind: chanlimit.StoreAllow, Key: "x", N: 1, Policies: ps[:1]},
		{Kind: chanlimit.StoreAllow, Key: "y", N: 1, Policies: ps},
		{Kind: chanlimit.StoreAllow, Key: "y", N: 1, Policies: ps},
	}
	st.Decide(context.Background(), ops)
	for i := range ops {
		require.NoError(t, ops[i].Err, i)
	}
	assert.True(t, ops[0].Decision.Allowed)
	assert.Equal(t, 4, ops[0].Decision.Remaining, "x: under a alone")
	assert.True(t, ops[1].Decision.Allowed)
	assert.Equal(t, 0, ops[1].Decision.Remaining, "y: under b too")
	assert.False(t, ops[2].Decision.Allowed, "y: b is spent")
}

// TestDecideTellsKeysApart: in a call whose requests are on distinct keys
// but for two, the second request on the key sees the first's take,
// however many requests the call has. Fixed windows of 1 unit: of two
// allows on one key, one is denied.
func TestDecideTellsKeysApart(t *testing.T) {
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	ps := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: 1, Window: time.Hour}}
	for _, n := range []int{2, 3, 32, 33, 100} {
		ops := make([]chanlimit.StoreOp, n)
		for i := range ops {
			ops[i] = chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: fmt.Sprintf("%d:%d", n, i), N: 1, Policies: ps}
		}
		ops[n-1].Key = ops[(n-1)/2].Key
		st.Decide(context.Background(), ops)
		allowed := 0
		for i := range ops {
			require.NoError(t, ops[i].Err, "%d requests: %d", n, i)
			if ops[i].Decision.Allowed {
				allowed++
			}
		}
		assert.Equal(t, n-1, allowed, "%d requests, one key twice", n)
		assert.False(t, ops[n-1].Decision.Allowed, "%d requests: the second on its key", n)
	}
}
