package chanlimit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
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
