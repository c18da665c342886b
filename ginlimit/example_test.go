package ginlimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/ginlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// A Gin engine that allows each client address 2 requests a minute: the
// handler reads the decision; the third request is refused with 429 and
// the fields that say when to come back.
func Example() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // time stands still here
	r, err := chanlimit.New(chanlimit.Config{
		Policies: []chanlimit.Policy{{Name: "per-minute", Limit: 2, Window: time.Minute}},
		Clock:    clk,
	})
	if err != nil {
		panic(err)
	}
	defer r.Close()

	engine := gin.New()
	engine.Use(ginlimit.Middleware(r, httplimit.Options{})) // keyed by the client's IP
	engine.GET("/hello", func(c *gin.Context) {
		d, _ := httplimit.DecisionFrom(c.Request)
		c.String(http.StatusOK, "hello: %d left", d.Remaining)
	})
	srv := httptest.NewServer(engine)
	defer srv.Close()

	for range 3 {
		resp, err := srv.Client().Get(srv.URL + "/hello")
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
		if resp.StatusCode == http.StatusOK {
			fmt.Println(string(body))
		} else {
			fmt.Println("Retry-After:", resp.Header.Get("Retry-After"))
		}
	}
	// Output:
	// 200 "per-minute";q=2;w=60 "per-minute";r=1;t=30
	// hello: 1 left
	// 200 "per-minute";q=2;w=60 "per-minute";r=0;t=30
	// hello: 0 left
	// 429 "per-minute";q=2;w=60 "per-minute";r=0;t=30
	// Retry-After: 30
}
