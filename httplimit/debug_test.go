package httplimit_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
			{Name: "per-minute", Algorithm: "sliding_window_counter", Limit: 100, Window: time.Minute},
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
	N        int `json:"n"`
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
		Quoted     string `json:"quoted"`
		Count      uint64 `json:"count"`
		Err        uint64 `json:"err"`
		Allowed    bool   `json:"allowed"`
		RetryAfter string `json:"retry_after"`
		Left       []struct {
			Policy    string `json:"policy"`
			Remaining int    `json:"remaining"`
			More      string `json:"more"`
		} `json:"left"`
		Error   string `json:"error"`
		HeldFor string `json:"held_for"`
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
	assert.Equal(t, 10, v.N, "the keys asked for by default")
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
	assert.Equal(t, 98, top.Left[1].Remaining)
	assert.Equal(t, "59.9s", top.Left[1].More)
	assert.Empty(t, top.Error)

	assert.Equal(t, hostileKey, v.TopDenied[1].Key, "ties in the order of their keys")
	vip := v.TopDenied[2]
	assert.Equal(t, "vip", vip.Key)
	require.Len(t, vip.Left, 1, "its override's policies, not the router's")
	assert.Equal(t, "vip", vip.Left[0].Policy)
	assert.Equal(t, "900ms", vip.Left[0].More)

	n1 := getDebugJSON(t, srv.Client(), srv.URL+"?format=json&n=1")
	assert.Equal(t, 1, n1.N)
	assert.Len(t, n1.TopDenied, 1, "?n= caps the keys listed")
	n0 := getDebugJSON(t, srv.Client(), srv.URL+"?n=0", "Accept", "application/json")
	assert.NotNil(t, n0.TopDenied, "an empty list, not null")
	assert.Empty(t, n0.TopDenied)

	clk.Advance(2 * time.Minute)
	gone := getDebugJSON(t, srv.Client(), srv.URL+"?format=json")
	assert.Empty(t, gone.TopDenied, "two minutes on, both generations have turned")
}

