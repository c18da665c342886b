package bench

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/httprate"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// sink is a ResponseWriter that keeps only the status, and reuses its
// header map: each request through it costs what the middleware and the
// handler do, not a recorder's allocations.
type sink struct {
	h      http.Header
	status int
}

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) Write(p []byte) (int, error) { return len(p), nil }
func (s *sink) WriteHeader(status int)      { s.status = status }

// reset readies s for the next request.
func (s *sink) reset() {
	clear(s.h)
	s.status = http.StatusOK
}

// httpImpls are the middlewares of BenchmarkHTTP, each admitting every
// request, keyed by client IP: none (the handler alone), chanlimit's
// httplimit and go-chi/httprate's LimitByIP, each writing its fields.
var httpImpls = []struct {
	name string
	wrap func(b *testing.B) func(http.Handler) http.Handler
}{
	{"none", func(*testing.B) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler { return h }
	}},
	{"chanlimit", func(b *testing.B) func(http.Handler) http.Handler {
		r, err := chanlimit.New(chanlimit.Config{Limit: admitAll.limit, Window: admitAll.window})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = r.Close() })
		return httplimit.Middleware(r, httplimit.Options{})
	}},
	{"httprate", func(*testing.B) func(http.Handler) http.Handler {
		return httprate.LimitByIP(admitAll.limit, time.Minute)
	}},
}

// BenchmarkHTTP: the cost of one request through each middleware into a
// handler that writes 200, in process: pre-built requests from 1 or 1,000
// client IPs, through ServeHTTP into a sink. Every request must be
// admitted: a denial fails the benchmark, so no case measures the wrong
// path.
func BenchmarkHTTP(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, keys := range []int{1, 1000} {
		reqs := make([]*http.Request, keys)
		for i := range reqs {
			reqs[i], _ = http.NewRequest(http.MethodGet, "/api", nil)
			reqs[i].RemoteAddr = fmt.Sprintf("10.%d.%d.%d:%d", i>>16&255, i>>8&255, i&255, 40000+i%1000)
		}
		for _, mode := range []string{"seq", "par"} {
			for _, impl := range httpImpls {
				b.Run("keys="+strconv.Itoa(keys)+"/mode="+mode+"/impl="+impl.name, func(b *testing.B) {
					h := impl.wrap(b)(ok)
					var refused atomic.Int64
					b.ReportAllocs()
					if mode == "seq" {
						w := &sink{h: http.Header{}}
						for i := 0; b.Loop(); i++ {
							w.reset()
							h.ServeHTTP(w, reqs[i%keys])
							if w.status != http.StatusOK {
								refused.Add(1)
							}
						}
					} else {
						var next atomic.Int64
						b.RunParallel(func(pb *testing.PB) {
							w := &sink{h: http.Header{}}
							i := int(next.Add(7919))
							for pb.Next() {
								i++
								w.reset()
								h.ServeHTTP(w, reqs[i%keys])
								if w.status != http.StatusOK {
									refused.Add(1)
								}
							}
						})
					}
					if n := refused.Load(); n > 0 {
						b.Fatalf("%d requests refused: an admit case must admit every one", n)
					}
				})
			}
		}
	}
}
