package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/httplimit"
)

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

// member is one member of a RateLimit or RateLimit-Policy field: a policy
// name and its integer parameters.
type member struct {
	Name   string
	Params map[string]int64
}

// parseField parses a RateLimit or RateLimit-Policy field with a real
// Structured Fields parser, and requires each member to be a String with
// Integer parameters, as the draft says.
func parseField(t *testing.T, h http.Header, name string) []member {
	t.Helper()
	values := h.Values(name)
	require.NotEmpty(t, values, "no %s field", name)
	list, err := httpsfv.UnmarshalList(values)
	require.NoError(t, err, "%s: %q", name, values)
	out := make([]member, 0, len(list))
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		require.True(t, ok, "%s: an inner list: %q", name, values)
		s, ok := item.Value.(string)
		require.True(t, ok, "%s: the policy name is a String: %q", name, values)
		params := map[string]int64{}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			require.True(t, ok, "%s: parameter %s is an Integer: %q", name, k, values)
			params[k] = n
		}
		out = append(out, member{s, params})
	}
	return out
}

// problemBody is an RFC 9457 problem details object.
type problemBody struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Detail     string   `json:"detail"`
	Violated   []string `json:"violated-policies"`
	Policy     string   `json:"policy"`
	RetryAfter int64    `json:"retry_after"`
}

// readProblem decodes a problem+json response with the given status.
func readProblem(t *testing.T, status int, h http.Header, body []byte) problemBody {
	t.Helper()
	assert.Equal(t, "application/problem+json", h.Get("Content-Type"))
	var p problemBody
	require.NoError(t, json.Unmarshal(body, &p), "%s", body)
	assert.Equal(t, status, p.Status)
	if status == http.StatusTooManyRequests && p.Policy != "" { // a refusal by a policy: the draft's problem type
		assert.Equal(t, httplimit.ProblemQuotaExceeded, p.Type)
		assert.Equal(t, "Request cannot be satisfied as assigned quota has been exceeded", p.Title)
		require.NotEmpty(t, p.Violated)
		assert.Equal(t, p.Policy, p.Violated[0], "the deciding policy is the first violated one")
		return p
	}
	assert.Equal(t, http.StatusText(status), p.Title)
	assert.Equal(t, "about:blank", p.Type)
	assert.Empty(t, p.Violated)
	return p
}

// counting is a handler that counts the requests it serves.
type counting struct{ served int }

func (c *counting) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	c.served++
	w.WriteHeader(http.StatusNoContent)
}

// do serves one request from remoteAddr through h into a recorder.
func do(h http.Handler, remoteAddr string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request(remoteAddr))
	return rec
}

// TestFieldsStepByStep: two policies on a fake clock; each response's
// fields, parsed, say what the router decided: RateLimit has a member for
// each policy, the deciding one first, each with its own r and t; a
// refusal is a 429 with Retry-After equal to the deciding member's t,
// both rounded up.
func TestFieldsStepByStep(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "burst", Limit: 2, Window: 1500 * time.Millisecond},                               // a token every 750ms
		{Name: "hour", Algorithm: "fixed_window", Limit: 4, Window: time.Hour - time.Nanosecond}, // w rounds up to 3600
	}})
	next := &counting{}
	h := httplimit.Middleware(r, httplimit.Options{})(next)
	policy := []member{
		{"burst", map[string]int64{"q": 2, "w": 2}},
		{"hour", map[string]int64{"q": 4, "w": 3600}},
	}
	const ip = "192.0.2.7:1"
	rate := func(name string, r, t int64) member { return member{name, map[string]int64{"r": r, "t": t}} }
	for i, step := range []struct {
		advance time.Duration
		status  int
		rate    []member // RateLimit
	}{
		// allowed: the policy with the fewest left first; each t until
		// that policy has one more than its r (a token of burst in 750ms,
		// the hour's window in 3600s)
		{0, 204, []member{rate("burst", 1, 1), rate("hour", 3, 3600)}},
		{0, 204, []member{rate("burst", 0, 1), rate("hour", 2, 3600)}},
		// refused by burst: a token in 750ms, t and Retry-After 1; the
		// hour, which took nothing, as it is
		{0, 429, []member{rate("burst", 0, 1), rate("hour", 2, 3600)}},
		{700 * time.Millisecond, 429, []member{rate("burst", 0, 1), rate("hour", 2, 3600)}}, // 50ms left: still 1
		{50 * time.Millisecond, 204, []member{rate("burst", 0, 1), rate("hour", 1, 3600)}},
		{2 * time.Second, 204, []member{rate("hour", 0, 3598), rate("burst", 1, 1)}}, // the hour's last; burst has 1 left
		// refused by the hour: its window ends 3597.75s from now, rounded up
		{0, 429, []member{rate("hour", 0, 3598), rate("burst", 1, 1)}},
	} {
		clk.Advance(step.advance)
		rec := do(h, ip)
		require.Equal(t, step.status, rec.Code, "step %d", i)
		assert.Equal(t, policy, parseField(t, rec.Header(), "RateLimit-Policy"), "step %d", i)
		assert.Equal(t, step.rate, parseField(t, rec.Header(), "RateLimit"), "step %d", i)
		if step.status == 429 {
			deciding := step.rate[0]
			assert.Equal(t, strconv.FormatInt(deciding.Params["t"], 10), rec.Header().Get("Retry-After"), "step %d", i)
			p := readProblem(t, 429, rec.Header(), rec.Body.Bytes())
			assert.Equal(t, deciding.Name, p.Policy)
			assert.Equal(t, deciding.Params["t"], p.RetryAfter)
		} else {
			assert.Empty(t, rec.Header().Values("Retry-After"), "step %d", i)
		}
	}
	assert.Equal(t, 4, next.served, "the handler sees only what was allowed")
}

