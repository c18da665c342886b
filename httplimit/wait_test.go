package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// The tests of MaxWait run in a synctest bubble on the real clock, whose
// time the bubble fakes: WaitN's timers and the deadlines of contexts are
// on one clock, and every wait is exact.

// timed serves req through h and returns the recorder and how long it
// took.
func timed(h http.Handler, req *http.Request) (*httptest.ResponseRecorder, time.Duration) {
	start := time.Now()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec, time.Since(start)
}

// TestMaxWaitHitAndMissed: with Limit 1 per second, callers in line wait
// 1s, 2s, ... for their turn; a wait within MaxWait is served at its
// grant, one beyond it refused at once with the wait it would have had.
func TestMaxWaitHitAndMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second})
		require.NoError(t, err)
		defer r.Close()
		var mu sync.Mutex
		served := 0
		next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			served++
			mu.Unlock()
		})
		h := httplimit.Middleware(r, httplimit.Options{MaxWait: 2 * time.Second})(next)

		rec, took := timed(h, request("192.0.2.7:1"))
		require.Equal(t, 200, rec.Code)
		assert.Zero(t, took)
		assert.Equal(t, []member{{"default", map[string]int64{"r": 0, "t": 1}}}, parseField(t, rec.Header(), "RateLimit"), "granted: more in 1s")

		var wg sync.WaitGroup
		for i := range 2 { // in line: granted at 1s and 2s, the second just within MaxWait
			wg.Go(func() {
				rec, took := timed(h, request("192.0.2.7:1"))
				assert.Equal(t, 200, rec.Code, "waiter %d", i)
				assert.Contains(t, []time.Duration{time.Second, 2 * time.Second}, took)
			})
			synctest.Wait() // in line before the next
		}
		// A third would wait 3s: refused at once, told to come back then.
		rec, took = timed(h, request("192.0.2.7:1"))
		assert.Equal(t, 429, rec.Code)
		assert.Zero(t, took, "refused at once, not after MaxWait")
		assert.Equal(t, "3", rec.Header().Get("Retry-After"))
		assert.Equal(t, []member{{"default", map[string]int64{"r": 0, "t": 3}}}, parseField(t, rec.Header(), "RateLimit"))
		wg.Wait()
		assert.Equal(t, 3, served)

		// Another key is never held up by this one's line.
		rec, took = timed(h, request("192.0.2.8:1"))
		assert.Equal(t, 200, rec.Code)
		assert.Zero(t, took)
	})
}

// TestMaxWaitGrantLaterThanForeseen: a wait foreseen within MaxWait
// whose grant moves later (the policies changed meanwhile) is refused
// WaitGrace after MaxWait, with the key's fields.
func TestMaxWaitGrantLaterThanForeseen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second})
		require.NoError(t, err)
		defer r.Close()
		next := &counting{}
		h := httplimit.Middleware(r, httplimit.Options{MaxWait: time.Second})(next)
		rec, _ := timed(h, request("192.0.2.7:1"))
		require.Equal(t, 204, rec.Code)

		done := make(chan struct{})
		go func() {
			defer close(done)
			rec, took := timed(h, request("192.0.2.7:1"))
			assert.Equal(t, 429, rec.Code)
			assert.Equal(t, time.Second+httplimit.WaitGrace, took)
			assert.NotEmpty(t, rec.Header().Get("Retry-After"))
			assert.Equal(t, "default", parseField(t, rec.Header(), "RateLimit")[0].Name)
		}()
		synctest.Wait()
		require.NoError(t, r.SetPolicies(context.Background(), chanlimit.Policy{Limit: 1, Window: time.Minute}))
		<-done
		assert.Equal(t, 1, next.served)
	})
}

// TestClientGoesAwayWhileWaiting: a request whose context ends while it
// waits leaves the line at once, never reaches the handler, and the
// caller behind it moves up.
func TestClientGoesAwayWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second})
		require.NoError(t, err)
		defer r.Close()
		next := &counting{}
		var gotErr error
		onError := func(w http.ResponseWriter, req *http.Request, err error) {
			gotErr = err
			httplimit.WriteError(w, req, err)
		}
		h := httplimit.Middleware(r, httplimit.Options{MaxWait: time.Hour, OnError: onError})(next)
		rec, _ := timed(h, request("192.0.2.7:1"))
		require.Equal(t, 204, rec.Code)

		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan *httptest.ResponseRecorder)
		go func() {
			rec, _ := timed(h, request("192.0.2.7:1").WithContext(ctx))
			gone <- rec
		}()
		synctest.Wait()
		behind := make(chan time.Duration)
		go func() {
			rec, took := timed(h, request("192.0.2.7:1"))
			assert.Equal(t, 204, rec.Code)
			behind <- took
		}()
		synctest.Wait()
		st, err := r.Stats(context.Background())
		require.NoError(t, err)
		require.Equal(t, 2, st.Waiting)

		time.Sleep(300 * time.Millisecond) // the bubble's time: the first waiter gives up at 0.3s
		cancel()
		rec = <-gone
		assert.Equal(t, 503, rec.Code)
		assert.ErrorIs(t, gotErr, context.Canceled)
		assert.Equal(t, time.Second, <-behind, "the caller behind moved up to the first grant, not the second (2s)")
		st, err = r.Stats(context.Background())
		require.NoError(t, err)
		assert.Zero(t, st.Waiting)
		assert.Equal(t, 2, next.served)
	})
}
