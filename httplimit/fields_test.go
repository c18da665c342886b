package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/httplimit"
)

// TestEachMemberIsItsPolicysOwn: RateLimit has a member for each policy,
// the deciding one first, and each member's r and t are that policy's
// own: per-second's t is its next token's, never per-minute's window, even
// when the two have as much left (the tie names per-second).
func TestEachMemberIsItsPolicysOwn(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "per-second", Limit: 5, Window: time.Second},
		{Name: "per-minute", Algorithm: "fixed_window", Limit: 5, Window: time.Minute},
	}})
	h := httplimit.Middleware(r, httplimit.Options{})(&counting{})
	rate := func(name string, r, t int64) member { return member{name, map[string]int64{"r": r, "t": t}} }
	steps := []struct {
		advance time.Duration
		status  int
		want    []member
	}{
		{0, 204, []member{rate("per-second", 4, 1), rate("per-minute", 4, 60)}},
		{0, 204, []member{rate("per-second", 3, 1), rate("per-minute", 3, 60)}},
		{19 * time.Second, 204, []member{rate("per-minute", 2, 41), rate("per-second", 4, 1)}},
		{0, 204, []member{rate("per-minute", 1, 41), rate("per-second", 3, 1)}},
		{0, 204, []member{rate("per-minute", 0, 41), rate("per-second", 2, 1)}},
		{0, 429, []member{rate("per-minute", 0, 41), rate("per-second", 2, 1)}},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		rec := do(h, "192.0.2.7:1")
		require.Equal(t, s.status, rec.Code, "step %d", i)
		assert.Equal(t, s.want, parseField(t, rec.Header(), "RateLimit"), "step %d", i)
	}
}

// countingClock is a Fake that counts its readings: a partition reads the
// clock once for each message it takes from its mailbox when it comes on
// its own, so the readings count round trips.
type countingClock struct {
	*clock.Fake
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time                  { c.reads.Add(1); return c.Fake.Now() }
func (c *countingClock) Since(t time.Time) time.Duration { c.reads.Add(1); return c.Fake.Since(t) }

// TestOneRoundTripARequest: a request's decision, its key's policies and
// their quotas come back in one round trip to its partition, with an
// override in the router (so that the key's policies are the partition's
// to tell), waiting or not.
func TestOneRoundTripARequest(t *testing.T) {
	for _, maxWait := range []time.Duration{0, time.Minute} {
		clk := &countingClock{Fake: clock.NewFake(epoch)}
		r, err := chanlimit.New(chanlimit.Config{Limit: 5, Window: time.Second, Clock: clk})
		require.NoError(t, err)
		defer r.Close()
		require.NoError(t, r.SetOverride(context.Background(), "192.0.2.9", chanlimit.Policy{Name: "vip", Limit: 50, Window: time.Second}))
		h := httplimit.Middleware(r, httplimit.Options{MaxWait: maxWait})(&counting{})
		for _, ip := range []string{"192.0.2.7", "192.0.2.9"} {
			before := clk.reads.Load()
			rec := do(h, ip+":1")
			require.Equal(t, 204, rec.Code)
			assert.Equal(t, int64(1), clk.reads.Load()-before, "round trips for a request from %s, MaxWait %v", ip, maxWait)
			assert.NotEmpty(t, rec.Header().Get("RateLimit-Policy"))
		}
	}
}

// TestErrorBodiesTellNothingOfTheError: what a key function's error or
// the router's says (a token, a database's text, internal names) never
// reaches the client: each status has one fixed detail, and OnError gets
// the error itself.
func TestErrorBodiesTellNothingOfTheError(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute, MaxKeyBytes: 10})
	secret := "token=s3cr3t"
	cases := []struct {
		name   string
		opts   httplimit.Options
		status int
		told   bool // the error itself says secret
	}{
		{"no key", httplimit.Options{Key: httplimit.KeyByHeader("X-" + secret)}, 400, true},
		{"key too long", httplimit.Options{Key: func(*http.Request) (string, error) { return secret, nil }}, 400, false},
		{"cost above capacity", httplimit.Options{Cost: func(*http.Request) int { return 6 }}, 400, false},
		{"the key function's error", httplimit.Options{Key: func(*http.Request) (string, error) { return "", &secretError{secret} }}, 500, true},
		{"a cost below 1", httplimit.Options{Cost: func(*http.Request) int { return 0 }}, 500, false},
	}
	details := map[int]string{}
	for _, c := range cases {
		rec := do(httplimit.Middleware(r, c.opts)(&counting{}), "192.0.2.7:1")
		require.Equal(t, c.status, rec.Code, c.name)
		p := readProblem(t, c.status, rec.Header(), rec.Body.Bytes())
		for _, leak := range []string{secret, "httplimit:", "chanlimit:", "X-"} {
			assert.NotContains(t, rec.Body.String(), leak, c.name)
		}
		if d, ok := details[c.status]; ok {
			assert.Equal(t, d, p.Detail, "%s: one detail per status", c.name)
		}
		details[c.status] = p.Detail

		var got error
		c.opts.OnError = func(w http.ResponseWriter, req *http.Request, err error) {
			got = err
			httplimit.WriteError(w, req, err)
		}
		do(httplimit.Middleware(r, c.opts)(&counting{}), "192.0.2.7:1")
		require.Error(t, got, c.name)
		assert.Equal(t, c.told, strings.Contains(got.Error(), secret), "%s: OnError gets the error itself: %v", c.name, got)
	}
}

