package chanlimit

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// exitOnTwo is a token bucket whose AllowN ends its goroutine
// (runtime.Goexit, as a failed require in a rule would) for 2 units.
type exitOnTwo struct{ *algorithms.TokenBucket }

func (m exitOnTwo) AllowN(s *algorithms.TokenBucketState, now time.Duration, n int, d *algorithms.Decision) {
	if n == 2 {
		runtime.Goexit()
	}
	m.TokenBucket.AllowN(s, now, n, d)
}

// registerExitOnTwo registers exitOnTwo, once, when a test first needs
// it: registered at init, it would join the algorithms every conformance
// test runs.
var registerExitOnTwo = sync.OnceValue(func() error {
	return Register[algorithms.TokenBucketState]("test_store_exit_on_two", func(p algorithms.Params) (exitOnTwo, error) {
		tb, err := algorithms.NewTokenBucket(p)
		return exitOnTwo{tb}, err
	})
})

// TestStoreGoexitWhileLanding: a line's head is out to a store that then
// fails, and FailLocal's local rule ends the goroutine while deciding it.
// The goroutine that takes over answers the head (if it is still there)
// with the rule's error, asks the next waiter, and serves the request
// parked behind the head, with nothing else sent to the partition. Before,
// the line stayed out for ever if its head had left, and the parked
// request waited for another message.
func TestStoreGoexitWhileLanding(t *testing.T) {
	require.NoError(t, registerExitOnTwo())
	for _, left := range []bool{false, true} {
		t.Run(fmt.Sprint("head left: ", left), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newHoldStore(clock.Real(), FailLocal, "k")
				st.kind = StoreTurn
				st.down.Store(true) // FailLocal decides: for the head, the rule ends the goroutine
				r := routerOn(t, st.memStore, st, Config{Algorithm: "test_store_exit_on_two", Limit: 5, Window: time.Hour, Partitions: 1})
				ctx, cancel := context.WithCancel(context.Background())
				head := make(chan error, 1)
				go func() { _, err := r.WaitN(ctx, "k", 2); head <- err }()
				synctest.Wait()
				require.EqualValues(t, 1, st.held.Load(), "the head is out")
				next := make(chan error, 1)
				go func() { _, err := r.WaitN(context.Background(), "k", 1); next <- err }()
				synctest.Wait()
				if left {
					cancel()
					synctest.Wait()
					require.ErrorIs(t, <-head, context.Canceled)
				}
				parked := make(chan error, 1)
				go func() {
					d, err := r.Peek(context.Background(), "k", 1)
					if err == nil && !d.Allowed {
						err = fmt.Errorf("denied: %+v", d)
					}
					parked <- err
				}()
				synctest.Wait()
				st.holding.Store(false)
				st.release <- struct{}{}
				synctest.Wait()
				if !left {
					require.ErrorIs(t, <-head, ErrAlgorithmPanic)
				}
				select {
				case err := <-next:
					assert.NoError(t, err, "the next waiter, decided by the local keys")
				default:
					t.Fatal("the next waiter was never answered")
				}
				select {
				case err := <-parked:
					assert.NoError(t, err)
				default:
					t.Fatal("the request parked behind the head was never served")
				}
				cancel()
			})
		})
	}
}

// TestStoreOneAskPerHead: policies that change, and a Reset, while a
// line's head is out do not ask it a second time: a line has one ask out
// at most. The answer that lands, a denial under the old policy, is asked
// again at once, since what decided it changed. Before, each made a
// second ask, whose grant a later waiter could be answered with.
func TestStoreOneAskPerHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newHoldStore(clock.Real(), FailClosed, "k")
		st.kind = StoreTurn
		r := routerOn(t, st.memStore, st, Config{Limit: 1, Window: time.Hour, Partitions: 1})
		ctx := context.Background()
		st.holding.Store(false)
		require.True(t, r.Allow("k"))
		st.holding.Store(true)
		got := make(chan error, 1)
		go func() { _, err := r.WaitN(ctx, "k", 1); got <- err }()
		synctest.Wait()
		require.EqualValues(t, 1, st.held.Load(), "the head is out")
		require.NoError(t, r.SetPolicies(ctx, Policy{Limit: 2, Window: time.Hour}))
		synctest.Wait()
		assert.EqualValues(t, 1, st.held.Load(), "no second ask while one is out")
		st.holding.Store(false)
		st.release <- struct{}{} // denied: decided before the new policy
		synctest.Wait()
		select {
		case err := <-got:
			require.NoError(t, err, "asked again under Limit 2, and granted")
		default:
			t.Fatal("the head waits for the old policy's hour")
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		assert.Equal(t, 1, st.byKey["k"][StoreAllow], "the Allow")
		assert.Equal(t, 2, st.byKey["k"][StoreTurn], "the head's ask, its ask again")
	})
}

