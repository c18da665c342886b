package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// TestDecisionAndKeyInTheHandler: the wrapped handler gets its grant's
// Decision (a dry-run policy's WouldDeny with it) and the key, through a
// real server; OnLimited gets the refusal's; with two middlewares, the
// innermost one's; a request no middleware decided has neither.
func TestDecisionAndKeyInTheHandler(t *testing.T) {
	outer, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
	inner, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "burst", Limit: 2, Window: time.Second},
		{Name: "trial", Limit: 1, Window: time.Second, DryRun: true},
	}})
	type seen struct {
		d       chanlimit.Decision
		key     string
		dOK, ok bool
	}
	got := make(chan seen, 1)
	note := func(r *http.Request) {
		d, dOK := httplimit.DecisionFrom(r)
		key, ok := httplimit.KeyFrom(r)
		got <- seen{d, key, dOK, ok}
	}
	byUser := func(r *http.Request) (string, error) { return r.Header.Get("User"), nil }
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { note(r) })
	onLimited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note(r)
		httplimit.WriteLimited(w, r)
	})
	h := httplimit.Middleware(outer, httplimit.Options{})(
		httplimit.Middleware(inner, httplimit.Options{Key: byUser, OnLimited: onLimited})(handler))
	srv := httptest.NewServer(h)
	defer srv.Close()

	get := func() int {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set("User", "ann")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get())
	s := <-got
	assert.True(t, s.dOK && s.ok)
	assert.Equal(t, "ann", s.key, "the innermost middleware's key")
	assert.True(t, s.d.Allowed)
	assert.False(t, s.d.WouldDeny)
	assert.Equal(t, "burst", s.d.Policy)

	require.Equal(t, http.StatusOK, get())
	s = <-got
	assert.True(t, s.d.Allowed)
	assert.True(t, s.d.WouldDeny, "the dry-run policy would have denied the second: the handler sees it")

	require.Equal(t, http.StatusTooManyRequests, get())
	s = <-got
	assert.Equal(t, "ann", s.key)
	assert.False(t, s.d.Allowed, "OnLimited gets the refusal")

	plain := httptest.NewRequest(http.MethodGet, "/", nil)
	_, ok := httplimit.DecisionFrom(plain)
	assert.False(t, ok)
	_, ok = httplimit.KeyFrom(plain)
	assert.False(t, ok)
}
