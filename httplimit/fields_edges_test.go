package httplimit_test

import (
	"context"
	"math"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// The edges of the fields' values: integers past what Structured Fields
// hold, a refusal by MaxWait, and the wait until more quota.

// TestHugeLimitIsAStructuredInteger: a policy may have any Limit
// (math.MaxInt for a key that is not limited in practice), but a
// Structured Fields Integer has at most 15 digits (RFC 9651, 3.3.1): q
// and r are capped at the largest, so that the fields still parse.
func TestHugeLimitIsAStructuredInteger(t *testing.T) {
	const maxInteger = 999_999_999_999_999
	r, _ := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Second})
	require.NoError(t, r.SetOverride(context.Background(), "192.0.2.9",
		chanlimit.Policy{Name: "unlimited", Limit: math.MaxInt, Window: time.Second}))
	h := httplimit.Middleware(r, httplimit.Options{})(&counting{})
	rec := do(h, "192.0.2.9:1")
	require.Equal(t, 204, rec.Code)
	assert.Equal(t, []member{{"unlimited", map[string]int64{"q": maxInteger, "w": 1}}}, parseField(t, rec.Header(), "RateLimit-Policy"))
	assert.Equal(t, []member{{"unlimited", map[string]int64{"r": maxInteger, "t": 1}}}, parseField(t, rec.Header(), "RateLimit"))
}

// TestMaxWaitRefusalRemaining: a request that MaxWait refuses at
// once says what the key has left, as a refusal without MaxWait does:
// with 2 units left, a request of 3 units (1s away, past MaxWait) is
// refused with r=2, not r=0, and a request of 1 unit then passes at once.
func TestMaxWaitRefusalRemaining(t *testing.T) {
	for _, maxWait := range []time.Duration{0, 500 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			r, err := chanlimit.New(chanlimit.Config{Limit: 5, Window: 5 * time.Second})
			require.NoError(t, err)
			defer r.Close()
			cost := 3
			h := httplimit.Middleware(r, httplimit.Options{MaxWait: maxWait, Cost: func(*http.Request) int { return cost }})(&counting{})
			rec, _ := timed(h, request("192.0.2.7:1"))
			require.Equal(t, 204, rec.Code)

			rec, took := timed(h, request("192.0.2.7:1"))
			require.Equal(t, 429, rec.Code, "MaxWait %v", maxWait)
			assert.Zero(t, took)
			assert.Equal(t, []member{{"default", map[string]int64{"r": 2, "t": 1}}}, parseField(t, rec.Header(), "RateLimit"), "MaxWait %v", maxWait)

			cost = 1
			rec, took = timed(h, request("192.0.2.7:1"))
			assert.Equal(t, 204, rec.Code, "the 2 units were there")
			assert.Zero(t, took)
		})
	}
}

// TestMaxWaitRefusalRemainingLeaky: a leaky_bucket request admitted
// into the queue whose turn comes past MaxWait is refused at once; r is
// the room the queue had, as AllowN says, not 0.
func TestMaxWaitRefusalRemainingLeaky(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := chanlimit.New(chanlimit.Config{Algorithm: "leaky_bucket", Limit: 3, Window: 3 * time.Second})
		require.NoError(t, err)
		defer r.Close()
		h := httplimit.Middleware(r, httplimit.Options{MaxWait: 500 * time.Millisecond})(&counting{})
		rec, _ := timed(h, request("192.0.2.7:1"))
		require.Equal(t, 204, rec.Code)
		rec, took := timed(h, request("192.0.2.7:1")) // its turn would come in 1s
		require.Equal(t, 429, rec.Code)
		assert.Zero(t, took)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		assert.Equal(t, []member{{"default", map[string]int64{"r": 2, "t": 1}}}, parseField(t, rec.Header(), "RateLimit"))
	})
}

// TestMoreQuotaMultiPolicy: on an allowed response, t is the wait
// until more quota: here, burst (2 per 1.5s) has 1 left and its next
// token comes in 750ms, so t is 1, not the 3600 of the hour's window,
// which names burst but is the hour's reset.
func TestMoreQuotaMultiPolicy(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "burst", Limit: 2, Window: 1500 * time.Millisecond},
		{Name: "hour", Algorithm: "fixed_window", Limit: 100, Window: time.Hour},
	}})
	h := httplimit.Middleware(r, httplimit.Options{Cost: func(*http.Request) int { return 1 }})(&counting{})
	rec := do(h, "192.0.2.7:1")
	require.Equal(t, 204, rec.Code)
	assert.Equal(t, []member{{"burst", map[string]int64{"r": 1, "t": 1}}, {"hour", map[string]int64{"r": 99, "t": 3600}}}, parseField(t, rec.Header(), "RateLimit"))
	clk.Advance(750 * time.Millisecond)
	d, err := r.Peek(context.Background(), "192.0.2.7", 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "more than the 1 left, before t")
}

// TestMoreQuotaIsPeeksWait: over random steps of a fake clock, for
// every algorithm, an allowed response with r units left says in t when
// the key has more than r: the wait of a request of r+1 units, rounded
// up, not the (later) instant the key is whole again.
func TestMoreQuotaIsPeeksWait(t *testing.T) {
	for _, alg := range chanlimit.RegisteredAlgorithms() {
		t.Run(alg, func(t *testing.T) {
			r, clk := newRouter(t, chanlimit.Config{Algorithm: alg, Limit: 4, Window: 35 * time.Second})
			h := httplimit.Middleware(r, httplimit.Options{})(&counting{})
			for i := range 60 {
				clk.Advance(time.Duration(i%7) * 1700 * time.Millisecond)
				rec := do(h, "192.0.2.7:1")
				if rec.Code != 204 {
					require.Equal(t, 429, rec.Code)
					continue
				}
				rate := parseField(t, rec.Header(), "RateLimit")[0].Params
				d, err := r.Peek(context.Background(), "192.0.2.7", int(rate["r"])+1)
				require.NoError(t, err)
				want := int64((d.RetryAfter + time.Second - 1) / time.Second)
				require.Equal(t, want, rate["t"], "step %d: r=%d, %d units in %v", i, rate["r"], rate["r"]+1, d.RetryAfter)
			}
		})
	}
}
