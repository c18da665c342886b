package httplimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
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

// hostileKey is a key as a client may choose it: HTML that runs a script
// if a page ever parses it.
const hostileKey = `<img src=x onerror="document.title='pwned'">`

// debugRouter returns a router on a fake clock with three policies (one a
// dry run) and an override, after some denials: tenant-42 three of five,
// hostileKey and vip (under its override) one each, quiet none. observed
// counts the events its Observe is told of.
func debugRouter(t *testing.T) (r *chanlimit.Router, clk *clock.Fake, observed *atomic.Int64) {
	t.Helper()
	observed = new(atomic.Int64)
	r, clk = newRouter(t, chanlimit.Config{
		Policies: []chanlimit.Policy{
			{Name: "per-second", Limit: 2, Window: time.Second},
			{Name: "per-minute", Algorithm: "sliding_window_counter", Limit: 30, Window: time.Minute},
			{Name: "shadow", Algorithm: "fixed_window", Limit: 1, Window: time.Minute, DryRun: true},
		},
		Observe: func(context.Context, chanlimit.Event) { observed.Add(1) },
	})
	ctx := context.Background()
	require.NoError(t, r.SetOverride(ctx, "vip", chanlimit.Policy{Name: "vip", Algorithm: "token_bucket", Limit: 1, Window: time.Second, Burst: 1}))
	for key, n := range map[string]int{"tenant-42": 5, hostileKey: 3, "vip": 2, "quiet": 1} {
		for range n {
			_, err := r.AllowN(ctx, key, 1)
			require.NoError(t, err)
		}
	}
	return r, clk, observed
}

// debugJSON is the JSON form of the debug page, as a client decodes it.
type debugJSON struct {
	Policies []struct {
		Name      string `json:"name"`
		Algorithm string `json:"algorithm"`
		Limit     int    `json:"limit"`
		Window    string `json:"window"`
		Burst     int    `json:"burst"`
		DryRun    bool   `json:"dry_run"`
	} `json:"policies"`
	Stats       map[string]int64 `json:"stats"`
	PolicyStats []struct {
		Name      string `json:"name"`
		Denied    uint64 `json:"denied"`
		WouldDeny uint64 `json:"would_deny"`
	} `json:"policy_stats"`
	TopDenied []struct {
		Key        string `json:"key"`
		Count      uint64 `json:"count"`
		Err        uint64 `json:"err"`
		Allowed    bool   `json:"allowed"`
		RetryAfter string `json:"retry_after"`
		Left       []struct {
			Policy    string `json:"policy"`
			Remaining int    `json:"remaining"`
			More      string `json:"more"`
		} `json:"left"`
		Error string `json:"error"`
	} `json:"top_denied"`
}

func getDebugJSON(t *testing.T, client *http.Client, url string, header ...string) debugJSON {
	t.Helper()
	resp, body := get(t, client, url, header...)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var v debugJSON
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields() // every key the page sends is one this test knows
	require.NoError(t, dec.Decode(&v))
	return v
}

