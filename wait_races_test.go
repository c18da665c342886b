package chanlimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// Tests of WaitN where it meets the rest of the partition: late timers, clocks
// that step back or end the goroutine, tiny mailboxes, Close, Restore and
// overrides racing with waiters, and each joiner released when Peek said.

// lazyTimers is a Fake whose timers come from a second Fake that never
// moves: they never fire, as a timer that fires late (a loaded machine)
// has not fired yet. The partition's reading of the time is the Fake's.
type lazyTimers struct {
	*clock.Fake
	timers *clock.Fake
}

func (c lazyTimers) NewTimer(d time.Duration) clock.Timer { return c.timers.NewTimer(d) }

// lateRouter returns a router of one partition, 1 token a second up to
// burst, on lazyTimers, closed when the test ends.
func lateRouter(t *testing.T, burst int) (*chanlimit.Router, lazyTimers) {
	t.Helper()
	clk := lazyTimers{clock.NewFake(epoch), clock.NewFake(epoch)}
	r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second, Burst: burst, Partitions: 1, Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r, clk
}

// TestWaitNALateLineKeepsItsScheduleThroughDo: a line is served on its
// own schedule (a late wake costs no quota), and a Do message (Stats,
// Snapshot, SetPolicies...) that reaches the partition before the late
// timer does serves the lines due first, on their schedule.
//
// 1 token/s, burst 5, empty at 0: A (5) is due at 5s, B (5) at 10s, a
// joiner of 1 at 11s. At 7s (the timer late) a Peek says 4s, and after a
// Stats it still does.
func TestWaitNALateLineKeepsItsScheduleThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := lateRouter(t, 5)
		ctx := context.Background()
		exhaust(t, r, "k", 5)
		a := goWait(ctx, r, "k", 5)
		b := goWait(ctx, r, "k", 5)
		d, err := r.Peek(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, 11*time.Second, d.RetryAfter, "A at 5s, B at 10s, then 1 more at 11s")

		clk.Advance(7 * time.Second) // the timer (due at 5s) is late
		_, err = r.Stats(ctx)        // read-only
		require.NoError(t, err)
		synctest.Wait()
		_, done := answer(a)
		require.True(t, done, "A was due at 5s")
		_, done = answer(b)
		require.False(t, done)
		d, err = r.Peek(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, 4*time.Second, d.RetryAfter, "B is due at 10s (A granted at 5s, on the line's schedule), the joiner at 11s; a Stats call must not change that")
	})
}

// TestWaitNClockStepBackLocksNoWaiterOut: a clock that steps back grants
// nothing and locks nobody out. The partition's timeline ignores the back
// step; the line's timer is on the clock's own time, so the partition sets
// it again after a step back, and the waiter is granted when AllowN on a
// key in the same state would be.
func TestWaitNClockStepBackLocksNoWaiterOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Burst: 1, Partitions: 1})
		ctx := context.Background()
		exhaust(t, r, "k", 1)
		exhaust(t, r, "other", 1)
		w := goWait(ctx, r, "k", 1) // due at 1s
		clk.Set(epoch.Add(-time.Hour))
		// A request reads the clock after the step, so the forward step
		// below counts as time passing (see tick).
		_, err := r.Peek(ctx, "other", 1)
		require.NoError(t, err)
		synctest.Wait()
		advance(clk, time.Second) // 1s on the partition's timeline
		d, err := r.Peek(ctx, "other", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "an idle key in the same state is allowed now")
		// (that Peek served the line too, as any message does; check a
		// second waiter, with no message to help it)
		got, done := answer(w)
		require.True(t, done)
		require.NoError(t, got.err)

		w2 := goWait(ctx, r, "k", 1) // k empty at 1s: due at 2s
		clk.Set(clk.Now().Add(-time.Hour))
		_, err = r.Peek(ctx, "other", 1) // reads the clock: the step back is seen
		require.NoError(t, err)
		synctest.Wait()
		advance(clk, time.Second) // 2s on the timeline: w2's grant time
		_, done = answer(w2)
		assert.True(t, done, "w2's grant time has come on the partition's timeline; its timer is still an hour away on the clock")
	})
}

// goexitTimers is a Fake whose readings (exitNow) or timers (exitTimer)
// run runtime.Goexit once when set, as t.FailNow in a test Clock would.
type goexitTimers struct {
	*clock.Fake
	exitNow, exitTimer atomic.Bool
}

func (c *goexitTimers) Now() time.Time {
	if c.exitNow.CompareAndSwap(true, false) {
		runtime.Goexit()
	}
	return c.Fake.Now()
}