// TestRetryAfterIsWhenTheRequestPasses: over random steps of a fake
// clock, every refusal's Retry-After is the exact wait rounded up: the
// same request is refused a nanosecond before the whole seconds before it,
// and allowed once they have passed.
func TestRetryAfterIsWhenTheRequestPasses(t *testing.T) {
	for _, alg := range chanlimit.RegisteredAlgorithms() {
		t.Run(alg, func(t *testing.T) {
			r, clk := newRouter(t, chanlimit.Config{Algorithm: alg, Limit: 3, Window: 2500 * time.Millisecond})
			h := httplimit.Middleware(r, httplimit.Options{})(&counting{})
			for i := range 40 {
				clk.Advance(time.Duration(i%7) * 130 * time.Millisecond)
				rec := do(h, "192.0.2.7:1")
				if rec.Code != 429 {
					require.Equal(t, 204, rec.Code)
					continue
				}
				secs, err := strconv.Atoi(rec.Header().Get("Retry-After"))
				require.NoError(t, err)
				d, err := r.Peek(context.Background(), "192.0.2.7", 1)
				require.NoError(t, err)
				require.False(t, d.Allowed)
				wait := d.RetryAfter
				assert.Equal(t, int64(secs), int64((wait+time.Second-1)/time.Second), "rounded up")
				clk.Advance(wait - time.Nanosecond)
				d, err = r.Peek(context.Background(), "192.0.2.7", 1)
				require.NoError(t, err)
				assert.False(t, d.Allowed, "not before RetryAfter")
				clk.Advance(time.Duration(secs)*time.Second - (wait - time.Nanosecond)) // Retry-After seconds in all
				rec = do(h, "192.0.2.7:1")
				assert.Equal(t, 204, rec.Code, "after Retry-After seconds")
			}
		})
	}
}

// TestPolicyNamesAreEscaped: a name with a quote and a backslash comes
// back whole through the parser.
func TestPolicyNamesAreEscaped(t *testing.T) {
	name := `a "quoted" \ name`
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: name, Limit: 1, Window: time.Second}}})
	h := httplimit.Middleware(r, httplimit.Options{})(&counting{})
	for _, code := range []int{204, 429} {
		rec := do(h, "192.0.2.7:1")
		require.Equal(t, code, rec.Code)
		assert.Equal(t, name, parseField(t, rec.Header(), "RateLimit-Policy")[0].Name)
		assert.Equal(t, name, parseField(t, rec.Header(), "RateLimit")[0].Name)
	}
}

