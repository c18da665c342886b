package chanlimit_test

import (
	"context"
	"fmt"
	"math"
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

func TestWaitNCancelledWaitersTakeNothingAndLetOthersUp(t *testing.T) {
	t.Run("Head", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Burst: 5})
			exhaust(t, r, "k", 5)
			ctx, cancel := context.WithCancel(context.Background())
			a := goWait(ctx, r, "k", 3) // would be granted at 3s
			b := goWait(context.Background(), r, "k", 1)
			advance(clk, time.Second) // one token: B's, but A is ahead
			_, done := answer(b)
			require.False(t, done)

			cancel()
			synctest.Wait()
			w, done := answer(a)
			require.True(t, done)
			assert.ErrorIs(t, w.err, context.Canceled)
			assert.Equal(t, chanlimit.Decision{}, w.d)
			w, done = answer(b)
			require.True(t, done, "the head left: B is granted at once")
			require.NoError(t, w.err)
			assert.True(t, w.d.Allowed)
			assert.Zero(t, waiting(t, r))
			d, err := r.Peek(context.Background(), "k", 1)
			require.NoError(t, err)
			assert.Equal(t, time.Second, d.RetryAfter, "A took nothing, B took the one token")
		})
	})
	t.Run("Middle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Burst: 5})
			exhaust(t, r, "k", 5)
			ctx, cancel := context.WithCancel(context.Background())
			a := goWait(context.Background(), r, "k", 3) // at 3s
			b := goWait(ctx, r, "k", 2)                  // would be at 5s
			c := goWait(context.Background(), r, "k", 1) // at 6s; at 4s once B has left
			d, err := r.Peek(context.Background(), "k", 1)
			require.NoError(t, err)
			assert.Equal(t, 7*time.Second, d.RetryAfter, "behind A, B and C")

			cancel()
			synctest.Wait()
			w, done := answer(b)
			require.True(t, done)
			assert.ErrorIs(t, w.err, context.Canceled)
			assert.Equal(t, 2, waiting(t, r), "B counts nowhere once it has returned")
			d, err = r.Peek(context.Background(), "k", 1)
			require.NoError(t, err)
			assert.Equal(t, 5*time.Second, d.RetryAfter, "behind A and C")

			advance(clk, 3*time.Second)
			_, done = answer(a)
			assert.True(t, done, "A at 3s")
			advance(clk, time.Second-time.Nanosecond)
			_, done = answer(c)
			assert.False(t, done)
			advance(clk, time.Nanosecond)
			_, done = answer(c)
			assert.True(t, done, "C at 4s")
		})
	})
}

func TestWaitNDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Burst: 2})
		exhaust(t, r, "k", 2)

		// The grant would come at 1s: a deadline at 500ms cannot be met.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		d, err := r.WaitN(ctx, "k", 1)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Zero(t, time.Since(start), "at once, not at the deadline")
		assert.Equal(t, chanlimit.Decision{Limit: 1, RetryAfter: time.Second, ResetAfter: 2 * time.Second, Policy: chanlimit.DefaultPolicyName}, d)
		assert.Zero(t, waiting(t, r), "queued nothing")
		d, err = r.Peek(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.Equal(t, time.Second, d.RetryAfter, "took nothing")

		// A deadline at the grant is met; behind a waiter, the wait is
		// the line's.
		ctx1, cancel1 := context.WithTimeout(context.Background(), time.Second)
		defer cancel1()
		first := goWait(ctx1, r, "k", 1)
		ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second-time.Nanosecond)
		defer cancel2()
		d, err = r.WaitN(ctx2, "k", 1)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "behind the first, the grant is at 2s")
		assert.Equal(t, 2*time.Second, d.RetryAfter)
		advance(clk, time.Second)
		w, done := answer(first)
		require.True(t, done)
		require.NoError(t, w.err)
		assert.True(t, w.d.Allowed)

		st, err := r.Stats(context.Background())
		require.NoError(t, err)
		assert.Equal(t, uint64(2), st.Denied, "the two WaitN refused for their deadline count as denials")
	})
}

