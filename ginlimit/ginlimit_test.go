package ginlimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/ginlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no debug lines on stdout, which the example reads
	goleak.VerifyTestMain(m)
}

// The tests go through Gin's engine served by a real http.Server on
// 127.0.0.1 (httptest.NewServer) and a real http.Client, on routers with
// a fake clock that stands still unless a test moves it.

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

// serve serves engine on 127.0.0.1 until the test ends, and returns its
// URL and a client for it.
func serve(t *testing.T, engine *gin.Engine) (string, *http.Client) {
	t.Helper()
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	return srv.URL, srv.Client()
}

// response is what a client got: status, the fields, the body.
type response struct {
	status                    int
	policy, rate, retryAfter  string
	contentType, body, header string // header: the X-Test field, which the handlers write
}

// get sends a GET to url with the given header fields (name, value, ...)
// and returns what came back.
func get(t *testing.T, client *http.Client, url string, header ...string) response {
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
		status:      resp.StatusCode,
		policy:      resp.Header.Get("RateLimit-Policy"),
		rate:        resp.Header.Get("RateLimit"),
		retryAfter:  resp.Header.Get("Retry-After"),
		contentType: resp.Header.Get("Content-Type"),
		body:        string(body),
		header:      resp.Header.Get("X-Test"),
	}
}

// recv returns what the server's handlers sent on ch for a request whose
// response the client has read whole: net/http ends a response only once
// its handler has returned, so it is there already, or was never sent.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatal("the handlers sent nothing")
		panic("unreachable")
	}
}

