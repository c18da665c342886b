package ginlimit_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/ginlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// bodyLogWriter is the response-body logger of Gin's FAQ and countless
// projects: it embeds gin.ResponseWriter, whose interface has no Unwrap,
// so the wrapper has none.
type bodyLogWriter struct {
	gin.ResponseWriter
	body *bytes.Buffer
}

func (w bodyLogWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

// TestNestedThroughGinWriterWrapper: a global ginlimit, a Gin body
// logger (a c.Writer wrapper with no Unwrap, as gzip's), then a route's
// ginlimit: the response carries both routers' members, and a refusal by
// the route's gives back what the global one took (it failed before:
// the route's members alone, and no give-back).
func TestNestedThroughGinWriterWrapper(t *testing.T) {
	global, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 5, Window: time.Minute}}})
	route, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 1, Window: time.Minute}}})
	engine := gin.New()
	engine.Use(ginlimit.Middleware(global, httplimit.Options{}))
	engine.Use(func(c *gin.Context) { // log the body
		blw := &bodyLogWriter{body: &bytes.Buffer{}, ResponseWriter: c.Writer}
		c.Writer = blw
		c.Next()
	})
	engine.GET("/expensive", ginlimit.Middleware(route, httplimit.Options{}), func(c *gin.Context) {
		c.String(http.StatusOK, "ok")
	})
	url, client := serve(t, engine)

	const policy = `"global";q=5;w=60, "route";q=1;w=60`
	got := get(t, client, url+"/expensive")
	assert.Equal(t, 200, got.status)
	assert.Equal(t, policy, got.policy, "the allowance carries both routers' members")
	for i := range 2 {
		got = get(t, client, url+"/expensive")
		assert.Equal(t, 429, got.status)
		assert.Equal(t, policy, got.policy, "refusal %d carries both routers' members", i)
		assert.Equal(t, `"route";r=0;t=60, "global";r=3;t=12`, got.rate, "refusal %d: the global router gave back the refusal before", i)
	}
}
