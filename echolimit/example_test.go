package echolimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/echolimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// show sends n GETs to url with client and prints each response's status, fields and
// body.
func show(client *http.Client, url string, n int) {
	for range n {
		resp, err := client.Get(url)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
		if after := resp.Header.Get("Retry-After"); after != "" {
			fmt.Println("Retry-After:", after)
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			fmt.Print(string(body))
		}
	}
}

// exampleRouter returns a router that allows each key 2 requests a minute,
// on a clock that stands still.
func exampleRouter() *chanlimit.Router {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, err := chanlimit.New(chanlimit.Config{
		Policies: []chanlimit.Policy{{Name: "per-minute", Limit: 2, Window: time.Minute}},
		Clock:    clk,
	})
	if err != nil {
		panic(err)
	}
	return r
}

// Echo v5's rate limiter with a Store: each client address may make 2
// requests a minute; the third is refused with 429 and the fields that say
// when to come back.
func Example() {
	r := exampleRouter()
	defer r.Close()

	e := echo.New()
	e.Use(middleware.RateLimiterWithConfig(middleware.RateLimiterConfig{
		Store:       echolimit.NewStore(r),
		DenyHandler: echolimit.DenyHandler, // errors get their own status, not 429
	}))
	e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	srv := httptest.NewServer(e)
	defer srv.Close()

	show(srv.Client(), srv.URL+"/hello", 3)
	// Output:
	// 200 "per-minute";q=2;w=60 "per-minute";r=1;t=30
	// hello
	// 200 "per-minute";q=2;w=60 "per-minute";r=0;t=30
	// hello
	// 429 "per-minute";q=2;w=60 "per-minute";r=0;t=30
	// Retry-After: 30
}

// Echo v4 has no store that sees the response: wrap httplimit's
// middleware, which writes the same fields (and DecisionFrom, KeyFrom,
// MaxWait, Refund, and the rest of httplimit.Options work as with
// net/http).
func Example_echoV4() {
	r := exampleRouter()
	defer r.Close()

	e := echov4.New()
	e.Use(echov4.WrapMiddleware(httplimit.Middleware(r, httplimit.Options{})))
	e.GET("/hello", func(c echov4.Context) error {
		d, _ := httplimit.DecisionFrom(c.Request())
		return c.String(http.StatusOK, fmt.Sprintf("hello: %d left\n", d.Remaining))
	})
	srv := httptest.NewServer(e)
	defer srv.Close()

	show(srv.Client(), srv.URL+"/hello", 3)
	// Output:
	// 200 "per-minute";q=2;w=60 "per-minute";r=1;t=30
	// hello: 1 left
	// 200 "per-minute";q=2;w=60 "per-minute";r=0;t=30
	// hello: 0 left
	// 429 "per-minute";q=2;w=60 "per-minute";r=0;t=30
	// Retry-After: 30
}
