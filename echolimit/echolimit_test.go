package echolimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/echolimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tests go through Echo served by a real http.Server on 127.0.0.1
// (httptest.NewServer) and a real http.Client, on routers with a fake
// clock that stands still unless a test moves it.

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newRouter returns a router on a fake clock, closed when the test ends.
func newRouter(t *testing.T, cfg chanlimit.Config) (*chanlimit.Router, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	cfg.Clock = clk
	r, err := chanlimit.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r, clk
}

// serve serves h on 127.0.0.1 until the test ends, and returns its URL
// and a client for it.
func serve(t *testing.T, h http.Handler) (string, *http.Client) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, srv.Client()
}

// response is what a client got: status, the fields, the body.
type response struct {
	status                   int
	policy, rate, retryAfter string
	body                     string
}

// get sends a GET to url with the given header fields (name, value, ...)
// and returns what came back, and the response's Content-Type.
func get(t *testing.T, client *http.Client, url string, header ...string) (response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{
		status:     resp.StatusCode,
		policy:     resp.Header.Get("RateLimit-Policy"),
		rate:       resp.Header.Get("RateLimit"),
		retryAfter: resp.Header.Get("Retry-After"),
		body:       string(body),
	}, resp.Header.Get("Content-Type")
}

// limited returns an Echo whose GET /hello, counted in served, is limited
// by config (its Store a Store of r unless set, its DenyHandler
// echolimit's unless set).
func limited(r *chanlimit.Router, config middleware.RateLimiterConfig, served *atomic.Int64) *echo.Echo {
	if config.Store == nil {
		config.Store = echolimit.NewStore(r)
	}
	if config.DenyHandler == nil {
		config.DenyHandler = echolimit.DenyHandler
	}
	e := echo.New()
	e.Use(middleware.RateLimiterWithConfig(config))
	e.GET("/hello", func(c *echo.Context) error {
		served.Add(1)
		return c.String(http.StatusOK, "hello")
	})
	return e
}

// Echo's answers: to a refusal (middleware.ErrRateLimitExceeded), and to
// errors by their status, as its default HTTPErrorHandler writes them.
const (
	exceeded    = `{"message":"rate limit exceeded"}` + "\n"
	badRequest  = `{"message":"Bad Request"}` + "\n"
	unavailable = `{"message":"Service Unavailable"}` + "\n"
	internal    = `{"message":"Internal Server Error"}` + "\n"
)

// TestFields: each response carries httplimit's fields, exactly: a
// member for each policy, the deciding one first, each with its own r
// and t; the third request is refused with 429 and Retry-After equal to
// the deciding member's t, and never reaches the handler. Time moves: the
// refused request passes a second later.
func TestFields(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "per-minute", Limit: 30, Window: time.Minute},
		{Name: "per-second", Limit: 2, Window: time.Second},
	}})
	var served atomic.Int64
	url, client := serve(t, limited(r, middleware.RateLimiterConfig{}, &served))

	const policy = `"per-minute";q=30;w=60, "per-second";q=2;w=1`
	steps := []struct {
		give time.Duration // the clock moves by it before the request
		want response
	}{
		{0, response{200, policy, `"per-second";r=1;t=1, "per-minute";r=29;t=2`, "", "hello"}},
		{0, response{200, policy, `"per-second";r=0;t=1, "per-minute";r=28;t=2`, "", "hello"}},
		{0, response{429, policy, `"per-second";r=0;t=1, "per-minute";r=28;t=2`, "1", exceeded}},
		{time.Second, response{200, policy, `"per-second";r=1;t=1, "per-minute";r=27;t=1`, "", "hello"}},
	}
	for i, step := range steps {
		clk.Advance(step.give)
		got, _ := get(t, client, url+"/hello")
		assert.Equal(t, step.want, got, "step %d", i)
	}
	assert.Equal(t, int64(3), served.Load(), "the refused request never reached the handler")
}

