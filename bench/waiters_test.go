package bench

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// BenchmarkWithWaiters: the cost of a function run on a partition (Stats,
// PoliciesOf) and of an HTTP request through httplimit on a router with an
// override (so that the key's policies are the partition's to tell),
// while 0, 1,000 or 5,000 callers wait on other keys of the same
// partition (one WaitN each, on keys spent for the hour). Nothing these
// calls do changes a waiting key, so their cost must not grow with the
// callers waiting: compare the columns with benchstat -col /waiters.
func BenchmarkWithWaiters(b *testing.B) {
	ctx := context.Background()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, waiters := range []int{0, 1000, 5000} {
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Hour, Partitions: 1})
		if err != nil {
			b.Fatal(err)
		}
		if err := r.SetOverride(ctx, "vip", chanlimit.Policy{Name: "vip", Limit: admitAll.limit, Window: admitAll.window}); err != nil {
			b.Fatal(err)
		}
		if err := r.SetPolicies(ctx, chanlimit.Policy{Limit: admitAll.limit, Window: admitAll.window}); err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range waiters {
			key := "waiting-" + strconv.Itoa(i)
			if err := r.SetOverride(ctx, key, chanlimit.Policy{Name: "spent", Limit: 1, Window: time.Hour}); err != nil {
				b.Fatal(err)
			}
			if !r.Allow(key) {
				b.Fatal("the first request of a key is allowed")
			}
			wg.Go(func() { _, _ = r.WaitN(ctx, key, 1) }) // until Close
		}
		for {
			st, err := r.Stats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if st.Waiting == waiters {
				break
			}
			runtime.Gosched() // for the goroutines to join their lines: set-up, not measured
		}
		h := httplimit.Middleware(r, httplimit.Options{})(ok)
		req, _ := http.NewRequest(http.MethodGet, "/api", nil)
		req.RemoteAddr = "10.0.0.1:40000"
		w := &sink{h: http.Header{}}
		cases := []struct {
			name string
			run  func(b *testing.B)
		}{
			{"Stats", func(b *testing.B) {
				if _, err := r.Stats(ctx); err != nil {
					b.Fatal(err)
				}
			}},
			{"PoliciesOf", func(b *testing.B) {
				if _, err := r.PoliciesOf(ctx, "10.0.0.1"); err != nil {
					b.Fatal(err)
				}
			}},
			{"HTTP", func(b *testing.B) {
				w.reset()
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d: every request is admitted", w.status)
				}
			}},
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("op=%s/waiters=%d", c.name, waiters), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					c.run(b)
				}
			})
		}
		_ = r.Close() // answers every waiter with ErrClosed
		wg.Wait()
	}
}
