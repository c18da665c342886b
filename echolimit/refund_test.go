package echolimit_test

import (
	"net/http"
	"testing"
	"time"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v5"
	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// An Echo handler fails by returning an error, which Echo's
// HTTPErrorHandler writes once the middleware chain has returned: after
// httplimit's Refund, which would be told 200. A middleware inside the
// wrapped httplimit one that writes the error itself lets Refund see the
// status the client gets (docs/http.md, "Echo"). These tests count
// failed logins only, as the page's "Counting only failures" does.

// loginOpts keys by user and gives back every login that did not fail,
// telling statuses what Refund saw.
func loginOpts(statuses chan<- int) httplimit.Options {
	return httplimit.Options{
		Key: httplimit.KeyByHeader("X-User"),
		Refund: func(_ *http.Request, status int) bool {
			statuses <- status
			return status < 400
		},
	}
}

// received returns what Refund sent for a request whose response the
// client has read whole (net/http ends a response once its handler has
// returned), or -1 if it never ran.
func received(ch <-chan int) int {
	select {
	case s := <-ch:
		return s
	default:
		return -1
	}
}

func TestEchoV4RefundSeesReturnedErrors(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Minute})
	statuses := make(chan int, 8)
	e := echov4.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(echov4.WrapMiddleware(httplimit.Middleware(r, loginOpts(statuses))))
	e.Use(func(next echov4.HandlerFunc) echov4.HandlerFunc { // write a returned error here, inside
		return func(c echov4.Context) error {
			if err := next(c); err != nil {
				c.Error(err)
			}
			return nil
		}
	})
	e.GET("/login", func(echov4.Context) error { return echov4.ErrUnauthorized })
	url, client := serve(t, e)

	for i := range 2 {
		got, _ := get(t, client, url+"/login", "X-User", "alice")
		assert.Equal(t, http.StatusUnauthorized, got.status, "attempt %d", i)
		assert.Equal(t, http.StatusUnauthorized, received(statuses), "attempt %d: Refund sees the 401 the client got", i)
	}
	got, _ := get(t, client, url+"/login", "X-User", "alice")
	assert.Equal(t, http.StatusTooManyRequests, got.status, "the third failed login in a minute is refused")
}

func TestEchoV5RefundSeesReturnedErrors(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Minute})
	statuses := make(chan int, 8)
	e := echo.New()
	e.Use(echo.WrapMiddleware(httplimit.Middleware(r, loginOpts(statuses))))
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // write a returned error here, inside
		return func(c *echo.Context) error {
			if err := next(c); err != nil {
				c.Echo().HTTPErrorHandler(c, err)
			}
			return nil
		}
	})
	e.GET("/login", func(*echo.Context) error { return echo.ErrUnauthorized })
	url, client := serve(t, e)

	for i := range 2 {
		got, _ := get(t, client, url+"/login", "X-User", "alice")
		assert.Equal(t, http.StatusUnauthorized, got.status, "attempt %d", i)
		assert.Equal(t, http.StatusUnauthorized, received(statuses), "attempt %d: Refund sees the 401 the client got", i)
	}
	got, _ := get(t, client, url+"/login", "X-User", "alice")
	assert.Equal(t, http.StatusTooManyRequests, got.status, "the third failed login in a minute is refused")
}