// TestEchoDefaults: with Echo's own RateLimiter (its default config and
// DenyHandler), the fields are the same; the key is the peer's address
// (c.RealIP).
func TestEchoDefaults(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "per-minute", Limit: 1, Window: time.Minute}}})
	e := echo.New()
	e.Use(middleware.RateLimiter(echolimit.NewStore(r)))
	e.GET("/", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") })
	url, client := serve(t, e)

	got, _ := get(t, client, url+"/")
	assert.Equal(t, response{200, `"per-minute";q=1;w=60`, `"per-minute";r=0;t=60`, "", "hello"}, got)
	got, _ = get(t, client, url+"/", "X-Forwarded-For", "203.0.113.9") // no IPExtractor: not trusted
	assert.Equal(t, response{429, `"per-minute";q=1;w=60`, `"per-minute";r=0;t=60`, "60", exceeded}, got)

	d, err := r.Peek(t.Context(), "127.0.0.1", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the key is the peer's address")
}

// TestKeyIsTheIdentifier: the key is what IdentifierExtractor returns;
// each has its own quota.
func TestKeyIsTheIdentifier(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
	var served atomic.Int64
	url, client := serve(t, limited(r, middleware.RateLimiterConfig{
		IdentifierExtractor: func(c *echo.Context) (string, error) { return c.Request().Header.Get("X-API-Key"), nil },
	}, &served))

	for _, tc := range []struct {
		give string
		want int
	}{
		{"alice", 200},
		{"bob", 200},
		{"alice", 429},
		{"bob", 429},
		{"carol", 200},
	} {
		got, _ := get(t, client, url+"/hello", "X-API-Key", tc.give)
		assert.Equal(t, tc.want, got.status, "%s", tc.give)
	}
	assert.Equal(t, int64(3), served.Load())
}

// TestErrors: a request the router cannot decide is not allowed and gets
// no fields; with echolimit's DenyHandler, Echo answers the Store's error
// with httplimit.WriteError's status for it (400 for a key too long, 503
// for a closed router), the error wrapping the router's; with Echo's
// default DenyHandler, it is a 429 like a refusal.
func TestErrors(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute, MaxKeyBytes: 8})
	closed, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute})
	require.NoError(t, closed.Close())
	errs := make(chan error, 8)
	keep := func(c *echo.Context, id string, err error) error {
		errs <- err
		return echolimit.DenyHandler(c, id, err)
	}
	byHeader := func(c *echo.Context) (string, error) { return c.Request().Header.Get("X-API-Key"), nil }

	for _, tc := range []struct {
		name   string
		router *chanlimit.Router
		deny   func(*echo.Context, string, error) error
		key    string
		want   response
		is     error
	}{
		{"KeyTooLong", r, keep, "much-too-long", response{400, "", "", "", badRequest}, chanlimit.ErrKeyTooLong},
		{"Closed", closed, keep, "alice", response{503, "", "", "", unavailable}, chanlimit.ErrClosed},
		{"NoRouter", nil, keep, "alice", response{500, "", "", "", internal}, nil},
		{"ClosedEchoDeny", closed, middleware.DefaultRateLimiterConfig.DenyHandler, "alice", response{429, "", "", "", exceeded}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var served atomic.Int64
			config := middleware.RateLimiterConfig{IdentifierExtractor: byHeader, DenyHandler: tc.deny}
			if tc.router == nil {
				config.Store = echolimit.NewStore(nil)
			}
			url, client := serve(t, limited(tc.router, config, &served))
			got, _ := get(t, client, url+"/hello", "X-API-Key", tc.key)
			assert.Equal(t, tc.want, got)
			assert.Zero(t, served.Load())
			if tc.is == nil {
				return
			}
			var err error
			select {
			case err = <-errs: // the DenyHandler ran before the response was written
			default:
				t.Fatal("the DenyHandler was not called")
			}
			assert.ErrorIs(t, err, tc.is)
			assert.Equal(t, tc.want.status, echo.StatusCode(err))
		})
	}
}

// TestDryRun: a key under dry-run policies alone is always allowed, and
// gets no fields.
func TestDryRun(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "trial", Limit: 1, Window: time.Minute, DryRun: true}}})
	var served atomic.Int64
	url, client := serve(t, limited(r, middleware.RateLimiterConfig{}, &served))
	for range 3 {
		got, _ := get(t, client, url+"/hello")
		assert.Equal(t, response{200, "", "", "", "hello"}, got)
	}
}

// TestAllow: a store seen as a plain middleware.RateLimiterStore (Allow
// alone) decides the same, without fields: Allow has no response to set
// them on.
func TestAllow(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Minute})
	var served atomic.Int64
	plain := struct{ middleware.RateLimiterStore }{echolimit.NewStore(r)}
	url, client := serve(t, limited(r, middleware.RateLimiterConfig{Store: plain}, &served))
	for i, want := range []response{{200, "", "", "", "hello"}, {200, "", "", "", "hello"}, {429, "", "", "", exceeded}} {
		got, _ := get(t, client, url+"/hello")
		assert.Equal(t, want, got, "request %d", i)
	}

	closed, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Minute})
	require.NoError(t, closed.Close())
	ok, err := echolimit.NewStore(closed).Allow("k")
	assert.False(t, ok)
	assert.ErrorIs(t, err, chanlimit.ErrClosed)
	assert.Equal(t, http.StatusServiceUnavailable, echo.StatusCode(err))
}

// TestErrorBodyHidesTheError: Echo's default HTTPErrorHandler writes the
// status's text, not the router's error.
func TestErrorBodyHidesTheError(t *testing.T) {
	closed, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Minute})
	require.NoError(t, closed.Close())
	var served atomic.Int64
	url, client := serve(t, limited(closed, middleware.RateLimiterConfig{}, &served))
	got, contentType := get(t, client, url+"/hello")
	assert.Equal(t, 503, got.status)
	assert.Equal(t, "application/json", contentType)
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(got.body), &body))
	assert.Equal(t, map[string]any{"message": "Service Unavailable"}, body)
	assert.NotContains(t, got.body, chanlimit.ErrClosed.Error())
}