// TestDebugJSON: the JSON form lists the policies, the Stats, each
// policy's counts and the top denied keys, each with what a peek of one
// unit says it has now under each of its policies.
func TestDebugJSON(t *testing.T) {
	r, clk, _ := debugRouter(t)
	srv := httptest.NewServer(httplimit.DebugHandler(r))
	defer srv.Close()
	clk.Advance(100 * time.Millisecond)

	v := getDebugJSON(t, srv.Client(), srv.URL+"?format=json")
	require.Len(t, v.Policies, 3)
	assert.Equal(t, "per-second", v.Policies[0].Name)
	assert.Equal(t, chanlimit.DefaultAlgorithm, v.Policies[0].Algorithm, `"" is named as what it means`)
	assert.Equal(t, 2, v.Policies[0].Limit)
	assert.Equal(t, "1s", v.Policies[0].Window)
	assert.Equal(t, "1m0s", v.Policies[1].Window)
	assert.True(t, v.Policies[2].DryRun)

	assert.EqualValues(t, 6, v.Stats["allowed"], "2 of tenant-42, 2 of hostileKey, 1 of vip, 1 of quiet")
	assert.EqualValues(t, 5, v.Stats["denied"])
	assert.EqualValues(t, 4, v.Stats["keys"])
	assert.EqualValues(t, 1, v.Stats["overrides"])
	assert.EqualValues(t, 6, v.Stats["would_deny"], "shadow's 1 a minute: all but tenant-42's and hostileKey's first requests")
	assert.Positive(t, v.Stats["partitions"])

	byName := map[string][2]uint64{}
	for _, p := range v.PolicyStats {
		byName[p.Name] = [2]uint64{p.Denied, p.WouldDeny}
	}
	assert.Equal(t, map[string][2]uint64{"per-second": {4, 0}, "per-minute": {0, 0}, "shadow": {0, 6}, "vip": {1, 0}}, byName)

	require.Len(t, v.TopDenied, 3)
	top := v.TopDenied[0]
	assert.Equal(t, "tenant-42", top.Key)
	assert.EqualValues(t, 3, top.Count)
	assert.Zero(t, top.Err)
	assert.False(t, top.Allowed, "per-second has nothing for 400ms more")
	assert.Equal(t, "400ms", top.RetryAfter)
	require.Len(t, top.Left, 2, "the enforced policies: a dry run's quota is never told")
	assert.Equal(t, "per-second", top.Left[0].Policy)
	assert.Equal(t, 0, top.Left[0].Remaining)
	assert.Equal(t, "400ms", top.Left[0].More)
	assert.Equal(t, "per-minute", top.Left[1].Policy)
	assert.Equal(t, 28, top.Left[1].Remaining)
	assert.Equal(t, "59.9s", top.Left[1].More)
	assert.Empty(t, top.Error)

	assert.Equal(t, hostileKey, v.TopDenied[1].Key, "ties in the order of their keys")
	vip := v.TopDenied[2]
	assert.Equal(t, "vip", vip.Key)
	require.Len(t, vip.Left, 1, "its override's policies, not the router's")
	assert.Equal(t, "vip", vip.Left[0].Policy)
	assert.Equal(t, "900ms", vip.Left[0].More)

	n1 := getDebugJSON(t, srv.Client(), srv.URL+"?format=json&n=1")
	assert.Len(t, n1.TopDenied, 1, "?n= caps the keys listed")
	n0 := getDebugJSON(t, srv.Client(), srv.URL+"?n=0", "Accept", "application/json")
	assert.NotNil(t, n0.TopDenied, "an empty list, not null")
	assert.Empty(t, n0.TopDenied)

	clk.Advance(2 * time.Minute)
	gone := getDebugJSON(t, srv.Client(), srv.URL+"?format=json")
	assert.Empty(t, gone.TopDenied, "two minutes on, both generations have turned")
}

// TestDebugChangesNothing: loading the page, in either form, takes
// nothing from any key, adds no key, and is neither counted nor
// observed.
func TestDebugChangesNothing(t *testing.T) {
	r, clk, observed := debugRouter(t)
	srv := httptest.NewServer(httplimit.DebugHandler(r))
	defer srv.Close()
	ctx := context.Background()
	keys := []string{"tenant-42", hostileKey, "vip", "quiet"}
	peeks := func() []chanlimit.Decision {
		ds := make([]chanlimit.Decision, len(keys))
		for i, key := range keys {
			var err error
			ds[i], err = r.Peek(ctx, key, 1)
			require.NoError(t, err)
		}
		return ds
	}
	// At 100ms every key is in use, partly spent; at 90s one has been let
	// go, and TopDenied still lists it: a peek must not bring it back.
	for _, step := range []time.Duration{100 * time.Millisecond, 90 * time.Second} {
		clk.Advance(step)
		_, err := r.Stats(ctx) // each partition lets go of the keys whose grace is over once it has answered
		require.NoError(t, err)
		peeked := peeks()
		before, err := r.Stats(ctx)
		require.NoError(t, err)
		if step > time.Minute {
			require.Positive(t, before.Expired, "a key listed has been let go")
		}
		events := observed.Load()

		for _, url := range []string{srv.URL, srv.URL + "?format=json", srv.URL + "?n=100"} {
			for range 3 {
				resp, _ := get(t, srv.Client(), url)
				require.Equal(t, http.StatusOK, resp.StatusCode)
			}
		}
		v := getDebugJSON(t, srv.Client(), srv.URL+"?format=json")
		require.Len(t, v.TopDenied, 3, "at %v the page peeks at the keys", step)

		after, err := r.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, before, after, "at %v: no key added, nothing counted", step)
		assert.Equal(t, peeked, peeks(), "at %v: nothing taken from any key", step)
		assert.Equal(t, events, observed.Load(), "at %v: the page's peeks are not observed", step)
	}
}

