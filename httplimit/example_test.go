package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/chanlimit/chanlimit"
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
