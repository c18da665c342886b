package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// The tests here put several middlewares on one request, each with a
// router of its own (a global limit outside, a route's inside), served by
// a real http.Server on 127.0.0.1 to a real http.Client.

// remaining returns what key has left under r's first policy, peeked.
func remaining(t *testing.T, r *chanlimit.Router, key string) int {
	t.Helper()
	var q chanlimit.Quota
	_, err := r.PeekQuota(context.Background(), key, 1, &q)
	require.NoError(t, err)
	require.NotEmpty(t, q.Each)
	return q.Each[0].Remaining
}

// names returns the names of a field's members, in order.
func names(ms []member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// nestedServer serves GET /items/{id} and GET /other behind a global
// middleware on global (5 an hour a client, its Refund as given) and a
// middleware per route on route (1 an hour a client and route, keyed by
// the route's pattern).
func nestedServer(t *testing.T, globalOpts httplimit.Options) (srv *httptest.Server, global, route *chanlimit.Router, served *atomic.Int32) {
	t.Helper()
	global, _ = newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 5, Window: time.Hour}}})
	route, _ = newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 1, Window: time.Hour}}})
	perRoute := httplimit.Middleware(route, httplimit.Options{Key: httplimit.KeyJoin(httplimit.KeyByIP, httplimit.KeyByPattern)})
	served = new(atomic.Int32)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		d, ok := httplimit.DecisionFrom(r)
		assert.True(t, ok)
		assert.Equal(t, "route", d.Policy, "the innermost middleware's decision")
		w.WriteHeader(http.StatusNoContent)
	})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", perRoute(handler))
	mux.Handle("GET /other", perRoute(handler))
	srv = httptest.NewServer(httplimit.Middleware(global, globalOpts)(mux))
	t.Cleanup(srv.Close)
	return srv, global, route, served
}

// TestNestedRefusalGivesBack: a request the route's middleware refuses
// takes nothing from the global quota (it failed before: the global
// middleware kept what it took), and the response carries both routers'
// members: the refusing router's first on a refusal, from the outermost
// in on an allowance.
func TestNestedRefusalGivesBack(t *testing.T) {
	srv, global, _, served := nestedServer(t, httplimit.Options{})
	client := srv.Client()

	resp, _ := get(t, client, srv.URL+"/items/1")
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, []string{"global", "route"}, names(parseField(t, resp.Header, "RateLimit-Policy")))
	rate := parseField(t, resp.Header, "RateLimit")
	assert.Equal(t, []member{{"global", map[string]int64{"r": 4, "t": 720}}, {"route", map[string]int64{"r": 0, "t": 3600}}}, rate)
	assert.Equal(t, 4, remaining(t, global, "127.0.0.1"))

	for i, path := range []string{"/items/2", "/items/1", "/items/2/"} { // one route: one quota, whatever the path
		resp, body := get(t, client, srv.URL+path)
		if path == "/items/2/" {
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "no route: the global middleware counts it")
			continue
		}
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "request %d", i)
		assert.Equal(t, []string{"global", "route"}, names(parseField(t, resp.Header, "RateLimit-Policy")), "the same list as on an allowance")
		rate := parseField(t, resp.Header, "RateLimit")
		assert.Equal(t, []member{{"route", map[string]int64{"r": 0, "t": 3600}}, {"global", map[string]int64{"r": 3, "t": 720}}}, rate,
			"the refusing router first; the global member as it decided, before the give-back")
		assert.Equal(t, "3600", resp.Header.Get("Retry-After"))
		p := readProblem(t, http.StatusTooManyRequests, resp.Header, body)
		assert.Equal(t, []string{"route"}, p.Violated)
		assert.Equal(t, 4, remaining(t, global, "127.0.0.1"), "request %d given back to the global router", i)
	}
	assert.Equal(t, 3, remaining(t, global, "127.0.0.1"), "the 404 counted")

	resp, _ = get(t, client, srv.URL+"/other")
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "another route, another quota")
	assert.Equal(t, int32(2), served.Load())
	assert.Equal(t, 2, remaining(t, global, "127.0.0.1"))
}

// TestNestedGiveBackOnce: a global middleware whose Refund gives back
// every refused request does not give back again the one the route's
// middleware refused (it did so twice before: the global key gained a
// unit it never gave).
func TestNestedGiveBackOnce(t *testing.T) {
	var refunds atomic.Int32
	srv, global, _, _ := nestedServer(t, httplimit.Options{Refund: func(_ *http.Request, status int) bool {
		refunds.Add(1)
		return status == http.StatusTooManyRequests
	}})
	client := srv.Client()
	for _, path := range []string{"/other", "/items/1", "/items/1", "/items/1"} {
		get(t, client, srv.URL+path)
	}
	assert.Equal(t, int32(4), refunds.Load(), "Refund ran after each")
	assert.Equal(t, 3, remaining(t, global, "127.0.0.1"), "two allowed requests counted; the two refused, once each, not at all")
}

