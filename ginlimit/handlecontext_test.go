package ginlimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/ginlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// TestHandleContextLimitedOnce: Gin's documented internal redirect
// (c.Request.URL.Path = ...; engine.HandleContext(c)) runs the engine's
// middlewares again on the same request; the same ginlimit middleware
// limits it once: one unit, the router's members once (it failed before:
// two units, and the members twice).
func TestHandleContextLimitedOnce(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 4, Window: time.Minute})
	engine := gin.New()
	engine.Use(ginlimit.Middleware(r, httplimit.Options{}))
	engine.GET("/old", func(c *gin.Context) {
		c.Request.URL.Path = "/new"
		engine.HandleContext(c)
	})
	engine.GET("/new", func(c *gin.Context) { c.String(http.StatusOK, "new") })
	url, client := serve(t, engine)

	got := get(t, client, url+"/old")
	assert.Equal(t, 200, got.status)
	assert.Equal(t, `"default";q=4;w=60`, got.policy)
	assert.Equal(t, `"default";r=3;t=15`, got.rate, "one request, one unit")
}