// slowStore10 answers every call 10 ms after it is made (the bubble's
// clock: a network, not the limiter).
type slowStore10 struct{ *memStore }

func (s slowStore10) Decide(ctx context.Context, ops []StoreOp) {
	time.Sleep(10 * time.Millisecond) // the network's time, in the bubble: not the limiter's
	s.memStore.Decide(ctx, ops)
}

// TestStoreManyLinesLeaveRoom: more lines due at instants of their own
// than a partition has trips, each with waiters that are granted: the
// partition still reads its mailbox between trips. Before, it sent the
// lines' asks one after the other, waiting for room, until every line
// was done (615 ms of the store's time for 6 lines of 50).
func TestStoreManyLinesLeaveRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := slowStore10{newMemStore(clock.Real(), FailClosed)}
		r := routerOn(t, st.memStore, st, Config{Limit: 10000, Window: time.Hour, Partitions: 1})
		ctx := context.Background()
		var granted atomic.Int64
		var wg sync.WaitGroup
		for k := range 6 {
			for range 50 {
				wg.Go(func() {
					if _, err := r.WaitN(ctx, fmt.Sprint("k", k), 1); err == nil {
						granted.Add(1)
					}
				})
			}
			time.Sleep(time.Millisecond) // each line due at an instant of its own
		}
		start := time.Now()
		_, err := r.Stats(ctx)
		require.NoError(t, err)
		assert.LessOrEqual(t, time.Since(start), 20*time.Millisecond, "Stats waits for a trip to land at most")
		wg.Wait()
		assert.EqualValues(t, 300, granted.Load())
	})
}

// halfStore fails the ops on "bad", and has its Store decide the others.
type halfStore struct{ Store }

func (s halfStore) Decide(ctx context.Context, ops []StoreOp) {
	var good []StoreOp
	var at []int
	for i := range ops {
		if ops[i].Key == "bad" {
			ops[i].Err = errDown
			continue
		}
		good = append(good, ops[i])
		at = append(at, i)
	}
	s.Store.Decide(ctx, good)
	for k, i := range at {
		ops[i] = good[k]
	}
}

// TestStoreGoexitWhileLandingGivesBackStoreGrants: a batch's item the
// store granted goes back when another item, decided by FailLocal's local
// rule, ends the goroutine and the batch fails, whether the granted item
// comes before it or after; and the batch's error waits for the store to
// have it back, so that what its caller asks next finds it there. Before,
// the store kept the unit; with the granted item after (Table.Finish had
// not reached its answer), it still did; then the error came at once, and
// the caller's next AllowN could reach the store before the give-back
// (1 run in 100 was denied).
func TestStoreGoexitWhileLandingGivesBackStoreGrants(t *testing.T) {
	require.NoError(t, registerExitOnTwo())
	for name, batch := range map[string][]Request{
		"granted first": {{Key: "k", N: 1}, {Key: "bad", N: 2}},
		"granted after": {{Key: "bad", N: 2}, {Key: "k", N: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				held := newHoldStore(clock.Real(), FailLocal, "k")
				held.kind = StoreGiveBack
				r := routerOn(t, held.memStore, halfStore{held}, Config{Algorithm: "test_store_exit_on_two", Limit: 2, Window: time.Hour, Partitions: 1})
				ctx := context.Background()
				out := make([]Decision, 2)
				var err error
				require.False(t, returns(func() { err = r.AllowBatch(ctx, batch, out) }), "answered before its give-back")
				require.EqualValues(t, 1, held.held.Load(), "k's unit is on its way back")
				held.holding.Store(false)
				held.release <- struct{}{}
				synctest.Wait()
				require.ErrorIs(t, err, ErrAlgorithmPanic)
				for i := range 2 {
					d, err := r.AllowN(ctx, "k", 1)
					require.NoError(t, err)
					assert.True(t, d.Allowed, "unit %d: k's unit, granted for a batch that failed, went back", i)
				}
			})
		})
	}
}