func TestWaitNReleasesExactlyAtTheGrantForEveryAlgorithm(t *testing.T) {
	for _, algorithm := range registered {
		t.Run(algorithm, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := chanlimit.Config{Algorithm: algorithm, Limit: 3, Window: time.Second}
				r, clk := newRouter(t, cfg)
				twin, twinClk := newRouter(t, cfg) // the schedule without waiting, to tell when the grant is due
				for _, rt := range []*chanlimit.Router{r, twin} {
					for range 3 {
						_, err := rt.AllowN(context.Background(), "k", 1)
						require.NoError(t, err)
					}
				}
				var due time.Duration
				for {
					d, err := twin.Peek(context.Background(), "k", 2)
					require.NoError(t, err)
					if d.Allowed && d.Delay == 0 {
						break
					}
					wait := d.RetryAfter
					if d.Allowed {
						wait = d.Delay
					}
					require.Positive(t, wait)
					twinClk.Advance(wait)
					due += wait
				}
				require.Positive(t, due)

				w := goWait(context.Background(), r, "k", 2)
				advance(clk, due-time.Nanosecond)
				_, done := answer(w)
				require.False(t, done, "1ns before the grant")
				advance(clk, time.Nanosecond)
				got, done := answer(w)
				require.True(t, done, "at the grant, %v", due)
				require.NoError(t, got.err)
				assert.True(t, got.d.Allowed)
				assert.Zero(t, got.d.Delay, "a waiter returns at its turn")
			})
		})
	}
}

func TestWaitNLeakyBucketReturnsAtItsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A queue of 3 drained at 1 a second: WaitN i returns at i seconds.
		r, clk := newRouter(t, chanlimit.Config{Algorithm: "leaky_bucket", Limit: 1, Window: time.Second, Burst: 3})
		chans := make([]<-chan waited, 5)
		for i := range chans {
			chans[i] = goWait(context.Background(), r, "k", 1)
		}
		for i, ch := range chans {
			if i > 0 {
				advance(clk, time.Second-time.Nanosecond)
				_, done := answer(ch)
				require.False(t, done, "waiter %d, 1ns before its turn", i)
				advance(clk, time.Nanosecond)
			}
			w, done := answer(ch)
			require.True(t, done, "waiter %d at %ds", i, i)
			require.NoError(t, w.err)
			assert.True(t, w.d.Allowed)
			assert.Zero(t, w.d.Delay)
			assert.Equal(t, len(chans)-1-i, waiting(t, r))
		}
	})
}

func TestWaitNMaxWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, MaxWaiters: 2})
		exhaust(t, r, "k", 1)
		exhaust(t, r, "other", 1)
		a := goWait(context.Background(), r, "k", 1)
		b := goWait(context.Background(), r, "k", 1)
		_, err := r.WaitN(context.Background(), "k", 1)
		assert.ErrorIs(t, err, chanlimit.ErrTooManyWaiters, "a third on k")
		o := goWait(context.Background(), r, "other", 1) // the cap is per key
		assert.Equal(t, 3, waiting(t, r))

		advance(clk, time.Second)
		for i, ch := range []<-chan waited{a, o} {
			w, done := answer(ch)
			require.True(t, done, "waiter %d", i)
			require.NoError(t, w.err)
		}
		c := goWait(context.Background(), r, "k", 1) // room again
		advance(clk, 2*time.Second)
		for _, ch := range []<-chan waited{b, c} {
			w, done := answer(ch)
			require.True(t, done)
			require.NoError(t, w.err)
		}
	})
}

func TestWaitNCloseAnswersEveryWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(epoch)
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Hour, Clock: clk, Partitions: 2})
		require.NoError(t, err)
		var chans []<-chan waited
		for _, key := range []string{"a", "b", "c", "d"} {
			exhaust(t, r, key, 1)
			for range 3 {
				chans = append(chans, goWait(context.Background(), r, key, 1))
			}
		}
		require.Equal(t, 12, waiting(t, r))
		require.NoError(t, r.Close())
		synctest.Wait()
		for i, ch := range chans {
			w, done := answer(ch)
			require.True(t, done, "waiter %d", i)
			assert.ErrorIs(t, w.err, chanlimit.ErrClosed, "waiter %d", i)
		}
		_, err = r.WaitN(context.Background(), "a", 1)
		assert.ErrorIs(t, err, chanlimit.ErrClosed)
	})
}

func TestWaitNBadRequestsFailAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second, MaxKeys: 1, MaxKeyBytes: 4})
		ctx := context.Background()
		exhaust(t, r, "k", 2)
		w := goWait(ctx, r, "k", 1) // a line, so that joining it is checked too
		for _, key := range []string{"k", "new"} {
			_, err := r.WaitN(ctx, key, 0)
			assert.ErrorIs(t, err, chanlimit.ErrInvalidCount, key)
			_, err = r.WaitN(ctx, key, 3)
			assert.ErrorIs(t, err, chanlimit.ErrExceedsCapacity, key)
		}
		_, err := r.WaitN(ctx, "too long", 1)
		assert.ErrorIs(t, err, chanlimit.ErrKeyTooLong)
		_, err = r.WaitN(ctx, "new", 1)
		assert.ErrorIs(t, err, chanlimit.ErrTooManyKeys, "MaxKeys is held by k")
		done, cancel := context.WithCancel(ctx)
		cancel()
		_, err = r.WaitN(done, "new", 1)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 1, waiting(t, r))
		_, finished := answer(w)
		assert.False(t, finished)
	})
}

func TestWaitNKeyWithWaitersIsNeverEvictedOrForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Burst 2, 1 per 10s: k is empty at 0, and its waiter is due at
		// 10s with the bucket then empty again. Had k's state been let
		// go, the waiter would find a full bucket and leave 1.
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: 10 * time.Second, Burst: 2, Partitions: 1, MaxKeys: 3, EvictLRU: true})
		exhaust(t, r, "k", 2)
		w := goWait(context.Background(), r, "k", 1)
		for i := range 50 { // a flood of new keys: each evicts the least recently used
			exhaust(t, r, fmt.Sprint("flood", i), 1)
			if i%5 == 0 {
				advance(clk, time.Second/5) // and time passes, so that idle keys expire
			}
		}
		st, err := r.Stats(context.Background())
		require.NoError(t, err)
		require.Positive(t, st.Evicted)
		advance(clk, 10*time.Second-2*time.Second-time.Nanosecond)
		_, done := answer(w)
		require.False(t, done)
		advance(clk, time.Nanosecond)
		got, done := answer(w)
		require.True(t, done)
		require.NoError(t, got.err)
		assert.Equal(t, 0, got.d.Remaining, "k kept its state")
	})
}

func TestWaitNAfterResetOrAChangeOfPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 4, Window: time.Hour})
		ctx := context.Background()
		exhaust(t, r, "k", 4)
		a := goWait(ctx, r, "k", 3)
		b := goWait(ctx, r, "k", 3)
		require.NoError(t, r.Reset(ctx, "k"))
		synctest.Wait()
		w, done := answer(a)
		require.True(t, done, "k is untouched again: the head is granted at once")
		require.NoError(t, w.err)
		_, done = answer(b)
		require.False(t, done, "1 token left")

		// The new policy cannot ever grant b's 3 units: it fails, at once.
		require.NoError(t, r.SetPolicies(ctx, chanlimit.Policy{Limit: 2, Window: time.Hour}))
		synctest.Wait()
		w, done = answer(b)
		require.True(t, done)
		assert.ErrorIs(t, w.err, chanlimit.ErrExceedsCapacity)
		assert.Zero(t, waiting(t, r))
	})
}

func TestWaitNSeveralPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 2 a second and 3 a minute: the third unit waits for the minute.
		r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
			{Name: "second", Limit: 2, Window: time.Second},
			{Name: "minute", Algorithm: "fixed_window", Limit: 3, Window: time.Minute},
		}})
		ctx := context.Background()
		exhaust(t, r, "k", 2)
		a := goWait(ctx, r, "k", 1) // 500ms: the second's bucket has a token, and the minute one unit
		b := goWait(ctx, r, "k", 1) // 60s: the minute's window is spent
		d, err := r.Peek(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, 60*time.Second, d.RetryAfter, "behind b, in the next minute too")
		advance(clk, 500*time.Millisecond)
		w, done := answer(a)
		require.True(t, done)
		require.NoError(t, w.err)
		assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 2, ResetAfter: time.Minute - 500*time.Millisecond, Policy: "second"}, w.d, "both left with 0: the first decides")
		advance(clk, 60*time.Second-500*time.Millisecond-time.Nanosecond)
		_, done = answer(b)
		require.False(t, done)
		advance(clk, time.Nanosecond)
		_, done = answer(b)
		require.True(t, done)
	})
}