func (c *goexitTimers) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *goexitTimers) NewTimer(d time.Duration) clock.Timer {
	if c.exitTimer.CompareAndSwap(true, false) {
		runtime.Goexit()
	}
	return c.Fake.NewTimer(d)
}

// TestWaitNClockGoexitOnWakeLeavesNoLineBehind: the timer fires, wake
// reads the clock, and the clock runs Goexit. The goroutine that takes
// over sets the timer again, though no request was in flight, so the line
// is served without waiting for an unrelated message.
func TestWaitNClockGoexitOnWakeLeavesNoLineBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := &goexitTimers{Fake: clock.NewFake(epoch)}
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second, Burst: 1, Partitions: 1, Clock: clk})
		require.NoError(t, err)
		defer r.Close()
		exhaust(t, r, "k", 1)
		w := goWait(context.Background(), r, "k", 1) // due at 1s
		clk.exitNow.Store(true)
		advance(clk.Fake, time.Second) // the wake's reading runs Goexit
		require.False(t, clk.exitNow.Load(), "the clock was read by the wake")
		advance(clk.Fake, 10*time.Second)
		_, done := answer(w)
		assert.True(t, done, "the waiter's grant time passed 10s ago; nothing will wake it")
	})
}

// TestWaitNClockGoexitInNewTimerLeavesNoLineBehind: the clock's NewTimer
// runs Goexit while the partition sets the timer for a new line, after
// the wait was queued: the goroutine that takes over sets it again.
func TestWaitNClockGoexitInNewTimerLeavesNoLineBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := &goexitTimers{Fake: clock.NewFake(epoch)}
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second, Burst: 1, Partitions: 1, Clock: clk})
		require.NoError(t, err)
		defer r.Close()
		exhaust(t, r, "k", 1)
		clk.exitTimer.Store(true)
		w := goWait(context.Background(), r, "k", 1) // due at 1s
		require.False(t, clk.exitTimer.Load(), "NewTimer was called")
		advance(clk.Fake, 10*time.Second)
		got, done := answer(w)
		assert.True(t, done, "answered: granted at 1s, or failed with ErrClockPanic")
		_ = got
	})
}

// joinerWait is what Peek tells a caller joining key's line at the
// current time: the instant (since epoch) it would be granted.
func joinerWait(t *testing.T, r *chanlimit.Router, clk *clock.Fake, key string, n int) time.Duration {
	t.Helper()
	d, err := r.Peek(context.Background(), key, n)
	require.NoError(t, err)
	wait := d.RetryAfter
	if d.Allowed {
		wait = d.Delay // leaky_bucket: its turn
	}
	return clk.Now().Sub(epoch) + wait
}

// TestWaitNJoinersAreGrantedWhenPeekSaid: for every algorithm, and for two
// policies at once, callers join a line one after another with mixed n
// at scattered instants; each is released exactly at the instant a Peek
// told it just before it joined (and not 1ns before).
func TestWaitNJoinersAreGrantedWhenPeekSaid(t *testing.T) {
	configs := map[string]chanlimit.Config{}
	for _, a := range registered {
		configs[a] = chanlimit.Config{Algorithm: a, Limit: 4, Window: time.Second}
	}
	configs["two policies"] = chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "fast", Algorithm: "gcra", Limit: 3, Window: time.Second},
		{Name: "slow", Algorithm: "sliding_window_counter", Limit: 7, Window: 5 * time.Second},
	}}
	configs["leaky and log"] = chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "leaky", Algorithm: "leaky_bucket", Limit: 3, Window: time.Second},
		{Name: "log", Algorithm: "sliding_window_log", Limit: 5, Window: 3 * time.Second},
	}}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg.Partitions = 1
				r, clk := newRouter(t, cfg)
				ctx := context.Background()
				for i := 0; ; i++ { // exhaust, at scattered instants
					d, err := r.AllowN(ctx, "k", 1)
					require.NoError(t, err)
					if !d.Allowed {
						break
					}
					if i%2 == 1 {
						advance(clk, 77*time.Millisecond)
					}
				}
				type joiner struct {
					at time.Duration
					ch <-chan waited
				}
				var js []joiner
				for i := range 7 {
					n := 1 + i%3
					at := joinerWait(t, r, clk, "k", n)
					js = append(js, joiner{at, goWait(ctx, r, "k", n)})
					if i%3 == 2 {
						advance(clk, 113*time.Millisecond)
					}
				}
				require.True(t, slices.IsSortedFunc(js, func(a, b joiner) int { return int(a.at - b.at) }), "a line is served in order")
				for i, j := range js {
					now := clk.Now().Sub(epoch)
					if i == 0 { // no line yet: Peek is the rule's (leaky_bucket: the wait for room, not for its turn)
						continue
					}
					if j.at > now {
						advance(clk, j.at-now-time.Nanosecond)
						_, done := answer(j.ch)
						require.False(t, done, "joiner %d released 1ns before %v", i, j.at)
						advance(clk, time.Nanosecond)
					}
					got, done := answer(j.ch)
					require.True(t, done, "joiner %d not released at %v (now %v)", i, j.at, clk.Now().Sub(epoch))
					require.NoError(t, got.err)
					require.True(t, got.d.Allowed)
				}
				require.Zero(t, waiting(t, r))
			})
		})
	}
}