// TestOverrideFields: a key with an override gets its override's
// policies in RateLimit-Policy, the others the router's, as overrides
// come and go.
func TestOverrideFields(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Minute, Partitions: 4})
	h := httplimit.Middleware(r, httplimit.Options{Key: httplimit.KeyByHeader("X-Tenant")})(&counting{})
	get := func(tenant string) []member {
		req := request("192.0.2.7:1")
		req.Header.Set("X-Tenant", tenant)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, 204, rec.Code)
		return parseField(t, rec.Header(), "RateLimit-Policy")
	}
	def := []member{{"default", map[string]int64{"q": 10, "w": 60}}}
	assert.Equal(t, def, get("acme"))
	vip := []chanlimit.Policy{{Name: "vip", Limit: 1000, Window: time.Minute}, {Name: "vip-day", Algorithm: "fixed_window", Limit: 100000, Window: 24 * time.Hour}}
	require.NoError(t, r.SetOverride(context.Background(), "acme", vip...))
	for range 3 { // the values are kept: each must still be the key's own
		assert.Equal(t, []member{{"vip", map[string]int64{"q": 1000, "w": 60}}, {"vip-day", map[string]int64{"q": 100000, "w": 86400}}}, get("acme"))
		assert.Equal(t, def, get("globex"))
	}
	require.NoError(t, r.ClearOverride(context.Background(), "acme"))
	assert.Equal(t, def, get("acme"))
	require.NoError(t, r.SetPolicies(context.Background(), chanlimit.Policy{Name: "new", Limit: 5, Window: 90 * time.Second}))
	assert.Equal(t, []member{{"new", map[string]int64{"q": 5, "w": 90}}}, get("globex"))
}

// TestCost: an expensive request takes its cost; one above capacity is a
// 400 at once, waiting or not, and never reaches the handler; a cost
// below 1 is the server's mistake, a 500.
func TestCost(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute})
	cost := 3
	next := &counting{}
	for _, maxWait := range []time.Duration{0, time.Hour} {
		h := httplimit.Middleware(r, httplimit.Options{Cost: func(*http.Request) int { return cost }, MaxWait: maxWait})(next)
		cost = 6
		rec := do(h, "192.0.2.7:1")
		assert.Equal(t, 400, rec.Code, "above capacity")
		readProblem(t, 400, rec.Header(), rec.Body.Bytes())
		assert.Empty(t, rec.Header().Values("RateLimit"))
		cost = 0
		rec = do(h, "192.0.2.7:1")
		assert.Equal(t, 500, rec.Code, "a cost below 1")
	}
	h := httplimit.Middleware(r, httplimit.Options{Cost: func(*http.Request) int { return cost }})(next)
	cost = 3
	rec := do(h, "192.0.2.7:1")
	require.Equal(t, 204, rec.Code)
	assert.Equal(t, int64(2), parseField(t, rec.Header(), "RateLimit")[0].Params["r"])
	rec = do(h, "192.0.2.7:1")
	require.Equal(t, 429, rec.Code, "3 more than the 2 left")
	assert.Equal(t, 1, next.served)
}

// TestErrors: what the default OnError answers, and that a custom one
// gets the error; the handler never runs.
func TestErrors(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute, MaxKeyBytes: 10})
	errMine := errors.New("no session")
	next := &counting{}
	for _, tc := range []struct {
		name   string
		opts   httplimit.Options
		remote string
		status int
		is     error
	}{
		{"RemoteAddr no address", httplimit.Options{}, "@", 400, httplimit.ErrNoKey},
		{"missing header", httplimit.Options{Key: httplimit.KeyByHeader("X-Api-Key")}, "192.0.2.7:1", 400, httplimit.ErrNoKey},
		{"key too long", httplimit.Options{Key: func(*http.Request) (string, error) { return "0123456789a", nil }}, "192.0.2.7:1", 400, chanlimit.ErrKeyTooLong},
		{"the key function's own error", httplimit.Options{Key: func(*http.Request) (string, error) { return "", errMine }}, "192.0.2.7:1", 500, errMine},
	} {
		rec := do(httplimit.Middleware(r, tc.opts)(next), tc.remote)
		assert.Equal(t, tc.status, rec.Code, tc.name)
		readProblem(t, tc.status, rec.Header(), rec.Body.Bytes())
		assert.Empty(t, rec.Header().Values("RateLimit"), tc.name)

		var got error
		tc.opts.OnError = func(w http.ResponseWriter, _ *http.Request, err error) {
			got = err
			w.WriteHeader(418)
		}
		rec = do(httplimit.Middleware(r, tc.opts)(next), tc.remote)
		assert.Equal(t, 418, rec.Code, tc.name)
		assert.ErrorIs(t, got, tc.is, tc.name)
		if tc.status == 500 || errors.Is(tc.is, httplimit.ErrNoKey) {
			assert.ErrorIs(t, got, httplimit.ErrKey, tc.name)
		}
	}
	rec := do(httplimit.Middleware(nil, httplimit.Options{})(next), "192.0.2.7:1")
	assert.Equal(t, 500, rec.Code, "no router")
	rec = do(httplimit.Middleware(r, httplimit.Options{})(nil), "192.0.2.7:1")
	assert.Equal(t, 500, rec.Code, "no handler")
	assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))

	require.NoError(t, r.Close())
	rec = do(httplimit.Middleware(r, httplimit.Options{})(next), "192.0.2.7:1")
	assert.Equal(t, 503, rec.Code, "a closed router")
	readProblem(t, 503, rec.Header(), rec.Body.Bytes())
	assert.Zero(t, next.served)
}

