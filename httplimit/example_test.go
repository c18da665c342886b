package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/httplimit"
)

func ExampleMiddleware() {
	r, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "per-second", Limit: 2, Window: time.Second},
		{Name: "per-hour", Algorithm: "fixed_window", Limit: 100, Window: time.Hour},
	}})
	if err != nil {
		panic(err)
	}
	defer r.Close()

	mux := http.NewServeMux()
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	mux.Handle("GET /hello", httplimit.Middleware(r, httplimit.Options{})(hello)) // keyed by client IP

	for range 3 {
		req := httptest.NewRequest(http.MethodGet, "/hello", nil)
		req.RemoteAddr = "192.0.2.7:51234"
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"), rec.Header().Values("Retry-After"))
	}
	// Output:
	// 200 "per-second";r=1;t=1, "per-hour";r=99;t=3600 []
	// 200 "per-second";r=0;t=1, "per-hour";r=98;t=3600 []
	// 429 "per-second";r=0;t=1, "per-hour";r=98;t=3600 [1]
}

// A client of an API that allows 2 requests a second: each request waits
// its turn, on the fake clock here, before it is sent.
func ExampleTransport() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	defer api.Close()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Clock: clk})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	client := &http.Client{Transport: &httplimit.Transport{Router: r, MaxWait: time.Second}}

	for i := range 3 {
		if i == 2 {
			go func() { // the third waits half a second for its turn
				_ = clk.BlockUntilContext(context.Background(), 1)
				clk.Advance(500 * time.Millisecond)
			}()
		}
		resp, err := client.Get(api.URL)
		if err != nil {
			fmt.Println(err)
			continue
		}
		resp.Body.Close()
		fmt.Println(resp.Status, clk.Since(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	}
	// Output:
	// 200 OK 0s
	// 200 OK 0s
	// 200 OK 500ms
}