// TestWaitNWaitingNeverDriftsUnderCloseAndCancel: waiters on several keys,
// cancelled at random, with AllowN, Peek and batches, Resets, SetPolicies
// and SetOverride, while time moves; then Close. Every call returns,
// Stats.Waiting counts exactly the callers still inside WaitN, and the
// waiters left are answered ErrClosed.
func TestWaitNWaitingNeverDriftsUnderCloseAndCancel(t *testing.T) {
	for _, mailbox := range []int{0, 1, 64} {
		t.Run(fmt.Sprint("mailbox ", mailbox), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := clock.NewFake(epoch)
				r, err := chanlimit.New(chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 2, MailboxSize: mailbox, MaxWaiters: 5, Clock: clk})
				require.NoError(t, err)
				ctx := context.Background()
				keys := []string{"a", "b", "c"}
				var inside atomic.Int64
				var cancels []context.CancelFunc
				var chans []<-chan waited
				for i := range 40 {
					key := keys[i%len(keys)]
					switch i % 8 {
					case 3:
						_, _ = r.AllowN(ctx, key, 1)
					case 5:
						out := make([]chanlimit.Decision, 2)
						_ = r.AllowBatch(ctx, []chanlimit.Request{{Key: key, N: 1}, {Key: "b", N: 2}}, out)
					case 6:
						require.NoError(t, r.SetOverride(ctx, key, chanlimit.Policy{Limit: 2 + i%3, Window: time.Second}))
					case 7:
						if i%16 == 7 {
							require.NoError(t, r.Reset(ctx, key))
						} else {
							require.NoError(t, r.ClearOverride(ctx, key))
						}
					}
					wctx, cancel := context.WithCancel(ctx)
					cancels = append(cancels, cancel)
					ch := make(chan waited, 1)
					inside.Add(1)
					go func() {
						d, err := r.WaitN(wctx, key, 1+i%2)
						inside.Add(-1)
						ch <- waited{d, err}
					}()
					chans = append(chans, ch)
					synctest.Wait()
					if i%3 == 0 {
						cancels[i/2]()
						synctest.Wait()
					}
					if i%5 == 0 {
						advance(clk, 300*time.Millisecond)
					}
					st, err := r.Stats(ctx)
					require.NoError(t, err)
					require.EqualValues(t, inside.Load(), st.Waiting, "step %d", i)
				}
				require.NoError(t, r.Close())
				synctest.Wait()
				for i, ch := range chans {
					got, done := answer(ch)
					require.True(t, done, "WaitN %d returned", i)
					if got.err != nil && !errors.Is(got.err, context.Canceled) {
						require.Condition(t, func() bool {
							return errors.Is(got.err, chanlimit.ErrClosed) || errors.Is(got.err, chanlimit.ErrTooManyWaiters)
						}, "WaitN %d: %v", i, got.err)
					}
				}
				for _, c := range cancels {
					c()
				}
			})
		})
	}
}