// secretError is an error whose text is something no client may see.
type secretError struct{ text string }

func (e *secretError) Error() string { return "database says: " + e.text }

// TestDryRunNeverAdvertised: a dry-run policy is in no field, and a key
// under dry-run policies alone gets none.
func TestDryRunNeverAdvertised(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "shadow", Limit: 1, Window: time.Hour, DryRun: true},
		{Name: "second", Limit: 5, Window: time.Second},
	}})
	require.NoError(t, r.SetOverride(context.Background(), "trial", chanlimit.Policy{Name: "trial", Limit: 1, Window: time.Hour, DryRun: true}))
	srv := httptest.NewServer(httplimit.Middleware(r, httplimit.Options{Key: httplimit.KeyByHeader("X-Key")})(hello))
	defer srv.Close()
	for i := range 2 {
		resp, _ := get(t, srv.Client(), srv.URL, "X-Key", "k")
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: the shadow denies nobody", i)
		assert.Equal(t, []member{{"second", map[string]int64{"q": 5, "w": 1}}}, parseField(t, resp.Header, "RateLimit-Policy"))
		assert.Equal(t, []member{{"second", map[string]int64{"r": int64(4 - i), "t": 1}}}, parseField(t, resp.Header, "RateLimit"))
	}
	resp, _ := get(t, srv.Client(), srv.URL, "X-Key", "trial")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, resp.Header.Values("RateLimit-Policy"), "a key under dry-run policies alone has no fields")
	assert.Empty(t, resp.Header.Values("RateLimit"))
}

// TestFieldsAreTheMiddlewares: Fields gives the values the middleware
// writes, for an allowance and for a refusal.
func TestFieldsAreTheMiddlewares(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "second", Limit: 1, Window: time.Second},
		{Name: "minute", Algorithm: "fixed_window", Limit: 30, Window: time.Minute},
	}})
	h := httplimit.Middleware(r, httplimit.Options{Key: func(*http.Request) (string, error) { return "a", nil }})(hello)
	other, _ := newRouter(t, chanlimit.Config{Policies: r.Policies()})
	for i := range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, request("192.0.2.1:1"))
		var q chanlimit.Quota
		d, err := other.AllowQuota(context.Background(), "a", 1, &q)
		require.NoError(t, err)
		policy, rate, retry := httplimit.Fields(d, &q)
		assert.Equal(t, w.Header().Get("RateLimit-Policy"), policy, "request %d", i)
		assert.Equal(t, w.Header().Get("RateLimit"), rate, "request %d", i)
		if d.Allowed {
			assert.Zero(t, retry)
		} else {
			assert.Equal(t, w.Header().Get("Retry-After"), strconv.FormatInt(retry, 10))
		}
	}
}