// TestWaitNTooLateSaysWhatTheKeyHasLeft: a WaitN that a deadline refuses
// at once on a key with no line says what the key has left, as AllowN's
// denial would (the units are there for a smaller request), and with a
// line, 0 (they are the line's).
func TestWaitNTooLateSaysWhatTheKeyHasLeft(t *testing.T) {
	for alg, wait := range map[string]time.Duration{
		"token_bucket": time.Second,     // 1 more unit comes in 1s
		"leaky_bucket": 3 * time.Second, // its turn comes after the 3 queued
	} {
		r, clk := newRouter(t, chanlimit.Config{Algorithm: alg, Limit: 5, Window: 5 * time.Second})
		allowN(t, r, "k", 3)
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		d, err := r.WaitN(ctx, "k", 3) // past the deadline
		require.ErrorIs(t, err, context.DeadlineExceeded, alg)
		assert.False(t, d.Allowed, alg)
		assert.Equal(t, 2, d.Remaining, alg)
		assert.Equal(t, wait, d.RetryAfter, alg)

		waited := make(chan error, 1)
		go func() { _, err := r.WaitN(bg, "k", 5); waited <- err }()
		require.NoError(t, clk.BlockUntilContext(bg, 1), alg) // in line
		d, err = r.WaitN(ctx, "k", 1)
		require.ErrorIs(t, err, context.DeadlineExceeded, alg)
		assert.Zero(t, d.Remaining, "%s: the units left are the line's", alg)
		cancel()
		clk.Advance(time.Minute)
		require.NoError(t, <-waited, alg)
	}
}

// TestWaitNCountsInStats: WaitN's answers count as AllowN's do: a grant,
// at once or in line, in Allowed; a denial at once (a deadline the grant
// would pass) in Denied; a wait whose caller left, nowhere.
func TestWaitNCountsInStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		ctx := context.Background()
		counts := func() [2]uint64 {
			st, err := r.Stats(ctx)
			require.NoError(t, err)
			return [2]uint64{st.Allowed, st.Denied}
		}
		_, err := r.WaitN(ctx, "k", 1) // at once
		require.NoError(t, err)
		assert.Equal(t, [2]uint64{1, 0}, counts(), "granted at once")

		soon, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		_, err = r.WaitN(soon, "k", 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, [2]uint64{1, 1}, counts(), "denied at once: the grant would pass the deadline")

		left, leave := context.WithCancel(ctx)
		gone := goWait(left, r, "k", 1)
		w := goWait(ctx, r, "k", 1)
		leave()
		synctest.Wait()
		got, done := answer(gone)
		require.True(t, done)
		require.ErrorIs(t, got.err, context.Canceled)
		advance(clk, time.Second)
		got, done = answer(w)
		require.True(t, done)
		require.NoError(t, got.err)
		assert.Equal(t, [2]uint64{2, 1}, counts(), "granted in line; the one that left counts nowhere")
	})
}

// TestWaitNWithADeadlineCenturiesAway: a ctx whose deadline is as far as
// a Duration goes (context.WithTimeout(ctx, math.MaxInt64), a common "no
// real timeout") leaves a wait all the time it needs. (Before the fix, the
// deadline, in Unix nanoseconds past the year 2262, wrapped, and the wait
// was refused at once with a budget of 0.)
func TestWaitNWithADeadlineCenturiesAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Burst: 5})
		ctx, cancel := context.WithTimeout(context.Background(), math.MaxInt64)
		defer cancel()
		exhaust(t, r, "k", 5)
		ch := goWait(ctx, r, "k", 1)
		if w, done := answer(ch); done {
			t.Fatalf("answered at once: %v", w.err)
		}
		advance(clk, time.Second)
		w, done := answer(ch)
		require.True(t, done, "granted once a unit came back")
		require.NoError(t, w.err)
	})
}
