package chanlimit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// The tests of WaitN run in a synctest bubble on a clock.Fake: a waiter
// has joined its line once synctest.Wait returns, and the fake clock moves
// only when a test says.

// waited is the answer to one WaitN.
type waited struct {
	d   chanlimit.Decision
	err error
}

// goWait calls WaitN in a goroutine and returns once it is answered or in
// line; the answer comes on the channel.
func goWait(ctx context.Context, r *chanlimit.Router, key string, n int) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		d, err := r.WaitN(ctx, key, n)
		ch <- waited{d, err}
	}()
	synctest.Wait()
	return ch
}

// answer returns the answer on ch, if it has come.
func answer(ch <-chan waited) (waited, bool) {
	select {
	case w := <-ch:
		return w, true
	default:
		return waited{}, false
	}
}

// waiting returns Stats.Waiting.
func waiting(t *testing.T, r *chanlimit.Router) int {
	t.Helper()
	st, err := r.Stats(context.Background())
	require.NoError(t, err)
	return st.Waiting
}

// exhaust takes n units on key at once.
func exhaust(t *testing.T, r *chanlimit.Router, key string, n int) {
	t.Helper()
	d, err := r.AllowN(context.Background(), key, n)
	require.NoError(t, err)
	require.True(t, d.Allowed)
}

// advance moves clk by d and lets the partitions serve what came due.
func advance(clk *clock.Fake, d time.Duration) {
	clk.Advance(d)
	synctest.Wait()
}

func TestWaitNServesInArrivalOrderWithMixedN(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 1 token a second, 5 at most: empty at 0, then A (3 units) at 3s, B (1) at 4s, C (2) at 6s.
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Burst: 5})
		ctx := context.Background()
		exhaust(t, r, "k", 5)
		calls := []struct {
			name string
			n    int
			at   time.Duration
		}{{"A", 3, 3 * time.Second}, {"B", 1, 4 * time.Second}, {"C", 2, 6 * time.Second}}
		chans := make([]<-chan waited, len(calls))
		for i, c := range calls {
			chans[i] = goWait(ctx, r, "k", c.n)
		}
		assert.Equal(t, 3, waiting(t, r))

		var now time.Duration
		for i, c := range calls {
			advance(clk, c.at-time.Nanosecond-now)
			for j := i; j < len(calls); j++ {
				_, done := answer(chans[j])
				assert.False(t, done, "%s at %v, 1ns before %s's grant", calls[j].name, c.at-time.Nanosecond, c.name)
			}
			advance(clk, time.Nanosecond)
			now = c.at
			w, done := answer(chans[i])
			require.True(t, done, "%s at %v", c.name, c.at)
			require.NoError(t, w.err)
			assert.True(t, w.d.Allowed)
			assert.Equal(t, 0, w.d.Remaining, "%s took what there was", c.name)
			assert.Equal(t, len(calls)-1-i, waiting(t, r))
		}
	})
}

func TestWaitNNoBarging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Burst: 5})
		ctx := context.Background()
		exhaust(t, r, "k", 5)
		a := goWait(ctx, r, "k", 3) // granted at 3s
		advance(clk, 3*time.Second-time.Nanosecond)
		// 2.999999999 tokens: A needs 3; a request of 2 would fit, but
		// it would pass A.
		b := goWait(ctx, r, "k", 1) // behind A: at 4s
		steps := []struct {
			give string
			n    int
			want time.Duration // RetryAfter: a request joining the line now is granted then
		}{
			{"Peek", 1, 2*time.Second + 1},   // at 5s, after A at 3s and B at 4s
			{"AllowN", 1, 2*time.Second + 1}, // denied: nothing taken
			{"AllowN", 2, 3*time.Second + 1},
			{"Peek", 5, 6*time.Second + 1},
		}
		for i, s := range steps {
			var d chanlimit.Decision
			var err error
			if s.give == "Peek" {
				d, err = r.Peek(ctx, "k", s.n)
			} else {
				d, err = r.AllowN(ctx, "k", s.n)
			}
			require.NoError(t, err)
			want := chanlimit.Decision{
				Limit:      1,
				Remaining:  0,                 // what the key has is the line's
				RetryAfter: s.want,            // when it would be granted in line
				ResetAfter: 6*time.Second + 1, // B at 4s leaves the bucket empty: full again at 9s
				Policy:     chanlimit.DefaultPolicyName,
			}
			assert.Equal(t, want, d, "step %d: %s(k, %d) must not pass the line", i, s.give, s.n)
		}
		// A batch: its items on k are denied with the line's wait, and
		// those on other keys decided as ever.
		out := make([]chanlimit.Decision, 3)
		require.NoError(t, r.AllowBatch(ctx, []chanlimit.Request{{Key: "k", N: 1}, {Key: "other", N: 5}, {Key: "k", N: 1}}, out))
		assert.False(t, out[0].Allowed)
		assert.Equal(t, 2*time.Second+1, out[0].RetryAfter)
		assert.True(t, out[1].Allowed)
		assert.Equal(t, out[0], out[2])

		advance(clk, time.Nanosecond)
		_, done := answer(a)
		assert.True(t, done, "A at 3s")
		advance(clk, time.Second)
		_, done = answer(b)
		assert.True(t, done, "B at 4s")
		d, err := r.AllowN(ctx, "k", 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "the waiters took every token")
		assert.Equal(t, time.Second, d.RetryAfter, "no line: the bucket's own wait")
	})
}
