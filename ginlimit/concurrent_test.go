package ginlimit_test

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/ginlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// TestConcurrentNested: concurrent requests through nested ginlimit
// middlewares, both with Refund, on pooled gin.Contexts: no race, and
// with a frozen clock the global router counts exactly the requests the
// route's router allowed (refusals given back once each).
func TestConcurrentNested(t *testing.T) {
	global, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 1000, Window: time.Minute}}})
	route, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 50, Window: time.Minute}}})
	never := func(*http.Request, int) bool { return false }
	var served atomic.Int64
	engine := gin.New()
	engine.Use(ginlimit.Middleware(global, httplimit.Options{Refund: never, Key: func(*http.Request) (string, error) { return "k", nil }}))
	engine.GET("/x", ginlimit.Middleware(route, httplimit.Options{Refund: never, Key: func(*http.Request) (string, error) { return "k", nil }}), func(c *gin.Context) {
		served.Add(1)
		c.String(http.StatusOK, "ok")
	})
	url, client := serve(t, engine)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				resp, err := client.Get(url + "/x")
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(50), served.Load())
	d, err := global.Peek(t.Context(), "k", 1)
	assert.NoError(t, err)
	assert.Equal(t, 1000-50-1, d.Remaining, "the global router counts the allowed requests alone")
}
