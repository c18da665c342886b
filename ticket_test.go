package chanlimit_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// The tests of StartWait: a Ticket waits in its key's line as a WaitN
// caller does, rings once on its channel, and has no goroutine. They run
// in a synctest bubble on a clock.Fake, as WaitN's do.

// rung returns the Ticket on ready, if one has rung.
func rung(ready <-chan *chanlimit.Ticket) (*chanlimit.Ticket, bool) {
	select {
	case tk := <-ready:
		return tk, true
	default:
		return nil, false
	}
}

func TestTicketsWaitInLineWithWaitN(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 1 a second, 3 at most, empty at 0: A (WaitN, 1 unit) at 1s, the
		// Ticket (2) at 3s, C (WaitN, 1) at 4s.
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Burst: 3})
		ctx := context.Background()
		exhaust(t, r, "k", 3)
		ready := make(chan *chanlimit.Ticket, 1)
		a := goWait(ctx, r, "k", 1)
		tk, err := r.StartWait(ctx, "k", 2, ready)
		require.NoError(t, err)
		assert.Equal(t, "k", tk.Key())
		c := goWait(ctx, r, "k", 1)
		require.Equal(t, 3, waiting(t, r))

		advance(clk, time.Second)
		_, done := answer(a)
		assert.True(t, done, "A at 1s")
		advance(clk, time.Second)
		_, rang := rung(ready)
		require.False(t, rang, "not at 2s: it needs 2 units")
		d, _ := r.Peek(ctx, "k", 1)
		assert.False(t, d.Allowed, "nobody passes the Ticket")

		advance(clk, time.Second)
		got, rang := rung(ready)
		require.True(t, rang, "at 3s")
		require.Same(t, tk, got)
		d, err = got.Answer()
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		_, done = answer(c)
		assert.False(t, done, "C after it")
		advance(clk, time.Second)
		_, done = answer(c)
		assert.True(t, done, "C at 4s")
		_, rang = rung(ready)
		assert.False(t, rang, "a Ticket rings once")
		d2, err2 := got.Answer()
		assert.Equal(t, d, d2, "Answer again says the same")
		assert.Equal(t, err, err2)
	})
}

func TestTicketsHaveNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Second, Partitions: 4})
		ctx := context.Background()
		const keys = 200
		ready := make(chan *chanlimit.Ticket, keys)
		for i := range keys {
			exhaust(t, r, fmt.Sprint(i), 10)
		}
		synctest.Wait()
		before := runtime.NumGoroutine()
		for i := range keys {
			_, err := r.StartWait(ctx, fmt.Sprint(i), 1, ready)
			require.NoError(t, err)
		}
		synctest.Wait()
		assert.Equal(t, keys, waiting(t, r))
		// NumGoroutine counts the process's, and another test's may end
		// meanwhile: a bound, far below a goroutine per Ticket.
		assert.Less(t, runtime.NumGoroutine()-before, 5, "200 Tickets in line, no goroutine more")
		advance(clk, 100*time.Millisecond)
		seen := map[string]bool{}
		for range keys {
			tk, rang := rung(ready)
			require.True(t, rang)
			d, err := tk.Answer()
			require.NoError(t, err)
			assert.True(t, d.Allowed)
			seen[tk.Key()] = true
		}
		assert.Len(t, seen, keys)
	})
}

func TestTicketLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		ctx := context.Background()
		exhaust(t, r, "k", 1)
		ready := make(chan *chanlimit.Ticket, 2)
		tk, err := r.StartWait(ctx, "k", 1, ready)
		require.NoError(t, err)
		behind := goWait(ctx, r, "k", 1)
		require.Equal(t, 2, waiting(t, r))

		tk.Leave(context.Canceled)
		synctest.Wait()
		got, rang := rung(ready)
		require.True(t, rang, "it rings with its leave")
		_, err = got.Answer()
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 1, waiting(t, r), "out of the line, it counts nowhere")
		tk.Leave(context.DeadlineExceeded) // after Answer: nothing
		advance(clk, time.Second)
		w, done := answer(behind)
		require.True(t, done, "the caller behind it moved up: granted at 1s")
		require.NoError(t, w.err)
		_, rang = rung(ready)
		assert.False(t, rang)
	})
}

func TestTicketLeavingAfterItsGrantKeepsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		ctx := context.Background()
		exhaust(t, r, "k", 1)
		ready := make(chan *chanlimit.Ticket, 1)
		tk, err := r.StartWait(ctx, "k", 1, ready)
		require.NoError(t, err)
		advance(clk, time.Second) // granted, rung, not received yet
		tk.Leave(context.Canceled)
		synctest.Wait()
		got, rang := rung(ready)
		require.True(t, rang)
		d, err := got.Answer()
		require.NoError(t, err, "the grant came first")
		assert.True(t, d.Allowed)
		_, rang = rung(ready)
		assert.False(t, rang, "the leave rang nothing")
		d, _ = r.Peek(ctx, "k", 1)
		assert.False(t, d.Allowed, "the grant stands: the unit is taken")
	})
}

func TestTicketErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Hour, MaxKeys: 1, MaxKeyBytes: 4, MaxWaiters: 1})
		ctx := context.Background()
		ready := make(chan *chanlimit.Ticket, 8)
		_, err := r.StartWait(ctx, "k", 0, ready)
		assert.ErrorIs(t, err, chanlimit.ErrInvalidCount)
		_, err = r.StartWait(ctx, "too long", 1, ready)
		assert.ErrorIs(t, err, chanlimit.ErrKeyTooLong)
		done, cancel := context.WithCancel(ctx)
		cancel()
		_, err = r.StartWait(done, "k", 1, ready)
		assert.ErrorIs(t, err, context.Canceled)
		tk, err := r.StartWait(ctx, "k", 1, nil)
		assert.ErrorContains(t, err, "ready is nil", "no Ticket could ever come back")
		assert.Nil(t, tk)

		exhaust(t, r, "k", 2)
		first, err := r.StartWait(ctx, "k", 1, ready) // the line's one place
		require.NoError(t, err)
		short, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for _, c := range []struct {
			name string
			ctx  context.Context
			key  string
			n    int
			want error
		}{
			{"above the capacity", ctx, "k", 3, chanlimit.ErrExceedsCapacity},
			{"the line is full", ctx, "k", 1, chanlimit.ErrTooManyWaiters},
			{"MaxKeys is held by k", ctx, "new", 1, chanlimit.ErrTooManyKeys},
			{"the line is full, before its deadline counts", short, "k", 1, chanlimit.ErrTooManyWaiters},
		} {
			tk, err := r.StartWait(c.ctx, c.key, c.n, ready)
			require.NoError(t, err, c.name)
			synctest.Wait()
			got, rang := rung(ready)
			require.True(t, rang, c.name)
			require.Same(t, tk, got, c.name)
			_, err = got.Answer()
			assert.ErrorIs(t, err, c.want, c.name)
		}
		require.NoError(t, r.Close())
		synctest.Wait()
		got, rang := rung(ready)
		require.True(t, rang, "Close answers the Ticket in line")
		require.Same(t, first, got)
		_, err = got.Answer()
		assert.ErrorIs(t, err, chanlimit.ErrClosed)
		_, err = r.StartWait(ctx, "k", 1, ready)
		assert.ErrorIs(t, err, chanlimit.ErrClosed)
	})
}

func TestTicketDeadlineComesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour})
		exhaust(t, r, "k", 1)
		ready := make(chan *chanlimit.Ticket, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := r.StartWait(ctx, "k", 1, ready)
		require.NoError(t, err)
		synctest.Wait()
		tk, rang := rung(ready)
		require.True(t, rang, "at once: the grant would come in an hour")
		d, err := tk.Answer()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Hour, d.RetryAfter)
		assert.Equal(t, 0, waiting(t, r))
	})
}

// TestTicketRingsWhenReadyIsFull: the partition never waits on a Ticket's
// owner; a Ticket that finds ready full comes on it all the same.
func TestTicketRingsWhenReadyIsFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
		ctx := context.Background()
		ready := make(chan *chanlimit.Ticket) // no room at all
		exhaust(t, r, "a", 1)
		exhaust(t, r, "b", 1)
		for _, key := range []string{"a", "b"} {
			_, err := r.StartWait(ctx, key, 1, ready)
			require.NoError(t, err)
		}
		advance(clk, time.Second)
		d, err := r.AllowN(ctx, "c", 1)
		require.NoError(t, err, "the partition goes on")
		assert.True(t, d.Allowed)
		keys := map[string]bool{}
		for range 2 {
			tk := <-ready
			d, err := tk.Answer()
			require.NoError(t, err)
			assert.True(t, d.Allowed)
			keys[tk.Key()] = true
		}
		assert.Len(t, keys, 2)
	})
}

// TestTicketsRacingClose: a StartWait racing Close either fails, or its
// Ticket rings exactly once, with its grant or ErrClosed.
func TestTicketsRacingClose(t *testing.T) {
	for range 20 {
		r, err := chanlimit.New(chanlimit.Config{Limit: 50, Window: time.Hour, Partitions: 2, Clock: clock.NewFake(epoch)})
		require.NoError(t, err)
		const callers, each = 8, 25
		ready := make(chan *chanlimit.Ticket, callers*each)
		var started sync.WaitGroup
		var mu sync.Mutex // the test's own tally
		tickets := map[*chanlimit.Ticket]bool{}
		for c := range callers {
			started.Go(func() {
				for i := range each {
					tk, err := r.StartWait(context.Background(), fmt.Sprint(c, "/", i%3), 1, ready)
					if err != nil {
						assert.ErrorIs(t, err, chanlimit.ErrClosed)
						continue
					}
					mu.Lock()
					tickets[tk] = true
					mu.Unlock()
				}
			})
		}
		require.NoError(t, r.Close())
		started.Wait()
		for range tickets {
			tk := <-ready
			require.True(t, tickets[tk], "a Ticket rings once")
			tickets[tk] = false
			if _, err := tk.Answer(); err != nil {
				assert.ErrorIs(t, err, chanlimit.ErrClosed)
			}
		}
		_, rang := rung(ready)
		assert.False(t, rang)
	}
}

// TestTicketLeavesWithoutAReason: Leave(nil) leaves with context.Canceled,
// never with a nil error that would read as a grant.
func TestTicketLeavesWithoutAReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour})
		exhaust(t, r, "k", 1)
		ready := make(chan *chanlimit.Ticket, 1)
		tk, err := r.StartWait(context.Background(), "k", 1, ready)
		require.NoError(t, err)
		tk.Leave(nil)
		synctest.Wait()
		d, err := (<-ready).Answer()
		assert.ErrorIs(t, err, context.Canceled)
		assert.False(t, d.Allowed)
	})
}
