package redislimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/httplimit"
	"github.com/chanlimit/chanlimit/redislimit"
)

// twoRouters returns two routers on one store's Redis (each its own
// Store, as two processes have), on one fake clock.
func twoRouters(t *testing.T, client string, policies ...chanlimit.Policy) (one, other *chanlimit.Router, clk *clock.Fake) {
	t.Helper()
	clk = clock.NewFake(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	pfx := prefix(t)
	routers := make([]*chanlimit.Router, 2)
	for i := range routers {
		st, err := redislimit.NewStore(clientOf(t, client), redislimit.Options{Prefix: pfx})
		require.NoError(t, err)
		r, err := chanlimit.New(chanlimit.Config{Policies: policies, Clock: clk, Store: st})
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		routers[i] = r
	}
	return routers[0], routers[1], clk
}

// TestHoldAcrossRouters: a hold set by one router holds the key for every
// router on the Redis: each is denied, taking nothing, with the wait until
// the request is allowed, a microsecond before it too, and allowed at it;
// a shorter hold changes nothing; Reset ends a hold.
func TestHoldAcrossRouters(t *testing.T) {
	for _, client := range []string{"single", "cluster"} {
		t.Run(client, func(t *testing.T) {
			one, other, clk := twoRouters(t, client,
				chanlimit.Policy{Name: "second", Limit: 3, Window: time.Second},
				chanlimit.Policy{Name: "shadow", Algorithm: "fixed_window", Limit: 1, Window: time.Second, DryRun: true})
			ctx := context.Background()
			d, err := one.AllowN(ctx, "k", 3)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.NoError(t, one.Hold(ctx, "k", 300*time.Millisecond))
			require.NoError(t, one.Hold(ctx, "k", 100*time.Millisecond), "shorter: changes nothing")

			// The bucket is empty: 3 tokens take a second, 700 ms past the hold.
			d, err = other.AllowN(ctx, "k", 3)
			require.NoError(t, err)
			assert.Equal(t, chanlimit.Decision{RetryAfter: time.Second, ResetAfter: time.Second}, d)
			d, err = other.AllowN(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, chanlimit.Decision{RetryAfter: 333_334 * time.Microsecond, ResetAfter: time.Second}, d, "a token at 333.3 ms, past the hold's end")

			clk.Advance(300*time.Millisecond - time.Microsecond)
			d, err = other.Peek(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, 33_335*time.Microsecond, d.RetryAfter)
			assert.Empty(t, d.Policy, "held still, a microsecond before its end")
			clk.Advance(time.Microsecond)
			d, err = other.Peek(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, "second", d.Policy, "the policy's own denial, at the hold's end")
			assert.Equal(t, 33_334*time.Microsecond, d.RetryAfter)

			st, err := other.Stats(ctx)
			require.NoError(t, err)
			assert.Zero(t, st.StoreErrors)
			assert.Zero(t, st.WouldDeny, "the dry-run policy decided nothing while the key was held")

			require.NoError(t, other.Hold(ctx, "k", time.Hour))
			require.NoError(t, one.Reset(ctx, "k"))
			d, err = other.AllowN(ctx, "k", 3)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "Reset ended the hold, and the state")
		})
	}
}

// TestHoldKeepsTheKey: the key's TTL covers its hold, so a hold on a key
// whose state would have gone holds to its end, and no longer.
func TestHoldKeepsTheKey(t *testing.T) {
	client := single(t)
	pfx := prefix(t)
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: pfx})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 3, Window: time.Second, Store: st}) // Redis's clock
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	require.NoError(t, r.Hold(ctx, "fresh", time.Hour))
	ttl, err := client.PTTL(ctx, st.Key("fresh")).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 59*time.Minute, "the TTL covers the hold")
	d, err := r.AllowN(ctx, "fresh", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Greater(t, d.RetryAfter, 59*time.Minute)
}

// TestTransportHoldSharedThroughRedis: a 429 answered to one process's
// Transport holds the key for another process's, through the Redis they
// share: the server sees nothing from either until the hold's end.
func TestTransportHoldSharedThroughRedis(t *testing.T) {
	one, other, clk := twoRouters(t, "single", chanlimit.Policy{Limit: 100, Window: time.Second})
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if served.Add(1) == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	get := func(r *chanlimit.Router) int {
		resp, err := (&http.Client{Transport: &httplimit.Transport{Router: r}}).Get(srv.URL)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusTooManyRequests, get(one))
	key := strings.TrimPrefix(srv.URL, "http://")
	d, err := other.Peek(context.Background(), key, 1)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, d.RetryAfter, "the other process's router holds the key")

	done := make(chan int, 1)
	go func() { done <- get(other) }()
	for {
		s, err := other.Stats(context.Background())
		require.NoError(t, err)
		if s.Waiting == 1 {
			break
		}
		time.Sleep(time.Millisecond) // for the goroutine to join the line: not the limiter's time
	}
	clk.Advance(2*time.Second - time.Microsecond)
	assert.Equal(t, int32(1), served.Load(), "nothing sent while held")
	clk.Advance(time.Microsecond)
	assert.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, int32(2), served.Load())
}

// TestHoldKeepsTheStateTTL: a hold shorter than what the key's state
// needs leaves the key's TTL as it was: the state outlives the hold.
func TestHoldKeepsTheStateTTL(t *testing.T) {
	client := single(t)
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Hour, Store: st}) // Redis's clock
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	d, err := r.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, r.Hold(ctx, "k", time.Millisecond))
	ttl, err := client.PTTL(ctx, st.Key("k")).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 59*time.Minute, "the state's TTL, not the hold's")
}