// TestDebugHeldKey: a key held (Router.Hold) is listed as held, in both
// forms, with how long it is refused for, and with its policies' own
// quota; the hold's denials are not counted among its denials; once the
// hold ends it is listed as before.
func TestDebugHeldKey(t *testing.T) {
	r, clk, _ := debugRouter(t) // tenant-42 and hostileKey denied by per-second, first
	ctx := context.Background()
	for _, key := range []string{"tenant-42", hostileKey} {
		require.NoError(t, r.Hold(ctx, key, 30*time.Second))
	}
	clk.Advance(100 * time.Millisecond)
	d, err := r.AllowN(ctx, "tenant-42", 1)
	require.NoError(t, err)
	require.Equal(t, chanlimit.Decision{RetryAfter: 29900 * time.Millisecond, ResetAfter: 119900 * time.Millisecond}, d, "a hold's denial (per-minute, a sliding window counter, is untouched two windows on)")
	srv := httptest.NewServer(httplimit.DebugHandler(r))
	defer srv.Close()

	v := getDebugJSON(t, srv.Client(), srv.URL+"?format=json")
	require.Len(t, v.TopDenied, 3)
	top := v.TopDenied[0]
	assert.Equal(t, "tenant-42", top.Key)
	assert.EqualValues(t, 3, top.Count, "a hold's denials are not the key's own")
	assert.False(t, top.Allowed)
	assert.Equal(t, "29.9s", top.HeldFor, "the hold's end: per-second has a unit again by then")
	assert.Equal(t, "29.9s", top.RetryAfter)
	require.Len(t, top.Left, 2, "the policies' own quota, held or not")
	assert.Equal(t, "400ms", top.Left[0].More)
	assert.Equal(t, hostileKey, v.TopDenied[1].Key)
	assert.Equal(t, "29.9s", v.TopDenied[1].HeldFor)
	assert.Empty(t, v.TopDenied[2].HeldFor, "vip is not held")
	assert.Equal(t, "900ms", v.TopDenied[2].RetryAfter)

	resp, body := get(t, srv.Client(), srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page := string(body)
	row := regexp.MustCompile(`<tr><td class="key">tenant-42</td>.*`).FindString(page)
	assert.Contains(t, row, `<td class="held">held 29.9s</td>`)
	assert.Contains(t, page, `<tr><td class="key">&lt;img src=x onerror=&#34;document.title=&#39;pwned&#39;&#34;&gt;</td><td class="n">1</td><td class="held">held 29.9s</td>`,
		"the hostile key held, escaped as ever")
	assert.NotContains(t, page, "<img")
	assert.Equal(t, 2, strings.Count(page, `class="held"`), "vip is not held")

	clk.Advance(29900 * time.Millisecond)
	v = getDebugJSON(t, srv.Client(), srv.URL+"?format=json")
	require.Len(t, v.TopDenied, 3)
	assert.Empty(t, v.TopDenied[0].HeldFor, "the hold is over")
	assert.True(t, v.TopDenied[0].Allowed)
	_, body = get(t, srv.Client(), srv.URL)
	assert.NotContains(t, string(body), `class="held"`)
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

// TestDebugKeysThatDoNotReadAsThemselves: a key that is not valid UTF-8
// of graphic characters is shown quoted too, so that two keys never look
// the same (JSON has no way to carry a byte that is not UTF-8) and none
// passes for another (a character that turns the text around).
func TestDebugKeysThatDoNotReadAsThemselves(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
	keys := map[string]string{ // each key, and its quoted form ("": none)
		"k\xff":            `"k\xff"`,
		"k\xfe":            `"k\xfe"`,
		"\u202egnp.exe":    `"\u202egnp.exe"`,
		"tab\there":        `"tab\there"`,
		"nul\x00":          `"nul\x00"`,
		"café, 東京 and <b>": "",
	}
	for key := range keys {
		for range 2 {
			_, err := r.AllowN(context.Background(), key, 1)
			require.NoError(t, err)
		}
	}
	srv := httptest.NewServer(httplimit.DebugHandler(r))
	defer srv.Close()

	v := getDebugJSON(t, srv.Client(), srv.URL+"?format=json")
	require.Len(t, v.TopDenied, len(keys))
	for _, k := range v.TopDenied {
		var key string
		if k.Quoted != "" {
			var err error
			key, err = strconv.Unquote(k.Quoted)
			require.NoError(t, err)
		} else {
			key = k.Key
		}
		want, ok := keys[key]
		require.True(t, ok, "%q is one of the keys, read back as it is", key)
		assert.Equal(t, want, k.Quoted, "%q", key)
	}

	_, body := get(t, srv.Client(), srv.URL)
	for key, quoted := range keys {
		if quoted != "" {
			assert.Contains(t, string(body), html.EscapeString(quoted), "the page shows %q quoted", key)
		}
	}
	assert.NotContains(t, string(body), "\u202e", "no character that turns the text around reaches the page")
}

// switchStore is a chanlimit.Store that denies every request (as the
// policy first in the key's set, for a second) while up, cannot answer
// while down, and while hung answers nothing until release is closed.
// ops counts the ops it was asked.
type switchStore struct {
	state   atomic.Int32 // up, down or hung
	ops     atomic.Int64
	release chan struct{}
}

const (
	up = iota
	down
	hung
)

func (*switchStore) Check([]chanlimit.Policy) error { return nil }
func (*switchStore) FailMode() chanlimit.FailMode   { return chanlimit.FailClosed }
func (s *switchStore) Decide(_ context.Context, ops []chanlimit.StoreOp) {
	s.ops.Add(int64(len(ops)))
	switch s.state.Load() {
	case hung:
		<-s.release
		fallthrough
	case down:
		for i := range ops {
			ops[i].Err = errors.New("connection refused")
		}
		return
	}
	for i := range ops {
		p := ops[i].Policies[0]
		ops[i].Decision = chanlimit.Decision{Limit: p.Limit, RetryAfter: time.Second, ResetAfter: time.Second, Policy: cmp.Or(p.Name, chanlimit.DefaultPolicyName)}
	}
}

// TestDebugWithAStore: with a Store, the page peeks through it; while it
// cannot answer, the page still loads at once, having asked it one peek
// (one store error), and while it hangs, having waited a second for it at
// most, each key that was not peeked saying so.
func TestDebugWithAStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &switchStore{release: make(chan struct{})}
		r, err := chanlimit.New(chanlimit.Config{Limit: 5, Window: time.Minute, Store: st})
		require.NoError(t, err)
		defer r.Close()
		defer close(st.release) // before Close, which waits for the round trips out
		ctx := context.Background()
		for _, key := range []string{"a", "b", "c"} {
			d, err := r.AllowN(ctx, key, 1)
			require.NoError(t, err)
			require.False(t, d.Allowed)
		}
		load := func() debugJSON {
			rec := httptest.NewRecorder()
			httplimit.DebugHandler(r).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?format=json", nil))
			require.Equal(t, http.StatusOK, rec.Code, "%s", rec.Body)
			var v debugJSON
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
			return v
		}

		v := load()
		require.Len(t, v.Policies, 1)
		assert.Equal(t, chanlimit.DefaultPolicyName, v.Policies[0].Name, `"" is named as what it means`)
		require.Len(t, v.TopDenied, 3)
		for _, k := range v.TopDenied {
			assert.Empty(t, k.Error)
			assert.False(t, k.Allowed)
			assert.Equal(t, "1s", k.RetryAfter, "as the store said")
			require.Len(t, k.Left, 1, "the deciding policy's alone: the router cannot read the store's states")
			assert.Equal(t, chanlimit.DefaultPolicyName, k.Left[0].Policy)
		}

		st.state.Store(down)
		before := st.ops.Load()
		v = load()
		assert.Equal(t, int64(1), st.ops.Load()-before, "the store was asked one peek")
		assert.Zero(t, v.Stats["store_errors"], "the page reads the Stats before its peeks")
		assert.Contains(t, v.TopDenied[0].Error, "connection refused")
		for _, k := range v.TopDenied[1:] {
			assert.Equal(t, "not peeked: the store could not answer a peek above", k.Error)
		}
		stats, err := r.Stats(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 1, stats.StoreErrors, "the page's one peek")

		st.state.Store(hung)
		start := time.Now() // the bubble's clock: it moves only while every goroutine waits
		v = load()
		assert.Equal(t, time.Second, time.Since(start), "the page waited out its second, no more")
		assert.Contains(t, v.TopDenied[0].Error, context.DeadlineExceeded.Error())
		for _, k := range v.TopDenied[1:] {
			assert.Equal(t, "not peeked: the peeks of this load took 1s already", k.Error)
		}
	})
}