// TestWaitNExactWithTinyMailboxesAndPolicies: the exactness race of
// wait_exact_test.go with mailboxes of 0 and 1 (leaves wait for room) and
// with two policies and an override on the key.
func TestWaitNExactWithTinyMailboxesAndPolicies(t *testing.T) {
	type setup struct {
		name     string
		cfg      chanlimit.Config
		override []chanlimit.Policy
		capacity int
	}
	var setups []setup
	for _, mb := range []int{0, 1} {
		setups = append(setups,
			setup{fmt.Sprint("token mailbox ", mb), chanlimit.Config{Limit: 40, Window: time.Second, MailboxSize: mb}, nil, 40},
			setup{fmt.Sprint("leaky mailbox ", mb), chanlimit.Config{Algorithm: "leaky_bucket", Limit: 40, Window: time.Second, MailboxSize: mb}, nil, 40},
			setup{fmt.Sprint("two policies mailbox ", mb), chanlimit.Config{MailboxSize: mb, Policies: []chanlimit.Policy{
				{Name: "a", Algorithm: "sliding_window_log", Limit: 50, Window: time.Second},
				{Name: "b", Algorithm: "fixed_window", Limit: 30, Window: time.Second},
			}}, nil, 30},
			setup{fmt.Sprint("override mailbox ", mb), chanlimit.Config{Limit: 10, Window: time.Second, MailboxSize: mb},
				[]chanlimit.Policy{{Name: "o", Algorithm: "gcra", Limit: 25, Window: time.Second}}, 25},
		)
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			clk := clock.NewFake(epoch)
			s.cfg.Clock, s.cfg.Partitions = clk, 1
			r, err := chanlimit.New(s.cfg)
			require.NoError(t, err)
			defer r.Close()
			if s.override != nil {
				require.NoError(t, r.SetOverride(context.Background(), "k", s.override...))
			}
			for round := range 3 {
				granted := raceOnOneKey(t, r, uint64(round+10))
				assert.Equal(t, s.capacity, granted+drain(t, r, "k"), "round %d", round)
				assert.Zero(t, waiting(t, r), "round %d", round)
				clk.Advance(10 * time.Second)
			}
		})
	}
}

// TestWaitNCloseRacesWaitersAndLeaves: many goroutines wait, leave, allow
// and batch on a few keys while Close comes at a random moment; on a
// mailbox of 0, 1 or 3. Every call returns (synctest reports a deadlock
// otherwise) with a decision, ErrClosed, its ctx's error or
// ErrTooManyWaiters.
func TestWaitNCloseRacesWaitersAndLeaves(t *testing.T) {
	for _, mb := range []int{0, 1, 3} {
		for seed := range 5 {
			t.Run(fmt.Sprintf("mailbox %d seed %d", mb, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					clk := clock.NewFake(epoch)
					r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Partitions: 2, MailboxSize: mb, MaxWaiters: 4, Clock: clk})
					require.NoError(t, err)
					done := make(chan struct{})
					for g := range 12 {
						go func() {
							defer func() { done <- struct{}{} }()
							for i := range 20 {
								key := []string{"x", "y", "z"}[(g+i)%3]
								ctx, cancel := context.WithCancel(context.Background())
								spins := (g*7 + i*13 + seed*5) % 40
								go func() {
									for range spins {
										runtime.Gosched()
									}
									cancel()
								}()
								var err error
								switch (g + i) % 4 {
								case 0, 1:
									_, err = r.WaitN(ctx, key, 1+i%2)
								case 2:
									_, err = r.AllowN(ctx, key, 1)
								default:
									out := make([]chanlimit.Decision, 2)
									err = r.AllowBatch(ctx, []chanlimit.Request{{Key: key, N: 1}, {Key: "x", N: 2}}, out)
								}
								cancel()
								if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, chanlimit.ErrClosed) && !errors.Is(err, chanlimit.ErrTooManyWaiters) {
									t.Errorf("unexpected error: %v", err)
								}
							}
						}()
					}
					go func() {
						for range 10 + seed*30 {
							runtime.Gosched()
						}
						clk.Advance(time.Second)
					}()
					for range seed * 50 {
						runtime.Gosched()
					}
					require.NoError(t, r.Close())
					for range 12 {
						<-done
					}
				})
			})
		}
	}
}

