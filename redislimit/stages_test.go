package redislimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
	"github.com/chanlimit/chanlimit/pipeline"
	"github.com/chanlimit/chanlimit/redislimit"
)

// TestPoliceThroughRedis: a pipeline stage on a Redis-backed router
// passes every item on, with exactly the quota of each key allowed.
func TestPoliceThroughRedis(t *testing.T) {
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 10, Window: time.Hour, Store: st})
	require.NoError(t, err)
	defer r.Close()
	in := make(chan int)
	go func() {
		defer close(in)
		for i := range 300 {
			in <- i
		}
	}()
	allowed := map[string]int{}
	seen := 0
	for res := range pipeline.Police(context.Background(), r, in, func(i int) string { return fmt.Sprint("k", i%3) }, pipeline.Options[int]{}) {
		require.NoError(t, res.Err)
		seen++
		if res.Decision.Allowed {
			allowed[fmt.Sprint("k", res.Item%3)]++
		}
	}
	assert.Equal(t, 300, seen)
	assert.Equal(t, map[string]int{"k0": 10, "k1": 10, "k2": 10}, allowed)
}

// TestHTTPThroughRedis: the HTTP middleware on a Redis-backed router,
// over a real server and client: the quota, then 429 with its fields.
func TestHTTPThroughRedis(t *testing.T) {
	st, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 3, Window: time.Minute, Store: st})
	require.NoError(t, err)
	defer r.Close()
	srv := httptest.NewServer(httplimit.Middleware(r, httplimit.Options{})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))
	defer srv.Close()
	var codes []int
	var last http.Header
	for range 5 {
		resp, err := srv.Client().Get(srv.URL)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = resp.Header
	}
	assert.Equal(t, []int{204, 204, 204, 429, 429}, codes)
	assert.Equal(t, `"default";q=3;w=60`, last.Get("RateLimit-Policy"))
	assert.Equal(t, `"default";r=0;t=20`, last.Get("RateLimit"))
	assert.Equal(t, "20", last.Get("Retry-After"))
}
