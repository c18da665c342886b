//go:build !race

// The race detector changes how sync.Pool keeps values, so allocation counts
// are checked without it: .ci/run runs this test in a second, plain pass.

package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/ginlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// reusedWriter is a ResponseWriter that reuses its header map, so that a
// request through it allocates what the engine and the middleware do.
type reusedWriter struct {
	h      http.Header
	status int
}

func (w *reusedWriter) Header() http.Header         { return w.h }
func (w *reusedWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *reusedWriter) WriteHeader(status int)      { w.status = status }

// allocs returns the allocations of one allowed request through an engine
// with mw before its handler.
func allocs(t *testing.T, mw gin.HandlerFunc) float64 {
	t.Helper()
	engine := gin.New()
	engine.Use(mw)
	engine.GET("/", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.7:1"
	w := &reusedWriter{h: http.Header{}}
	n := testing.AllocsPerRun(200, func() {
		clear(w.h)
		w.status = 0
		engine.ServeHTTP(w, req)
	})
	assert.Equal(t, http.StatusNoContent, w.status)
	return n
}

// TestMiddlewareAllocs: the middleware costs an allowed request what
// httplimit's does (3 allocations; 4 with Refund) and one more, which
// carries the gin.Context through it (and with Refund one more again,
// c.Writer writing through httplimit's).
func TestMiddlewareAllocs(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1 << 30, Window: time.Second})
	bare := allocs(t, func(c *gin.Context) { c.Next() })
	plain := allocs(t, ginlimit.Middleware(r, httplimit.Options{}))
	refund := allocs(t, ginlimit.Middleware(r, httplimit.Options{Refund: func(*http.Request, int) bool { return false }}))
	t.Logf("allocations a request: engine %v, with the middleware %v, with Refund %v", bare, plain, refund)
	assert.LessOrEqual(t, plain-bare, 3.0+1)
	assert.LessOrEqual(t, refund-bare, 4.0+2)
}
