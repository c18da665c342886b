package echolimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/echolimit"
)

// TestTwoStoresFields: a global RateLimiter on the engine and a route's,
// each with a Store of its own router: the response carries both
// routers' members, as httplimit's nested middlewares write them (it
// failed before: the route's Store replaced the global one's).
func TestTwoStoresFields(t *testing.T) {
	global, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "global", Limit: 5, Window: time.Minute}}})
	route, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "route", Limit: 1, Window: time.Minute}}})
	e := echo.New()
	e.Use(middleware.RateLimiterWithConfig(middleware.RateLimiterConfig{Store: echolimit.NewStore(global), DenyHandler: echolimit.DenyHandler}))
	e.GET("/expensive", func(c *echo.Context) error { return c.String(http.StatusOK, "ok") },
		middleware.RateLimiterWithConfig(middleware.RateLimiterConfig{Store: echolimit.NewStore(route), DenyHandler: echolimit.DenyHandler}))
	url, client := serve(t, e)

	got, _ := get(t, client, url+"/expensive")
	assert.Equal(t, 200, got.status)
	assert.Equal(t, `"global";q=5;w=60, "route";q=1;w=60`, got.policy, "both routers' members, as httplimit writes them")
}
