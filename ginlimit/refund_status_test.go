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

// TestRefundSeesGinFinalStatus: Gin's WriteHeader does not send the
// status; the last one set before the first write is the one the client
// gets, and the one Refund is told (it failed before: Refund was told the
// first one set).
func TestRefundSeesGinFinalStatus(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute})
	statuses := make(chan int, 4)
	engine := gin.New()
	engine.Use(ginlimit.Middleware(r, httplimit.Options{Refund: func(_ *http.Request, status int) bool {
		statuses <- status
		return status >= 500
	}}))
	engine.GET("/create", func(c *gin.Context) {
		c.Status(http.StatusCreated) // optimistic
		c.String(http.StatusInternalServerError, "save failed")
	})
	url, client := serve(t, engine)

	got := get(t, client, url+"/create")
	assert.Equal(t, 500, got.status, "the client got a 500")
	assert.Equal(t, 500, recv(t, statuses), "Refund must see the status the client got")
	got = get(t, client, url+"/create")
	assert.Equal(t, `"default";r=4;t=12`, got.rate, "the 500 before was given back")
}

// TestRefundSeesGinNoRoute: Gin answers a route it has none for (404,
// and 405 with HandleMethodNotAllowed) after the chain of global
// middlewares returns; Refund is told that status (it failed before: it
// was told 200).
func TestRefundSeesGinNoRoute(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 5, Window: time.Minute})
	statuses := make(chan int, 4)
	engine := gin.New()
	engine.HandleMethodNotAllowed = true
	engine.Use(ginlimit.Middleware(r, httplimit.Options{Refund: func(_ *http.Request, status int) bool {
		statuses <- status
		return status == http.StatusNotFound || status == http.StatusMethodNotAllowed // probes cost nothing
	}}))
	engine.POST("/only-post", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	url, client := serve(t, engine)

	got := get(t, client, url+"/nowhere")
	assert.Equal(t, 404, got.status)
	assert.Equal(t, 404, recv(t, statuses), "Refund must see Gin's 404")
	got = get(t, client, url+"/only-post")
	assert.Equal(t, 405, got.status)
	assert.Equal(t, 405, recv(t, statuses), "Refund must see Gin's 405")
	got = get(t, client, url+"/nowhere")
	assert.Equal(t, `"default";r=4;t=12`, got.rate, "the 404 and 405 before were given back")
}