// problemStatus returns the status a problem+json body states.
func problemStatus(t *testing.T, resp response) int {
	t.Helper()
	assert.Equal(t, "application/problem+json", resp.contentType)
	var p struct {
		Status int `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.body), &p), "%s", resp.body)
	return p.Status
}

// TestFields: each response carries httplimit's fields, exactly: a
// member for each policy, the deciding one first, each with its own r
// and t; the third request is refused with 429, Retry-After equal to the
// deciding member's t, and httplimit's problem body, and never reaches
// the handler. Time moves: the refused request passes a second later.
func TestFields(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "per-minute", Limit: 30, Window: time.Minute},
		{Name: "per-second", Limit: 2, Window: time.Second},
	}})
	var served atomic.Int64
	engine := gin.New()
	engine.Use(ginlimit.Middleware(r, httplimit.Options{}))
	engine.GET("/hello", func(c *gin.Context) {
		served.Add(1)
		c.String(http.StatusOK, "hello\n")
	})
	url, client := serve(t, engine)

	const policy = `"per-minute";q=30;w=60, "per-second";q=2;w=1`
	steps := []struct {
		give time.Duration // the clock moves by it before the request
		want response
	}{
		{0, response{status: 200, policy: policy, rate: `"per-second";r=1;t=1, "per-minute";r=29;t=2`, body: "hello\n"}},
		{0, response{status: 200, policy: policy, rate: `"per-second";r=0;t=1, "per-minute";r=28;t=2`, body: "hello\n"}},
		{0, response{status: 429, policy: policy, rate: `"per-second";r=0;t=1, "per-minute";r=28;t=2`, retryAfter: "1"}},
		{time.Second, response{status: 200, policy: policy, rate: `"per-second";r=1;t=1, "per-minute";r=27;t=1`, body: "hello\n"}},
	}
	for i, step := range steps {
		clk.Advance(step.give)
		got := get(t, client, url+"/hello")
		if step.want.status == 429 {
			assert.Equal(t, 429, problemStatus(t, got), "step %d", i)
			got.body = ""
		}
		got.contentType = ""
		assert.Equal(t, step.want, got, "step %d", i)
	}
	assert.Equal(t, int64(3), served.Load(), "the refused request never reached the handler")
}

// TestLaterHandlersSeeDecisionAndKey: the handlers after the middleware
// get the request httplimit passed on (DecisionFrom, KeyFrom); those
// before it see it too once the chain returns, and see a refused request
// aborted, with the refusal's status.
func TestLaterHandlersSeeDecisionAndKey(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
	type seen struct {
		aborted bool
		status  int
		key     string
	}
	before := make(chan seen, 4)
	engine := gin.New()
	engine.Use(func(c *gin.Context) { // before the middleware
		c.Next()
		key, _ := httplimit.KeyFrom(c.Request)
		before <- seen{c.IsAborted(), c.Writer.Status(), key}
	})
	engine.Use(ginlimit.Middleware(r, httplimit.Options{Key: httplimit.KeyByHeader("X-API-Key")}))
	engine.Use(func(c *gin.Context) { // after it
		d, ok := httplimit.DecisionFrom(c.Request)
		if !ok {
			c.AbortWithStatus(http.StatusInternalServerError)
			return
		}
		c.Header("X-Test", "remaining="+strconv.Itoa(d.Remaining)+" policy="+d.Policy)
		c.Next()
	})
	engine.GET("/whoami", func(c *gin.Context) {
		key, ok := httplimit.KeyFrom(c.Request)
		c.String(http.StatusOK, "%s %t", key, ok)
	})
	url, client := serve(t, engine)

	got := get(t, client, url+"/whoami", "X-API-Key", "alice")
	assert.Equal(t, 200, got.status)
	assert.Equal(t, "alice true", got.body)
	assert.Equal(t, "remaining=0 policy=default", got.header)
	assert.Equal(t, seen{false, 200, "alice"}, recv(t, before))

	got = get(t, client, url+"/whoami", "X-API-Key", "alice")
	assert.Equal(t, 429, got.status)
	assert.Equal(t, "", got.header, "the handlers after a refusal never ran")
	assert.Equal(t, seen{true, 429, ""}, recv(t, before), "aborted; the refused request was never passed on")

	got = get(t, client, url+"/whoami", "X-API-Key", "bob")
	assert.Equal(t, 200, got.status, "a key of its own")
	assert.Equal(t, "bob true", got.body)
	assert.Equal(t, seen{false, 200, "bob"}, recv(t, before))
}

// TestNested: a global middleware on the engine and a route's on the
// route, each with its own router: an allowed response carries both
// routers' members, the global one's first; when the route's refuses,
// its member comes first, and the global router gets back what the
// request took from it, so the next request finds it as it was.
func TestNested(t *testing.T) {
	global, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 5, Window: time.Minute}}})
	route, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 1, Window: time.Minute}}})
	var served atomic.Int64
	engine := gin.New()
	engine.Use(ginlimit.Middleware(global, httplimit.Options{}))
	engine.GET("/expensive", ginlimit.Middleware(route, httplimit.Options{}), func(c *gin.Context) {
		served.Add(1)
		d, _ := httplimit.DecisionFrom(c.Request)
		c.String(http.StatusOK, "%s", d.Policy) // the innermost middleware's
	})
	engine.GET("/cheap", func(c *gin.Context) { c.String(http.StatusOK, "cheap") })
	url, client := serve(t, engine)

	const policy = `"global";q=5;w=60, "route";q=1;w=60`
	got := get(t, client, url+"/expensive")
	assert.Equal(t, response{status: 200, policy: policy, rate: `"global";r=4;t=12, "route";r=0;t=60`, contentType: "text/plain; charset=utf-8", body: "route"}, got)

	for i := range 2 {
		got = get(t, client, url+"/expensive")
		assert.Equal(t, 429, problemStatus(t, got), "refusal %d", i)
		got.body, got.contentType = "", ""
		assert.Equal(t, response{status: 429, policy: policy, rate: `"route";r=0;t=60, "global";r=3;t=12`, retryAfter: "60"}, got,
			"refusal %d: the global router took nothing for the refusal before", i)
	}
	assert.Equal(t, int64(1), served.Load())

	got = get(t, client, url+"/cheap")
	assert.Equal(t, response{status: 200, policy: `"global";q=5;w=60`, rate: `"global";r=3;t=12`, contentType: "text/plain; charset=utf-8", body: "cheap"}, got,
		"the global router counts the allowed requests alone")
}

// TestErrors: a request the middleware cannot decide is answered by
// httplimit's WriteError (400 for no key, 503 for a closed router), with
// no fields, and goes no further down Gin's chain.
func TestErrors(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute})
	closed, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute})
	require.NoError(t, closed.Close())
	var served atomic.Int64
	handler := func(c *gin.Context) {
		served.Add(1)
		c.String(http.StatusOK, "served")
	}
	engine := gin.New()
	engine.GET("/keyed", ginlimit.Middleware(r, httplimit.Options{Key: httplimit.KeyByHeader("X-API-Key")}), handler)
	engine.GET("/closed", ginlimit.Middleware(closed, httplimit.Options{}), handler)
	url, client := serve(t, engine)

	for _, tc := range []struct {
		path   string
		header []string
		want   int
	}{
		{"/keyed", nil, 400},
		{"/keyed", []string{"X-API-Key", ""}, 400},
		{"/closed", nil, 503},
	} {
		got := get(t, client, url+tc.path, tc.header...)
		assert.Equal(t, tc.want, got.status, "%s %q", tc.path, tc.header)
		assert.Equal(t, tc.want, problemStatus(t, got), "%s %q", tc.path, tc.header)
		assert.Empty(t, got.policy+got.rate+got.retryAfter, "%s %q: no fields", tc.path, tc.header)
	}
	assert.Zero(t, served.Load())

	got := get(t, client, url+"/keyed", "X-API-Key", "alice")
	assert.Equal(t, 200, got.status)
	assert.Equal(t, int64(1), served.Load())
}

// TestOnError: Options.OnError answers an undecided request in place of
// WriteError, with err wrapping httplimit.ErrKey for a key error.
func TestOnError(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute})
	errs := make(chan error, 1)
	engine := gin.New()
	engine.Use(ginlimit.Middleware(r, httplimit.Options{
		Key: httplimit.KeyByHeader("X-API-Key"),
		OnError: func(w http.ResponseWriter, req *http.Request, err error) {
			errs <- err
			httplimit.WriteError(w, req, err)
		},
	}))
	engine.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "served") })
	url, client := serve(t, engine)

	got := get(t, client, url+"/")
	assert.Equal(t, 400, got.status)
	err := recv(t, errs)
	assert.True(t, errors.Is(err, httplimit.ErrKey), "%v", err)
	assert.True(t, errors.Is(err, httplimit.ErrNoKey), "%v", err)
}

// TestRefund: with Options.Refund, httplimit notes the status through a
// ResponseWriter of its own; the handlers after the middleware write
// through it, so Refund sees the status they wrote (here a 500, given
// back, and a 200, kept), Gin's Status is still true, and c.Writer is
// Gin's own again once the chain returns.
func TestRefund(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Minute})
	statuses := make(chan int, 8)
	restored := make(chan bool, 8)
	engine := gin.New()
	engine.Use(func(c *gin.Context) {
		w := c.Writer
		c.Next()
		restored <- c.Writer == w
	})
	engine.Use(ginlimit.Middleware(r, httplimit.Options{Refund: func(_ *http.Request, status int) bool {
		statuses <- status
		return status >= 500
	}}))
	engine.Use(func(c *gin.Context) {
		c.Next()
		statuses <- -c.Writer.Status() // Gin's Status, negated to tell it apart
	})
	engine.GET("/fail", func(c *gin.Context) { c.String(http.StatusInternalServerError, "oops") })
	engine.GET("/stream", func(c *gin.Context) {
		c.Status(http.StatusAccepted)
		_, _ = c.Writer.WriteString("part 1, ")
		c.Writer.Flush()
		_, _ = c.Writer.WriteString("part 2")
	})
	engine.GET("/ok", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	url, client := serve(t, engine)

	for range 3 {
		got := get(t, client, url+"/fail")
		assert.Equal(t, 500, got.status)
		assert.Equal(t, "oops", got.body)
		assert.Equal(t, `"default";r=1;t=30`, got.rate, "the one before was given back")
		assert.Equal(t, -500, recv(t, statuses))
		assert.Equal(t, 500, recv(t, statuses), "Refund saw the status the handler wrote")
		assert.True(t, recv(t, restored))
	}
	got := get(t, client, url+"/stream")
	assert.Equal(t, 202, got.status)
	assert.Equal(t, "part 1, part 2", got.body)
	assert.Equal(t, -202, recv(t, statuses))
	assert.Equal(t, 202, recv(t, statuses))
	assert.True(t, recv(t, restored))

	got = get(t, client, url+"/ok")
	assert.Equal(t, 204, got.status)
	assert.Equal(t, `"default";r=0;t=30`, got.rate, "the stream was kept")
	assert.Equal(t, -204, recv(t, statuses))
	assert.Equal(t, 204, recv(t, statuses))
	assert.True(t, recv(t, restored))

	got = get(t, client, url+"/ok")
	assert.Equal(t, 429, got.status)
	assert.True(t, recv(t, restored))
	assert.Empty(t, statuses, "neither Refund nor the handlers after ran for the refusal")
}

// TestSkip: a request Options.Skip lets through goes on down Gin's chain
// unlimited and without fields; the others are limited.
func TestSkip(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
	engine := gin.New()
	engine.Use(ginlimit.Middleware(r, httplimit.Options{Skip: func(req *http.Request) bool { return req.URL.Path == "/healthz" }}))
	engine.GET("/healthz", func(c *gin.Context) {
		_, decided := httplimit.DecisionFrom(c.Request)
		c.String(http.StatusOK, "decided=%t", decided)
	})
	engine.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "home") })
	url, client := serve(t, engine)

	for range 3 {
		got := get(t, client, url+"/healthz")
		assert.Equal(t, response{status: 200, contentType: "text/plain; charset=utf-8", body: "decided=false"}, got)
	}
	assert.Equal(t, 200, get(t, client, url+"/").status)
	assert.Equal(t, 429, get(t, client, url+"/").status)
}

// TestClientGoneBeforeDecision: a request whose context ended before it
// was decided gets 503 (WriteError) and does not reach the handlers.
func TestClientGoneBeforeDecision(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
	var served atomic.Int64
	engine := gin.New()
	engine.Use(func(c *gin.Context) { // the client went away: its context ended
		ctx, cancel := context.WithCancel(c.Request.Context())
		cancel()
		c.Request = c.Request.WithContext(ctx)
	})
	engine.Use(ginlimit.Middleware(r, httplimit.Options{}))
	engine.GET("/", func(c *gin.Context) { served.Add(1) })
	url, client := serve(t, engine)

	got := get(t, client, url+"/")
	assert.Equal(t, 503, got.status)
	assert.Zero(t, served.Load())
}