// TestTooManyKeys: a router holding all the keys it may refuses a new
// one with 503.
func TestTooManyKeys(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute, MaxKeys: 1, Partitions: 1})
	h := httplimit.Middleware(r, httplimit.Options{})(&counting{})
	assert.Equal(t, 204, do(h, "192.0.2.1:1").Code)
	assert.Equal(t, 503, do(h, "192.0.2.2:1").Code)
}

// downStore is a chanlimit.Store that never answers.
type downStore struct{ mode chanlimit.FailMode }

func (downStore) Check([]chanlimit.Policy) error { return nil }
func (s downStore) FailMode() chanlimit.FailMode { return s.mode }
func (downStore) Decide(_ context.Context, ops []chanlimit.StoreOp) {
	for i := range ops {
		ops[i].Err = errors.New("connection refused")
	}
}

// TestStoreUnavailable: a Store that cannot answer is a 503 under
// FailClosed, and lets the request through under FailOpen.
func TestStoreUnavailable(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute, Store: downStore{chanlimit.FailClosed}})
	next := &counting{}
	rec := do(httplimit.Middleware(r, httplimit.Options{})(next), "192.0.2.1:1")
	assert.Equal(t, 503, rec.Code)
	readProblem(t, 503, rec.Header(), rec.Body.Bytes())
	assert.Zero(t, next.served)

	r, _ = newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute, Store: downStore{chanlimit.FailOpen}})
	assert.Equal(t, 204, do(httplimit.Middleware(r, httplimit.Options{})(next), "192.0.2.1:1").Code)
	assert.Equal(t, 1, next.served)
}

// TestOnLimited: a custom refusal gets the fields set and the Decision.
func TestOnLimited(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: 10 * time.Second})
	var got chanlimit.Decision
	onLimited := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var ok bool
		got, ok = httplimit.DecisionFrom(req)
		assert.True(t, ok)
		assert.NotEmpty(t, w.Header().Get("Retry-After"))
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	next := &counting{}
	h := httplimit.Middleware(r, httplimit.Options{OnLimited: onLimited})(next)
	assert.Equal(t, 204, do(h, "192.0.2.7:1").Code)
	rec := do(h, "192.0.2.7:1")
	assert.Equal(t, 503, rec.Code)
	assert.False(t, got.Allowed)
	assert.Equal(t, 10*time.Second, got.RetryAfter)
	assert.Equal(t, "10", rec.Header().Get("Retry-After"))
	assert.Equal(t, 1, next.served)
	_, ok := httplimit.DecisionFrom(request("192.0.2.7:1"))
	assert.False(t, ok)
}

// TestErrorStatus: the status WriteError answers each error with, for a
// request or none.
func TestErrorStatus(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	gone := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ended)
	for _, c := range []struct {
		r    *http.Request
		err  error
		want int
	}{
		{nil, httplimit.ErrNoKey, http.StatusBadRequest},
		{nil, fmt.Errorf("%w: %w", httplimit.ErrKey, chanlimit.ErrKeyTooLong), http.StatusBadRequest},
		{nil, chanlimit.ErrExceedsCapacity, http.StatusBadRequest},
		{nil, chanlimit.ErrClosed, http.StatusServiceUnavailable},
		{nil, chanlimit.ErrTooManyKeys, http.StatusServiceUnavailable},
		{nil, chanlimit.ErrStoreUnavailable, http.StatusServiceUnavailable},
		{gone, context.Canceled, http.StatusServiceUnavailable},
		{nil, context.Canceled, http.StatusInternalServerError},
		{nil, errors.New("the key function's own"), http.StatusInternalServerError},
	} {
		assert.Equal(t, c.want, httplimit.ErrorStatus(c.r, c.err), "%v", c.err)
		if c.r != nil {
			rec := httptest.NewRecorder()
			httplimit.WriteError(rec, c.r, c.err)
			assert.Equal(t, c.want, rec.Code, "WriteError answers %v so too", c.err)
		}
	}
}
