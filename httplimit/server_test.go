package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// The tests here go through a real http.Server on 127.0.0.1 and a real
// http.Client: the fields as a client receives them.

// get sends a GET to url with the given headers, and returns the
// response with its body read.
func get(t *testing.T, client *http.Client, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// hello is the handler behind the middleware.
var hello = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello\n") })

func TestRealServer(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "per-second", Limit: 2, Window: time.Second},
		{Name: "per-minute", Algorithm: "sliding_window_counter", Limit: 30, Window: time.Minute},
	}})
	mux := http.NewServeMux()
	mux.Handle("GET /hello", httplimit.Middleware(r, httplimit.Options{})(hello))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := srv.Client()
	policy := []member{{"per-second", map[string]int64{"q": 2, "w": 1}}, {"per-minute", map[string]int64{"q": 30, "w": 60}}}

	remaining := [][2]int64{{1, 29}, {0, 28}, {0, 28}} // per-second's, per-minute's: a refusal takes nothing
	for i, want := range []int{200, 200, 429} {
		resp, body := get(t, client, srv.URL+"/hello")
		require.Equal(t, want, resp.StatusCode, "request %d", i)
		assert.Equal(t, policy, parseField(t, resp.Header, "RateLimit-Policy"))
		rate := parseField(t, resp.Header, "RateLimit")
		require.Len(t, rate, 2, "a member for each policy")
		assert.Equal(t, "per-second", rate[0].Name, "the deciding policy first")
		assert.Equal(t, "per-minute", rate[1].Name)
		assert.Equal(t, remaining[i][0], rate[0].Params["r"], "request %d", i)
		assert.Equal(t, remaining[i][1], rate[1].Params["r"], "request %d", i)
		if want == 200 {
			assert.Equal(t, "hello\n", string(body))
			continue
		}
		assert.Equal(t, "1", resp.Header.Get("Retry-After"))
		p := readProblem(t, 429, resp.Header, body)
		assert.Equal(t, "per-second", p.Policy)
	}
	clk.Advance(500 * time.Millisecond)
	resp, _ := get(t, client, srv.URL+"/hello")
	assert.Equal(t, 200, resp.StatusCode, "a token after 500ms")

	st, err := r.Stats(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Keys, "every request came from 127.0.0.1")
}

// TestRealServerSpoofing: behind a trusted proxy (here, 127.0.0.1 is
// the proxy) each client has its own quota; when the peer is not
// trusted, X-Forwarded-For changes nothing, whatever a client writes.
func TestRealServerSpoofing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted netip.Prefix
		keys    int // keys the router holds after the three clients
		allowed int
	}{
		{"127.0.0.1 is a trusted proxy", netip.MustParsePrefix("127.0.0.0/8"), 3, 3},
		{"127.0.0.1 is not trusted", netip.MustParsePrefix("10.0.0.0/8"), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
			srv := httptest.NewServer(httplimit.Middleware(r, httplimit.Options{Key: httplimit.KeyByForwarded(tc.trusted)})(hello))
			defer srv.Close()
			allowed := 0
			for _, xff := range []string{"203.0.113.1", "203.0.113.2", "10.1.1.1, 203.0.113.3"} {
				resp, _ := get(t, srv.Client(), srv.URL, "X-Forwarded-For", xff)
				if resp.StatusCode == 200 {
					allowed++
				}
			}
			assert.Equal(t, tc.allowed, allowed)
			st, err := r.Stats(context.Background())
			require.NoError(t, err)
			assert.Equal(t, tc.keys, st.Keys)
		})
	}
}

// TestRealServerClientGoesAway: a client that hangs up while its request
// waits in line takes nothing, never reaches the handler, and leaves the
// line at once.
func TestRealServerClientGoesAway(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
	errs := make(chan error, 1)
	onError := func(w http.ResponseWriter, req *http.Request, err error) {
		errs <- err
		httplimit.WriteError(w, req, err)
	}
	next := &counting{}
	srv := httptest.NewServer(httplimit.Middleware(r, httplimit.Options{MaxWait: time.Hour, OnError: onError})(next))
	defer srv.Close()
	resp, _ := get(t, srv.Client(), srv.URL)
	require.Equal(t, 204, resp.StatusCode)

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	failed := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		failed <- err
	}()
	// The request is in line once the partition has set its timer (on
	// the fake clock, which nothing advances).
	require.NoError(t, clk.BlockUntilContext(context.Background(), 1))
	st, err := r.Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, st.Waiting)
	cancel()
	require.ErrorIs(t, <-failed, context.Canceled)
	require.ErrorIs(t, <-errs, context.Canceled, "the server saw the client go")
	st, err = r.Stats(context.Background())
	require.NoError(t, err)
	assert.Zero(t, st.Waiting)
	assert.Equal(t, 1, next.served)
	d, err := r.Peek(context.Background(), "127.0.0.1", 1)
	require.NoError(t, err)
	assert.Equal(t, time.Minute, d.RetryAfter, "the waiter took nothing, and no one is in line")
}

// TestRealServerHeldKey: a request on a key held (Router.Hold) is refused
// with Retry-After from the hold, each policy's own member in RateLimit,
// and a problem that names no policy; the handler never sees it, and
// nothing is taken from the policies.
func TestRealServerHeldKey(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "per-second", Limit: 2, Window: time.Second},
		{Name: "per-minute", Algorithm: "sliding_window_counter", Limit: 30, Window: time.Minute},
	}})
	var served atomic.Int32
	srv := httptest.NewServer(httplimit.Middleware(r, httplimit.Options{})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
	})))
	defer srv.Close()
	client := srv.Client()

	resp, _ := get(t, client, srv.URL)
	require.Equal(t, 200, resp.StatusCode)
	require.NoError(t, r.Hold(context.Background(), "127.0.0.1", 90*time.Second+time.Millisecond))
	resp, body := get(t, client, srv.URL)
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "91", resp.Header.Get("Retry-After"), "the hold's, in whole seconds, rounded up")
	rate := parseField(t, resp.Header, "RateLimit")
	require.Len(t, rate, 2, "each policy's own member")
	assert.Equal(t, member{"per-second", map[string]int64{"r": 1, "t": 1}}, rate[0])
	assert.Equal(t, member{"per-minute", map[string]int64{"r": 29, "t": 60}}, rate[1])
	p := readProblem(t, 429, resp.Header, body)
	assert.Empty(t, p.Policy, "no policy refused")
	assert.Contains(t, p.Detail, "held")
	assert.Equal(t, int64(91), p.RetryAfter)
	assert.Equal(t, int32(1), served.Load(), "the handler saw the first request alone")

	clk.Advance(90*time.Second + time.Millisecond)
	resp, _ = get(t, client, srv.URL)
	assert.Equal(t, 200, resp.StatusCode)
}

// TestRealServerHeldKeyDryRunOnly: a key under dry-run policies alone has
// no fields, but a hold still refuses it, with its Retry-After.
func TestRealServerHeldKeyDryRunOnly(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "shadow", Limit: 1, Window: time.Second, DryRun: true}}})
	srv := httptest.NewServer(httplimit.Middleware(r, httplimit.Options{})(hello))
	defer srv.Close()
	require.NoError(t, r.Hold(context.Background(), "127.0.0.1", 2500*time.Millisecond))
	resp, body := get(t, srv.Client(), srv.URL)
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "3", resp.Header.Get("Retry-After"))
	assert.Empty(t, resp.Header.Values("RateLimit"))
	assert.Equal(t, int64(3), readProblem(t, 429, resp.Header, body).RetryAfter)
}