// TestNestedErrorGivesBack: a request the inner middleware cannot decide
// (no pattern: it wraps no route of a mux) never reaches the handler, and
// the outer middleware gives back what it took.
func TestNestedErrorGivesBack(t *testing.T) {
	global, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 5, Window: time.Hour}}})
	route, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 1, Window: time.Hour}}})
	var errs []error
	inner := httplimit.Middleware(route, httplimit.Options{
		Key: httplimit.KeyByPattern,
		OnError: func(w http.ResponseWriter, r *http.Request, err error) {
			errs = append(errs, err) // one request at a time
			httplimit.WriteError(w, r, err)
		},
	})
	h := httplimit.Middleware(global, httplimit.Options{})(inner(hello)) // around no mux: no pattern
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, body := get(t, srv.Client(), srv.URL+"/x")
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	readProblem(t, http.StatusInternalServerError, resp.Header, body)
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], httplimit.ErrKey)
	assert.Contains(t, errs[0].Error(), "no ServeMux pattern")
	assert.Equal(t, 5, remaining(t, global, "127.0.0.1"), "given back")
}

// TestNestedSharedNames: two routers whose policies have the same name
// each have their members; the outer one's come first on an allowance.
func TestNestedSharedNames(t *testing.T) {
	outer, _ := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Minute})
	inner, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second})
	h := httplimit.Middleware(outer, httplimit.Options{})(httplimit.Middleware(inner, httplimit.Options{})(hello))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, _ := get(t, srv.Client(), srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []member{{"default", map[string]int64{"q": 10, "w": 60}}, {"default", map[string]int64{"q": 2, "w": 1}}}, parseField(t, resp.Header, "RateLimit-Policy"))
	assert.Equal(t, []member{{"default", map[string]int64{"r": 9, "t": 6}}, {"default", map[string]int64{"r": 1, "t": 1}}}, parseField(t, resp.Header, "RateLimit"))
}

// TestNestedDeepRefusal: three middlewares; the middle one refuses; the
// outer one gives back, the inner one never decided; the response has
// the middle router's member first, then the outer's.
func TestNestedDeepRefusal(t *testing.T) {
	a, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "a", Limit: 5, Window: time.Hour}}})
	b, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "b", Limit: 1, Window: time.Hour}}})
	c, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "c", Limit: 5, Window: time.Hour}}})
	var onLimited []string
	h := httplimit.Middleware(a, httplimit.Options{})(
		httplimit.Middleware(b, httplimit.Options{OnLimited: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, _ := httplimit.DecisionFrom(r)
			onLimited = append(onLimited, d.Policy)
			httplimit.WriteLimited(w, r)
		})})(
			httplimit.Middleware(c, httplimit.Options{})(hello)))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, _ := get(t, srv.Client(), srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"a", "b", "c"}, names(parseField(t, resp.Header, "RateLimit")))
	resp, body := get(t, srv.Client(), srv.URL)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, []string{"b", "a"}, names(parseField(t, resp.Header, "RateLimit")))
	assert.Equal(t, []string{"a", "b"}, names(parseField(t, resp.Header, "RateLimit-Policy")))
	readProblem(t, http.StatusTooManyRequests, resp.Header, body)
	assert.Equal(t, []string{"b"}, onLimited, "OnLimited sees the refusing middleware's decision")
	assert.Equal(t, 4, remaining(t, a, "127.0.0.1"))
	assert.Equal(t, 4, remaining(t, c, "127.0.0.1"))
}

// TestSkip: a request Skip returns true for reaches the handler without
// a decision: no fields, nothing counted, even on a key with nothing
// left; the others are limited as ever.
func TestSkip(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour})
	h := httplimit.Middleware(r, httplimit.Options{Skip: func(req *http.Request) bool { return req.URL.Path == "/healthz" }})(hello)
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	for i := range 3 {
		resp, body := get(t, client, srv.URL+"/healthz")
		require.Equal(t, http.StatusOK, resp.StatusCode, "probe %d", i)
		assert.Equal(t, "hello\n", string(body))
		assert.Empty(t, resp.Header.Values("RateLimit"))
		assert.Empty(t, resp.Header.Values("RateLimit-Policy"))
		_, ok := httplimit.DecisionFrom(httptest.NewRequest(http.MethodGet, "/", nil))
		assert.False(t, ok)
	}
	st, err := r.Stats(context.Background())
	require.NoError(t, err)
	assert.Zero(t, st.Allowed+st.Denied, "nothing decided")
	resp, _ := get(t, client, srv.URL+"/work")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = get(t, client, srv.URL+"/work")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	resp, _ = get(t, client, srv.URL+"/healthz")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a probe passes a key with nothing left")
}

