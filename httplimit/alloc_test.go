//go:build !race

// The race detector changes how sync.Pool keeps values, so allocation counts
// are checked without it: .ci/run runs this test in a second, plain pass.

package httplimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// reusedWriter is a ResponseWriter that reuses its header map, so that a
// request through it allocates what the middleware does.
type reusedWriter struct {
	h      http.Header
	status int
}

func (w *reusedWriter) Header() http.Header         { return w.h }
func (w *reusedWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *reusedWriter) WriteHeader(status int)      { w.status = status }

// TestMiddlewareAllocs: an allowed request allocates three objects: its
// context for the handler (with its Decision and key, for DecisionFrom
// and KeyFrom, and the fields' values), the request the handler gets
// with it, and the RateLimit value; with one policy or several, with or
// without an override in the router; the quota the router writes comes
// from a pool.
func TestMiddlewareAllocs(t *testing.T) {
	cases := []struct {
		name     string
		policies []chanlimit.Policy
		override bool
	}{
		{"OnePolicy", []chanlimit.Policy{{Limit: 1 << 30, Window: time.Second}}, false},
		{"TwoPolicies", []chanlimit.Policy{{Name: "s", Limit: 1 << 30, Window: time.Second}, {Name: "m", Algorithm: "fixed_window", Limit: 1 << 30, Window: time.Minute}}, false},
		{"WithAnOverride", []chanlimit.Policy{{Limit: 1 << 30, Window: time.Second}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := newRouter(t, chanlimit.Config{Policies: c.policies})
			if c.override {
				require.NoError(t, r.SetOverride(context.Background(), "vip", chanlimit.Policy{Limit: 5, Window: time.Second}))
			}
			h := httplimit.Middleware(r, httplimit.Options{})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
			req := request("192.0.2.7:1")
			w := &reusedWriter{h: http.Header{}}
			allocs := testing.AllocsPerRun(200, func() {
				clear(w.h)
				h.ServeHTTP(w, req)
			})
			assert.Equal(t, 200, w.status)
			assert.LessOrEqual(t, allocs, 3.0)
		})
	}
}

// TestMiddlewareAllocsWithRefund: Refund costs one allocation more, the
// ResponseWriter that notes the status.
func TestMiddlewareAllocsWithRefund(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1 << 30, Window: time.Second})
	refunds := 0
	opts := httplimit.Options{Refund: func(_ *http.Request, status int) bool { refunds++; return status >= 500 }}
	h := httplimit.Middleware(r, opts)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	req := request("192.0.2.7:1")
	w := &reusedWriter{h: http.Header{}}
	allocs := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
	assert.Equal(t, 503, w.status)
	assert.Positive(t, refunds)
	assert.LessOrEqual(t, allocs, 4.0)
}