// TestDebugNegotiation: JSON when the request asks for it by ?format=json
// or prefers application/json in Accept; HTML otherwise.
func TestDebugNegotiation(t *testing.T) {
	r, _, _ := debugRouter(t)
	srv := httptest.NewServer(httplimit.DebugHandler(r))
	defer srv.Close()
	for _, c := range []struct {
		query, accept string
		json          bool
	}{
		{"", "", false},
		{"", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", false}, // a browser's
		{"", "application/json", true},
		{"", "application/json, text/plain, */*", true}, // a fetch library's
		{"", "text/html;q=0.5, application/json", true},
		{"", "application/json;q=0.4, text/html", false},
		{"", "application/json;q=0", false},
		{"", "application/json;q=nonsense", false},
		{"", "*/*", false},
		{"?format=json", "text/html", true},
		{"?format=html", "application/json", false},
	} {
		var header []string
		if c.accept != "" {
			header = []string{"Accept", c.accept}
		}
		resp, body := get(t, srv.Client(), srv.URL+c.query, header...)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%q %q", c.query, c.accept)
		assert.Contains(t, resp.Header.Values("Vary"), "Accept")
		assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		if c.json {
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%q %q", c.query, c.accept)
			assert.True(t, json.Valid(body))
		} else {
			assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"), "%q %q", c.query, c.accept)
		}
	}
}

// TestDebugHTML: the page names the policies and the top denied keys,
// escaping them, and its Content-Security-Policy lets its own inline
// script and style run, by their hashes, and nothing else.
func TestDebugHTML(t *testing.T) {
	r, _, _ := debugRouter(t)
	srv := httptest.NewServer(httplimit.DebugHandler(r))
	defer srv.Close()
	resp, body := get(t, srv.Client(), srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page := string(body)
	for _, name := range []string{"per-second", "per-minute", "shadow", "vip", "tenant-42"} {
		assert.Contains(t, page, name)
	}
	assert.NotContains(t, page, "<img", "the key is text, never markup")
	assert.Contains(t, page, "&lt;img src=x onerror=&#34;document.title=&#39;pwned&#39;&#34;&gt;")

	csp := resp.Header.Get("Content-Security-Policy")
	assert.Contains(t, csp, "default-src 'none'")
	assert.Contains(t, csp, "connect-src 'self'")
	for _, tag := range []string{"script", "style"} {
		m := regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllStringSubmatch(page, -1)
		require.Len(t, m, 1, "one inline %s", tag)
		sum := sha256.Sum256([]byte(m[0][1]))
		assert.Contains(t, csp, tag+"-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'", "the page's own %s, as served, runs", tag)
	}
	assert.NotRegexp(t, `(?i)<(script|link|img)[^>]+(src|href)=`, page, "nothing fetched from elsewhere")
}

// TestDebugRefuses: the page changes nothing, so it answers only GET and
// HEAD; a bad ?n= or ?format= is a 400, a closed router a 503, and no
// router a 500, each as problem+json.
func TestDebugRefuses(t *testing.T) {
	r, _, _ := debugRouter(t)
	srv := httptest.NewServer(httplimit.DebugHandler(r))
	defer srv.Close()
	client := srv.Client()

	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		req, err := http.NewRequest(method, srv.URL, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, method)
		assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
	}
	resp, err := client.Head(srv.URL)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	for _, q := range []string{"?n=-1", "?n=101", "?n=ten", "?format=xml"} {
		resp, body := get(t, client, srv.URL+q)
		readProblem(t, http.StatusBadRequest, resp.Header, body)
	}

	require.NoError(t, r.Close())
	resp, body := get(t, client, srv.URL)
	readProblem(t, http.StatusServiceUnavailable, resp.Header, body)

	none := httptest.NewServer(httplimit.DebugHandler(nil))
	defer none.Close()
	resp, body = get(t, none.Client(), none.URL)
	readProblem(t, http.StatusInternalServerError, resp.Header, body)
}