// TestOmitFields: no RateLimit or RateLimit-Policy field on an allowance
// or a refusal; a refusal keeps its Retry-After and problem body; with an
// outer middleware that writes its fields, only the outer's are sent.
func TestOmitFields(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "quiet", Limit: 1, Window: time.Minute}}})
	h := httplimit.Middleware(r, httplimit.Options{OmitFields: true})(hello)
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	resp, _ := get(t, client, srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, resp.Header.Values("RateLimit"))
	assert.Empty(t, resp.Header.Values("RateLimit-Policy"))
	resp, body := get(t, client, srv.URL)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Empty(t, resp.Header.Values("RateLimit"))
	assert.Empty(t, resp.Header.Values("RateLimit-Policy"))
	assert.Equal(t, "60", resp.Header.Get("Retry-After"))
	p := readProblem(t, http.StatusTooManyRequests, resp.Header, body)
	assert.Equal(t, []string{"quiet"}, p.Violated)
	assert.Equal(t, int64(60), p.RetryAfter)

	outer, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "loud", Limit: 10, Window: time.Minute}}})
	inner, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "quiet", Limit: 1, Window: time.Minute}}})
	h2 := httplimit.Middleware(outer, httplimit.Options{})(httplimit.Middleware(inner, httplimit.Options{OmitFields: true})(hello))
	srv2 := httptest.NewServer(h2)
	defer srv2.Close()
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp, _ := get(t, srv2.Client(), srv2.URL)
		require.Equal(t, want, resp.StatusCode, "request %d", i)
		assert.Equal(t, []string{"loud"}, names(parseField(t, resp.Header, "RateLimit-Policy")), "request %d", i)
		assert.Equal(t, []string{"loud"}, names(parseField(t, resp.Header, "RateLimit")), "request %d", i)
	}
}

// TestViolatedPolicies: the problem body names the deciding policy
// first, then each other policy that would not have allowed the request
// either, never a dry-run one.
func TestViolatedPolicies(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "per-second", Limit: 2, Window: time.Second},
		{Name: "per-hour", Limit: 3, Window: time.Hour},
		{Name: "per-day", Limit: 100, Window: 24 * time.Hour},
		{Name: "shadow", Limit: 1, Window: time.Hour, DryRun: true},
	}})
	h := httplimit.Middleware(r, httplimit.Options{Cost: func(req *http.Request) int {
		n, _ := strconv.Atoi(req.URL.Query().Get("n"))
		return max(n, 1)
	}})(hello)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, _ := get(t, srv.Client(), srv.URL+"?n=2")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, body := get(t, srv.Client(), srv.URL+"?n=2")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	p := readProblem(t, http.StatusTooManyRequests, resp.Header, body)
	assert.Equal(t, []string{"per-hour", "per-second"}, p.Violated, "per-hour decides (its wait is the longer); per-second has 0 of the 2 asked; per-day has plenty")
}

// TestNestedSubRequestKeepsItsParent: a handler behind the global
// middleware serves sub-requests in process (a batch endpoint) through a
// route's middleware, with the parent's context. A refused sub-request is
// not the parent's exchange: the parent, whose handler ran, keeps its
// unit (it failed before: the route's middleware found the parent's
// middleware in the context and gave its unit back, so batch requests
// passed the global limit).
func TestNestedSubRequestKeepsItsParent(t *testing.T) {
	global, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 2, Window: time.Hour}}})
	route, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 1, Window: time.Hour}}})
	perRoute := httplimit.Middleware(route, httplimit.Options{})(hello)
	batch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub := httptest.NewRequest(http.MethodGet, "/item", nil).WithContext(r.Context())
		sub.RemoteAddr = r.RemoteAddr
		perRoute.ServeHTTP(httptest.NewRecorder(), sub) // its outcome goes in the batch's body
		w.WriteHeader(http.StatusOK)
	})
	h := httplimit.Middleware(global, httplimit.Options{})(batch)
	var codes []int
	for range 4 {
		codes = append(codes, do(h, "192.0.2.1:1234").Code)
	}
	assert.Equal(t, []int{200, 200, 429, 429}, codes, "the global limit is 2 an hour for the batch requests themselves")
}