// TestWaitNRestoreAndOverridesWhileWaiting: a Restore while a line waits
// decides its head on the restored state at once, the key stays pinned
// across the Restore (a flood of new keys under EvictLRU never evicts
// it), and an override whose capacity is below a waiter's n fails that
// waiter at once and lets the next move up.
func TestWaitNRestoreAndOverridesWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: 10 * time.Second, Burst: 3, Partitions: 1, MaxKeys: 4, EvictLRU: true})
		ctx := context.Background()
		exhaust(t, r, "k", 1) // 2 left
		var snap bytes.Buffer
		require.NoError(t, r.Snapshot(ctx, &snap))
		exhaust(t, r, "k", 2) // empty
		a := goWait(ctx, r, "k", 2)
		b := goWait(ctx, r, "k", 3)
		c := goWait(ctx, r, "k", 1)
		require.NoError(t, r.Restore(ctx, bytes.NewReader(snap.Bytes())))
		synctest.Wait()
		got, done := answer(a)
		require.True(t, done, "the restored k has 2")
		require.NoError(t, got.err)
		_, done = answer(b)
		require.False(t, done)
		assert.Equal(t, 2, waiting(t, r))

		for i := range 30 { // a flood: each new key evicts the least recently used
			exhaust(t, r, fmt.Sprint("flood", i), 1)
		}
		// b (3 units) cannot fit a capacity of 2: it fails, and c moves up.
		require.NoError(t, r.SetOverride(ctx, "k", chanlimit.Policy{Limit: 1, Window: 10 * time.Second, Burst: 2}))
		synctest.Wait()
		got, done = answer(b)
		require.True(t, done)
		assert.ErrorIs(t, got.err, chanlimit.ErrExceedsCapacity)
		_, done = answer(c)
		require.False(t, done, "k kept its state (empty) through the flood and the override")
		advance(clk, 10*time.Second-time.Nanosecond)
		_, done = answer(c)
		require.False(t, done)
		advance(clk, time.Nanosecond)
		got, done = answer(c)
		require.True(t, done)
		require.NoError(t, got.err)
		assert.Zero(t, waiting(t, r))
	})
}

// TestWaitNHeadLeavesMidBurstOfLateLine: the line is late (its timer has
// not fired by the time a burst comes), the head leaves in that burst:
// the next is served on the line's schedule, not at now, and a joiner's
// RetryAfter still matches its release.
func TestWaitNHeadLeavesMidBurstOfLateLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := lateRouter(t, 4)
		ctx := context.Background()
		exhaust(t, r, "k", 4)
		actx, cancel := context.WithCancel(ctx)
		a := goWait(actx, r, "k", 4) // due at 4s
		b := goWait(ctx, r, "k", 2)  // at 4s, were a gone
		clk.Advance(6 * time.Second) // no timer fires: the line is 2s late
		cancel()
		synctest.Wait()
		got, done := answer(a)
		require.True(t, done)
		if got.err == nil {
			t.Skip("a was granted before it left (a message served the line first)")
		}
		got, done = answer(b)
		require.True(t, done, "b's 2 units were there at 4s")
		require.NoError(t, got.err)
		d, err := r.AllowN(ctx, "k", 3)
		require.NoError(t, err)
		// b took 2 at 4s, when the line was due (leave reschedules to
		// min(at, now)): the bucket is full again by 6s. Served at 6s,
		// it would have 2 left and deny 3.
		assert.True(t, d.Allowed)
		assert.Equal(t, 1, d.Remaining)
	})
}

// leakyExitsInRefund is a leaky bucket whose Refund runs runtime.Goexit
// once while exit is set.
type leakyExitsInRefund struct {
	*algorithms.LeakyBucket
	exit *atomic.Bool
}

func (m leakyExitsInRefund) Refund(s *algorithms.GCRAState, now time.Duration, n int) {
	if m.exit.CompareAndSwap(true, false) {
		runtime.Goexit()
	}
	m.LeakyBucket.Refund(s, now, n)
}

// TestWaitNRuleGoexitInRefundLeavesNoLineBehind: a Goexit in the Refund
// of a grant with a Delay (leaky_bucket's turn to come), while a line is
// served: the goroutine that takes over finds no request in flight, and
// still sets the timer, so the waiter is granted at its turn.
func TestWaitNRuleGoexitInRefundLeavesNoLineBehind(t *testing.T) {
	exit := new(atomic.Bool)
	name := fmt.Sprint("test_wait_refund_exit_", registrations.Add(1))
	require.NoError(t, chanlimit.Register[algorithms.GCRAState](name, func(p algorithms.Params) (leakyExitsInRefund, error) {
		lb, err := algorithms.NewLeakyBucket(p)
		return leakyExitsInRefund{lb, exit}, err
	}))
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 1, Window: time.Second, Burst: 2, Partitions: 1})
		ctx := context.Background()
		exhaust(t, r, "k", 1)       // now
		exhaust(t, r, "k", 1)       // Delay 1s: the queue is full
		w := goWait(ctx, r, "k", 1) // room at 1s (granted with a Delay, given back), its turn at 2s
		exit.Store(true)
		advance(clk, time.Second) // serveLine: AllowN grants with a Delay, Refund runs Goexit
		require.False(t, exit.Load(), "Refund was called by the line")
		advance(clk, 10*time.Second)
		_, done := answer(w)
		assert.True(t, done, "answered: with the rule's error (the key dropped) or a grant")
	})
}
