package echolimit_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	echov4 "github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// Echo v4 has no store interface that sees the response: its users wrap
// httplimit's middleware with echo.WrapMiddleware, which these tests try
// through a real server (an Echo v4 test dependency of this module, in
// the one place that documents it).

// echoV4 returns an Echo v4 whose GET /hello, counted in served, is
// limited by httplimit.Middleware(r, opts), and writes the decision and
// key it was given.
func echoV4(r *chanlimit.Router, opts httplimit.Options, served *atomic.Int64) *echov4.Echo {
	e := echov4.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(echov4.WrapMiddleware(httplimit.Middleware(r, opts)))
	e.GET("/hello", func(c echov4.Context) error {
		served.Add(1)
		d, _ := httplimit.DecisionFrom(c.Request())
		key, _ := httplimit.KeyFrom(c.Request())
		return c.String(http.StatusOK, key+" "+strconv.Itoa(d.Remaining))
	})
	return e
}

// problemStatus returns the status of a problem+json body.
func problemStatus(t *testing.T, contentType, body string) int {
	t.Helper()
	assert.Equal(t, "application/problem+json", contentType)
	var p struct {
		Status int `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &p), "%s", body)
	return p.Status
}

// TestEchoV4WrapMiddleware: through echo.WrapMiddleware, httplimit's own
// middleware limits Echo v4's requests: its fields, its 429 with a
// problem+json body, and the handler sees DecisionFrom and KeyFrom on
// c.Request(); a refused request never reaches it.
func TestEchoV4WrapMiddleware(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "per-minute", Limit: 30, Window: time.Minute},
		{Name: "per-second", Limit: 2, Window: time.Second},
	}})
	var served atomic.Int64
	url, client := serve(t, echoV4(r, httplimit.Options{Key: httplimit.KeyByHeader("X-API-Key")}, &served))

	const policy = `"per-minute";q=30;w=60, "per-second";q=2;w=1`
	steps := []struct {
		give time.Duration // the clock moves by it before the request
		want response
	}{
		{0, response{200, policy, `"per-second";r=1;t=1, "per-minute";r=29;t=2`, "", "alice 1"}},
		{0, response{200, policy, `"per-second";r=0;t=1, "per-minute";r=28;t=2`, "", "alice 0"}},
		{0, response{429, policy, `"per-second";r=0;t=1, "per-minute";r=28;t=2`, "1", ""}},
		{time.Second, response{200, policy, `"per-second";r=1;t=1, "per-minute";r=27;t=1`, "", "alice 1"}},
	}
	for i, step := range steps {
		clk.Advance(step.give)
		got, contentType := get(t, client, url+"/hello", "X-API-Key", "alice")
		if step.want.status == 429 {
			assert.Equal(t, 429, problemStatus(t, contentType, got.body), "step %d", i)
			got.body = ""
		}
		assert.Equal(t, step.want, got, "step %d", i)
	}
	assert.Equal(t, int64(3), served.Load(), "the refused request never reached the handler")

	got, contentType := get(t, client, url+"/hello") // no key
	assert.Equal(t, 400, got.status)
	assert.Equal(t, 400, problemStatus(t, contentType, got.body), "httplimit.WriteError's answer")
	assert.Equal(t, int64(3), served.Load())
}