// TestNestedErrorHasNoFields: a request the inner middleware could not
// decide gets OnError's answer without fields, not even the outer
// router's, which the give-back made stale (it failed before: they said
// r=4 with 5 left).
func TestNestedErrorHasNoFields(t *testing.T) {
	global, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 5, Window: time.Hour}}})
	route, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 1, Window: time.Hour}}})
	inner := httplimit.Middleware(route, httplimit.Options{Key: httplimit.KeyByPattern}) // no mux: no pattern, an error
	h := httplimit.Middleware(global, httplimit.Options{})(inner(hello))
	rec := do(h, "192.0.2.1:1234")
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	var q chanlimit.Quota
	_, err := global.PeekQuota(context.Background(), "192.0.2.1", 1, &q)
	require.NoError(t, err)
	assert.Equal(t, 5, q.Each[0].Remaining, "given back")
	assert.Empty(t, rec.Header().Values("RateLimit"), "an undecided request's answer has no fields (got the outer's, r=4, stale after the give-back)")
	assert.Empty(t, rec.Header().Values("RateLimit-Policy"))
}

// valueWriter is a ResponseWriter whose type cannot be compared (a struct
// value holding a map): telling two of them apart must not panic.
type valueWriter struct {
	h    http.Header
	code *int
}

func (w valueWriter) Header() http.Header         { return w.h }
func (w valueWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w valueWriter) WriteHeader(code int)        { *w.code = code }

// TestNestedWriterNotComparable: nested middlewares given a ResponseWriter
// of a type that cannot be compared serve the request; the outer one,
// which the inner cannot tell is on its exchange, keeps its unit.
func TestNestedWriterNotComparable(t *testing.T) {
	global, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 5, Window: time.Hour}}})
	route, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 1, Window: time.Hour}}})
	h := httplimit.Middleware(global, httplimit.Options{})(httplimit.Middleware(route, httplimit.Options{})(hello))
	for i, want := range []int{200, 429} {
		code := 200
		h.ServeHTTP(valueWriter{h: http.Header{}, code: &code}, request("192.0.2.1:1234"))
		assert.Equal(t, want, code, "request %d", i)
	}
	assert.Equal(t, 3, remaining(t, global, "192.0.2.1"), "not given back: the inner middleware cannot tell the exchange is the outer's")
}

// TestNestedSameMiddlewareOnce: one middleware mounted twice on a
// request's way (around the mux, and on a route) limits it once: one
// unit, its members once (it took two before, and listed them twice).
func TestNestedSameMiddlewareOnce(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Hour})
	mw := httplimit.Middleware(r, httplimit.Options{})
	mux := http.NewServeMux()
	mux.Handle("GET /x", mw(hello))
	srv := httptest.NewServer(mw(mux))
	defer srv.Close()
	resp, _ := get(t, srv.Client(), srv.URL+"/x")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []member{{"default", map[string]int64{"r": 4, "t": 720}}}, parseField(t, resp.Header, "RateLimit"))
	assert.Equal(t, 4, remaining(t, r, "127.0.0.1"))
}

// hiding is a ResponseWriter wrapper with no Unwrap, as a middleware of
// an older library might add.
type hiding struct{ http.ResponseWriter }

// TestNestedHiddenKeepsFields: a writer with no Unwrap between two
// middlewares hides the outer one from the inner: a refusal by the inner
// gives nothing back, but the response still carries both routers'
// members, the refusing one's first (the inner's replaced the outer's
// before).
func TestNestedHiddenKeepsFields(t *testing.T) {
	outer, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 5, Window: time.Hour}}})
	inner, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 1, Window: time.Hour}}})
	innerMW := httplimit.Middleware(inner, httplimit.Options{})(hello)
	hide := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { innerMW.ServeHTTP(hiding{w}, r) })
	srv := httptest.NewServer(httplimit.Middleware(outer, httplimit.Options{})(hide))
	defer srv.Close()
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp, _ := get(t, srv.Client(), srv.URL)
		require.Equal(t, want, resp.StatusCode, "request %d", i)
		assert.Equal(t, []string{"global", "route"}, names(parseField(t, resp.Header, "RateLimit-Policy")), "request %d", i)
		wantRate := []string{"global", "route"}
		if want == http.StatusTooManyRequests {
			wantRate = []string{"route", "global"}
		}
		assert.Equal(t, wantRate, names(parseField(t, resp.Header, "RateLimit")), "request %d", i)
	}
	assert.Equal(t, 3, remaining(t, outer, "127.0.0.1"), "hidden: the refused request is not given back")
}
