package chanlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/httplimit"
	"github.com/chanlimit/chanlimit/internal/clocktest"
)

// A line that is due is served before anything decided after it, whether
// or not the partition's timer has fired yet: a request at exactly its
// RetryAfter is allowed even while the line ahead of it is due and not
// yet served (DESIGN, protocol property 7).

// dueLine returns a router on a clock whose timers fire lag late, whose
// key "k" (fixed_window, 2 a second) has both units of its window taken
// and one waiter in line, due at 1 s; and that waiter's answer.
func dueLine(t *testing.T, lag time.Duration) (*chanlimit.Router, *clocktest.Late, <-chan waited) {
	t.Helper()
	clk := clocktest.NewLate(epoch, lag)
	r, err := chanlimit.New(chanlimit.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Second, Clock: clk, Partitions: 1})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.Close()) })
	exhaust(t, r, "k", 2)
	w := goWait(context.Background(), r, "k", 1)
	d, err := r.Peek(context.Background(), "k", 1)
	require.NoError(t, err)
	require.Equal(t, time.Second, d.RetryAfter, "behind the waiter, who takes one unit of the next window")
	return r, clk, w
}

func TestDueLineIsServedBeforeARequestAtItsRetryAfter(t *testing.T) {
	ctx := context.Background()
	steps := []struct {
		give string
		ask  func(r *chanlimit.Router) (chanlimit.Decision, error)
	}{
		{"AllowN", func(r *chanlimit.Router) (chanlimit.Decision, error) { return r.AllowN(ctx, "k", 1) }},
		{"Peek", func(r *chanlimit.Router) (chanlimit.Decision, error) { return r.Peek(ctx, "k", 1) }},
		{"AllowBatch", func(r *chanlimit.Router) (chanlimit.Decision, error) {
			out := make([]chanlimit.Decision, 2)
			err := r.AllowBatch(ctx, []chanlimit.Request{{Key: "other", N: 1}, {Key: "k", N: 1}}, out)
			return out[1], err
		}},
		{"WaitN", func(r *chanlimit.Router) (chanlimit.Decision, error) {
			ctx, cancel := context.WithTimeout(ctx, time.Hour) // a deadline: WaitN answers at once if it cannot meet it
			defer cancel()
			return r.WaitN(ctx, "k", 1)
		}},
	}
	for _, lag := range []time.Duration{0, time.Millisecond} {
		for _, s := range steps {
			t.Run(s.give+"/lag="+lag.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r, clk, w := dueLine(t, lag)
					clk.Advance(time.Second) // the line is due; with lag, the timer has not fired
					d, err := s.ask(r)
					require.NoError(t, err)
					assert.True(t, d.Allowed, "%s at 1 s, its RetryAfter: the waiter is served first, and one unit is left (%+v)", s.give, d)
					synctest.Wait()
					got, done := answer(w)
					require.True(t, done, "the waiter was due at 1 s")
					require.NoError(t, got.err)
					assert.True(t, got.d.Allowed)
				})
			})
		}
	}
}

// TestDueLineIsServedBeforeRequestsOnOtherKeys: a partition with traffic
// on other keys hears of its timer late (select picks at random among the
// mailbox and the timer); the line is served on its schedule all the same.
func TestDueLineIsServedBeforeRequestsOnOtherKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk, w := dueLine(t, time.Millisecond)
		clk.Advance(time.Second)
		for range 10 {
			_, err := r.AllowN(context.Background(), "other", 1)
			require.NoError(t, err)
		}
		synctest.Wait()
		got, done := answer(w)
		require.True(t, done, "due at 1 s: the requests on other keys served it")
		require.NoError(t, got.err)
		d, err := r.AllowN(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		d, err = r.AllowN(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "the waiter and one request took the window")
		assert.Equal(t, time.Second, d.RetryAfter)
	})
}

// TestAGoexitServingADueLineLosesNoRequest: the partition serves a due
// line before a request on another key (or a function run by Do), and the
// rule ends the goroutine while deciding the line's head. The head is
// answered with the rule's error, and the request it came before is
// served, by the goroutine that takes over, as if nothing had happened.
func TestAGoexitServingADueLineLosesNoRequest(t *testing.T) {
	exit := new(atomic.Bool)
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) exitsOnTwo { return exitsOnTwo{fw, exit} })
	ctx := context.Background()
	steps := []struct {
		give string
		ask  func(r *chanlimit.Router) error
	}{
		{"AllowN", func(r *chanlimit.Router) error { _, err := r.AllowN(ctx, "other", 1); return err }},
		{"Peek", func(r *chanlimit.Router) error { _, err := r.Peek(ctx, "other", 1); return err }},
		{"AllowBatch", func(r *chanlimit.Router) error {
			return r.AllowBatch(ctx, []chanlimit.Request{{Key: "other", N: 1}}, make([]chanlimit.Decision, 1))
		}},
		{"Reset", func(r *chanlimit.Router) error { return r.Reset(ctx, "other") }},
		{"Stats", func(r *chanlimit.Router) error { _, err := r.Stats(ctx); return err }},
	}
	for _, s := range steps {
		t.Run(s.give, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clocktest.NewLate(epoch, time.Millisecond)
				r, err := chanlimit.New(chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Clock: clk, Partitions: 1})
				require.NoError(t, err)
				defer r.Close()
				exhaust(t, r, "k", 3)
				w := goWait(ctx, r, "k", 2) // due at 1 s
				exit.Store(true)
				clk.Advance(time.Second) // due; the timer fires 1 ms later

				answered := make(chan error, 1)
				go func() { answered <- s.ask(r) }()
				synctest.Wait()
				select {
				case err := <-answered:
					assert.NoError(t, err, "%s, served after the line", s.give)
				default:
					t.Fatalf("%s was never answered", s.give)
				}
				require.False(t, exit.Load(), "the line's head was decided first")
				got, done := answer(w)
				require.True(t, done)
				assert.ErrorIs(t, got.err, chanlimit.ErrAlgorithmPanic, "the head: the rule ended the goroutine")
			})
		})
	}
}

// TestAGoexitServingADueLineBeforeAWaitN: the request served after the
// goroutine that ended is a WaitN that must wait: it joins its line, and
// the timer is set for it, so it is granted at its time.
func TestAGoexitServingADueLineBeforeAWaitN(t *testing.T) {
	exit := new(atomic.Bool)
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) exitsOnTwo { return exitsOnTwo{fw, exit} })
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clk := clocktest.NewLate(epoch, time.Millisecond)
		r, err := chanlimit.New(chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Clock: clk, Partitions: 1})
		require.NoError(t, err)
		defer r.Close()
		exhaust(t, r, "k", 3)
		w := goWait(ctx, r, "k", 2) // due at 1 s
		clk.Advance(500 * time.Millisecond)
		exhaust(t, r, "other", 3) // its window ends at 1.5 s
		exit.Store(true)
		clk.Advance(500 * time.Millisecond) // k's line is due; the timer fires 1 ms later
		// Served after k's line: the goroutine ends on its head, and the
		// next serves this WaitN, which must wait until 1.5 s.
		o := goWait(ctx, r, "other", 1)
		got, done := answer(w)
		require.True(t, done)
		require.ErrorIs(t, got.err, chanlimit.ErrAlgorithmPanic)
		_, done = answer(o)
		require.False(t, done)
		clk.Advance(500*time.Millisecond + time.Millisecond) // the Late clock fires timers 1 ms late
		synctest.Wait()
		got, done = answer(o)
		require.True(t, done, "granted at 1.5 s: its timer was set")
		require.NoError(t, got.err)
	})
}

// TestHTTPRequestAtItsRetryAfterWhileALineIsDue: a client of httplimit
// told to come back in t seconds (Retry-After) is served then, though the
// line ahead of it is due and the partition's timer (late, as real timers
// are) has not fired yet.
func TestHTTPRequestAtItsRetryAfterWhileALineIsDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.NewLate(epoch, time.Millisecond)
		r, err := chanlimit.New(chanlimit.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Second, Clock: clk})
		require.NoError(t, err)
		defer r.Close()
		h := httplimit.Middleware(r, httplimit.Options{})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
		do := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = "192.0.2.7:1"
			h.ServeHTTP(rec, req)
			return rec
		}
		for range 2 {
			require.Equal(t, 204, do().Code)
		}
		go func() { _, _ = r.WaitN(context.Background(), "192.0.2.7", 1) }() // a worker in line, due at 1 s
		synctest.Wait()
		rec := do()
		require.Equal(t, 429, rec.Code)
		require.Equal(t, "1", rec.Header().Get("Retry-After"))

		clk.Advance(time.Second)
		rec = do()
		assert.Equal(t, 204, rec.Code, "at its Retry-After: %v", rec.Header())
		synctest.Wait()
	})
}
