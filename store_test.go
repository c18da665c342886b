package chanlimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/clocktest"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/storeloop"
)

// memStore is a Store in memory, for the router's side of the protocol:
// it keeps each key under its policies in keytable's tables, as a router
// would, on op.Now (or on its own clock when op.Now is zero). Redis is
// redislimit's to test.
type memStore struct {
	mu     sync.Mutex
	clk    clock.Clock
	epoch  time.Time
	mode   FailMode
	tables map[string]*keytable.Keys      // by the policies' id
	check  error                          // Check's answer
	byKey  map[string]map[StoreOpKind]int // ops served, by key and kind

	down   atomic.Bool        // Decide answers every op with errDown
	gate   chan chan struct{} // while gated, Decide takes a channel from it and waits for it to close
	gated  atomic.Bool
	quit   chan struct{}   // closed at the test's end: nothing stays held
	calls  atomic.Int64    // Decide calls
	ops    atomic.Int64    // ops served
	kinds  [9]atomic.Int64 // ops served by kind
	lens   chan int        // if set, each call's number of ops, as it comes
	served chan int        // if set, each call's number of ops, once they are served
}

var errDown = errors.New("memStore: down")

// newGatedStore returns a memStore whose calls are held until the test
// lets each go (gate), and which tells each call's number of ops as it
// comes (lens) and once they are served (served).
func newGatedStore(clk clock.Clock) *memStore {
	st := newMemStore(clk, FailClosed)
	st.gate = make(chan chan struct{})
	st.gated.Store(true)
	st.lens = make(chan int, 100)
	st.served = make(chan int, 100)
	return st
}

func newMemStore(clk clock.Clock, mode FailMode) *memStore {
	return &memStore{quit: make(chan struct{}), clk: clk, epoch: clk.Now(), mode: mode, tables: make(map[string]*keytable.Keys), byKey: make(map[string]map[StoreOpKind]int)}
}

func (m *memStore) Check(policies []Policy) error { return m.check }
func (m *memStore) FailMode() FailMode            { return m.mode }

func (m *memStore) Decide(ctx context.Context, ops []StoreOp) {
	m.calls.Add(1)
	held := m.gated.Load() // before lens: a test that reads this call's length and then stops gating still finds it held
	if m.lens != nil {
		m.lens <- len(ops)
	}
	if held {
		select {
		case g := <-m.gate:
			select {
			case <-g:
			case <-m.quit:
			}
		case <-m.quit:
		case <-ctx.Done():
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range ops {
		op := &ops[i]
		if m.down.Load() {
			op.Err = errDown
			continue
		}
		if err := ctx.Err(); err != nil {
			op.Err = err
			continue
		}
		m.ops.Add(1)
		m.kinds[op.Kind].Add(1)
		if m.byKey[op.Key] == nil {
			m.byKey[op.Key] = map[StoreOpKind]int{}
		}
		m.byKey[op.Key][op.Kind]++
		t := m.table(op.Policies)
		at := op.Now
		if at.IsZero() {
			at = m.clk.Now()
		}
		now := at.Sub(m.epoch)
		switch op.Kind {
		case StoreAllow:
			op.Err = t.AllowN(op.Key, now, op.N, &op.Decision)
		case StoreTurn: // a turn that must wait takes nothing: given back at once
			op.Err = t.AllowTurn(op.Key, now, op.N, &op.Decision)
			if d := &op.Decision; op.Err == nil && d.Allowed && d.Delay > 0 {
				d.Allowed = false
				op.Err = t.GiveBack(op.Key, now, op.N)
			}
		case StoreGiveBack:
			op.Err = t.GiveBack(op.Key, now, op.N)
		case StoreDryRun:
			op.Decision.WouldDeny, op.Err = t.DecideDry(op.Key, now, op.N, true)
		case StorePeek:
			op.Err = t.PeekN(op.Key, now, op.N, &op.Decision)
		case StoreRefund:
			op.Err = t.Refund(op.Key, now, op.N)
		case StoreReset:
			t.Reset(op.Key)
		case StoreHold:
			op.Err = t.Hold(op.Key, now, now+op.Hold)
		}
	}
	if m.served != nil {
		m.served <- len(ops)
	}
}

func (m *memStore) table(policies []Policy) *keytable.Keys {
	id := fmt.Sprint(policies)
	t, ok := m.tables[id]
	if !ok {
		set, err := compile("", policies)
		if err != nil {
			panic(err)
		}
		t = keytable.NewKeys(set)
		m.tables[id] = t
	}
	return t
}

var storeStart = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// TestStoreSameDecisions: a router with a Store decides a random schedule
// of AllowN, Peek, AllowBatch and Reset exactly as one without.
func TestStoreSameDecisions(t *testing.T) {
	for _, policies := range [][]Policy{
		{{Limit: 5, Window: time.Second}},
		{{Name: "s", Algorithm: "sliding_window_log", Limit: 4, Window: time.Second}, {Name: "m", Algorithm: "gcra", Limit: 20, Window: time.Minute, Burst: 6}},
		{{Name: "leaky", Algorithm: "leaky_bucket", Limit: 3, Window: time.Second}},
	} {
		t.Run(policies[0].Algorithm, func(t *testing.T) {
			clk := clock.NewFake(storeStart)
			mem, err := New(Config{Policies: policies, Clock: clk, Partitions: 2})
			require.NoError(t, err)
			defer mem.Close()
			st := newMemStore(clk, FailClosed)
			rem, err := New(Config{Policies: policies, Clock: clk, Partitions: 2, Store: st})
			require.NoError(t, err)
			defer rem.Close()

			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, 2))
			keys := []string{"a", "b", "c", ""}
			for step := range 2000 {
				key := keys[rng.IntN(len(keys))]
				n := 1 + rng.IntN(3)
				switch rng.IntN(10) {
				case 0:
					clk.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
				case 1:
					require.NoError(t, mem.Reset(ctx, key))
					require.NoError(t, rem.Reset(ctx, key))
				case 2:
					a, aerr := mem.Peek(ctx, key, n)
					b, berr := rem.Peek(ctx, key, n)
					require.Equal(t, aerr, berr, "step %d", step)
					require.Equal(t, a, b, "step %d: Peek(%q, %d)", step, key, n)
				case 3:
					reqs := make([]Request, 1+rng.IntN(8))
					for i := range reqs {
						reqs[i] = Request{Key: keys[rng.IntN(len(keys))], N: 1 + rng.IntN(2)}
					}
					a, b := make([]Decision, len(reqs)), make([]Decision, len(reqs))
					require.NoError(t, mem.AllowBatch(ctx, reqs, a))
					require.NoError(t, rem.AllowBatch(ctx, reqs, b))
					require.Equal(t, a, b, "step %d: AllowBatch(%v)", step, reqs)
				default:
					a, aerr := mem.AllowN(ctx, key, n)
					b, berr := rem.AllowN(ctx, key, n)
					require.Equal(t, aerr, berr, "step %d", step)
					require.Equal(t, a, b, "step %d: AllowN(%q, %d)", step, key, n)
				}
			}
			_, err = rem.AllowN(ctx, "a", 100)
			require.ErrorIs(t, err, ErrExceedsCapacity)

			ms, err := mem.Stats(ctx)
			require.NoError(t, err)
			rs, err := rem.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, ms.Allowed, rs.Allowed)
			assert.Equal(t, ms.Denied, rs.Denied)
			assert.Zero(t, rs.Keys, "the store holds the keys")
			assert.Zero(t, rs.StoreErrors)
			assert.Zero(t, st.kinds[StoreRefund].Load())
			assert.Zero(t, st.kinds[StoreGiveBack].Load())
		})
	}
}

// TestStoreResetWhenTheClockFails: a Reset needs no time, so a clock that
// fails does not keep it from the store: the key's state there is
// dropped. Before, the partition reset only its local keys (FailLocal's),
// and Reset returned nil with the store's state untouched.
func TestStoreResetWhenTheClockFails(t *testing.T) {
	clk := clocktest.NewRigged(storeStart)
	st := newMemStore(clock.NewFake(storeStart), FailClosed) // its own clock: the router's fails
	r, err := New(Config{Limit: 2, Window: time.Hour, Clock: clk, Partitions: 1, Store: st})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	require.True(t, r.Allow("k"))
	require.True(t, r.Allow("k"))
	require.False(t, r.Allow("k"))
	clk.Rig(func() { panic("the clock fails") })
	_, err = r.AllowN(ctx, "other", 1)
	require.ErrorIs(t, err, ErrClockPanic, "the clock fails")
	require.NoError(t, r.Reset(ctx, "k"))
	clk.Rig(nil)
	assert.EqualValues(t, 1, st.kinds[StoreReset].Load(), "the Reset went to the store")
	assert.True(t, r.Allow("k"), "the store's state was dropped")
}

// TestStoreCallerLeft: a request whose caller left during the round trip
// is given back.
func TestStoreCallerLeft(t *testing.T) {
	clk := clock.NewFake(storeStart)
	st := newGatedStore(clk)
	r, err := New(Config{Limit: 3, Window: time.Hour, Clock: clk, Partitions: 1, Store: st})
	require.NoError(t, err)
	defer func() {
		close(st.quit) // nothing stays held, if the test failed
		_ = r.Close()
	}()

	// The first call is out, held in Decide; its caller leaves.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var firstErr error
	wg.Go(func() { _, firstErr = r.AllowN(ctx, "k", 1) })
	require.Equal(t, 1, <-st.lens)
	cancel()
	wg.Wait()
	require.ErrorIs(t, firstErr, context.Canceled)

	st.gated.Store(false) // the calls still to come are not held
	g := make(chan struct{})
	st.gate <- g
	close(g)
	require.Equal(t, 1, <-st.lens, "the refund")
	// The refund's call has come; the Peek, a round trip of its own, could
	// overtake it: it goes once the allow and the refund are served.
	require.Equal(t, 1, <-st.served, "the allow")
	require.Equal(t, 1, <-st.served, "the refund")
	d, err := r.Peek(context.Background(), "k", 3)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "nothing was taken: %+v", d)
	st.mu.Lock()
	defer st.mu.Unlock()
	assert.Equal(t, map[StoreOpKind]int{StoreAllow: 1, StoreGiveBack: 1, StorePeek: 1}, st.byKey["k"], "the allow, given back")
}

func TestStoreFailModes(t *testing.T) {
	ctx := context.Background()
	t.Run("FailClosed", func(t *testing.T) {
		clk := clock.NewFake(storeStart)
		st := newMemStore(clk, FailClosed)
		r, err := New(Config{Limit: 2, Window: time.Second, Clock: clk, Store: st})
		require.NoError(t, err)
		defer r.Close()
		st.down.Store(true)
		_, err = r.AllowN(ctx, "k", 1)
		require.ErrorIs(t, err, ErrStoreUnavailable)
		require.ErrorIs(t, err, errDown)
		assert.False(t, r.Allow("k"))
		out := make([]Decision, 3)
		err = r.AllowBatch(ctx, []Request{{"a", 1}, {"b", 1}, {"c", 1}}, out)
		require.ErrorIs(t, err, ErrStoreUnavailable)
		require.ErrorIs(t, r.Reset(ctx, "k"), ErrStoreUnavailable)
		s, err := r.Stats(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 6, s.StoreErrors)
		assert.Zero(t, s.Allowed+s.Denied)
		st.down.Store(false)
		assert.True(t, r.Allow("k"))
	})
	t.Run("FailOpen", func(t *testing.T) {
		clk := clock.NewFake(storeStart)
		st := newMemStore(clk, FailOpen)
		r, err := New(Config{Limit: 2, Window: time.Second, Clock: clk, Store: st})
		require.NoError(t, err)
		defer r.Close()
		st.down.Store(true)
		for range 10 {
			d, err := r.AllowN(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, Decision{Allowed: true, Limit: 2, Remaining: 1, Policy: DefaultPolicyName}, d)
		}
		s, err := r.Stats(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 10, s.StoreErrors)
	})
	t.Run("FailLocal", func(t *testing.T) {
		clk := clock.NewFake(storeStart)
		st := newMemStore(clk, FailLocal)
		r, err := New(Config{Limit: 2, Window: time.Second, Clock: clk, Store: st})
		require.NoError(t, err)
		defer r.Close()
		mem, err := New(Config{Limit: 2, Window: time.Second, Clock: clk})
		require.NoError(t, err)
		defer mem.Close()
		st.down.Store(true)
		for i := range 5 {
			a, aerr := mem.AllowN(ctx, "k", 1)
			b, berr := r.AllowN(ctx, "k", 1)
			require.NoError(t, aerr)
			require.NoError(t, berr)
			require.Equal(t, a, b, i)
		}
		s, err := r.Stats(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 5, s.StoreErrors)
		assert.Equal(t, 1, s.Keys, "decided locally")
		st.down.Store(false)
		assert.True(t, r.Allow("k"), "the store's state is its own")
	})
}

func TestStoreSnapshotUnsupported(t *testing.T) {
	clk := clock.NewFake(storeStart)
	r, err := New(Config{Limit: 2, Window: time.Second, Clock: clk, Store: newMemStore(clk, FailClosed)})
	require.NoError(t, err)
	defer r.Close()
	var buf bytes.Buffer
	require.ErrorIs(t, r.Snapshot(context.Background(), &buf), errors.ErrUnsupported)
	require.ErrorIs(t, r.Restore(context.Background(), &buf), errors.ErrUnsupported)
	assert.Zero(t, buf.Len())
}

func TestStoreCheck(t *testing.T) {
	clk := clock.NewFake(storeStart)
	st := newMemStore(clk, FailClosed)
	st.check = errors.New("no such thing")
	_, err := New(Config{Limit: 2, Window: time.Second, Clock: clk, Store: st})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "no such thing")

	st.check = nil
	r, err := New(Config{Limit: 2, Window: time.Second, Clock: clk, Store: st})
	require.NoError(t, err)
	defer r.Close()
	st.check = errors.New("not this one")
	require.ErrorIs(t, r.SetPolicies(context.Background(), Policy{Limit: 3, Window: time.Second}), ErrInvalidConfig)
	require.ErrorIs(t, r.SetOverride(context.Background(), "k", Policy{Limit: 3, Window: time.Second}), ErrInvalidConfig)

	st.mode = 9
	_, err = New(Config{Limit: 2, Window: time.Second, Clock: clk, Store: st})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// TestStoreWaitInOrder: WaitN through a store grants the waiters of a key
// in their order, each at its time on the fake clock.
func TestStoreWaitInOrder(t *testing.T) {
	clk := clock.NewFake(storeStart)
	st := newMemStore(clk, FailClosed)
	r, err := New(Config{Limit: 1, Window: time.Second, Clock: clk, Store: st})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	require.True(t, r.Allow("k"))

	order := make(chan int, 5)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			_, err := r.WaitN(ctx, "k", 1)
			assert.NoError(t, err)
			order <- i
		})
		// Each joins the line before the next is started.
		for {
			s, err := r.Stats(ctx)
			require.NoError(t, err)
			if s.Waiting == i+1 {
				break
			}
			time.Sleep(time.Millisecond) // for the goroutine to join the line: not the limiter's time
		}
	}
	for i := range 5 {
		require.NoError(t, clk.BlockUntilContext(ctx, 1))
		clk.Advance(time.Second)
		assert.Equal(t, i, <-order)
	}
	wg.Wait()
	assert.False(t, r.Allow("k"), "no waiter passed the quota")
}

// TestStoreOverrides: a key's override goes to the store with the key.
func TestStoreOverrides(t *testing.T) {
	clk := clock.NewFake(storeStart)
	st := newMemStore(clk, FailClosed)
	r, err := New(Config{Limit: 1, Window: time.Second, Clock: clk, Store: st})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	require.NoError(t, r.SetOverride(ctx, "vip", Policy{Name: "vip", Limit: 3, Window: time.Second}))
	for range 3 {
		d, err := r.AllowN(ctx, "vip", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, "vip", d.Policy)
	}
	assert.False(t, r.Allow("vip"))
	assert.True(t, r.Allow("other"))
	assert.False(t, r.Allow("other"))
}

// TestStoreCloseWithTripsOut: Close waits for the round trips out to
// land and delivers their answers, and sends and answers the requests
// gathered meanwhile; every call returns, and no goroutine is left
// (TestMain).
func TestStoreCloseWithTripsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(storeStart)
		st := newGatedStore(clk)
		r, err := New(Config{Limit: 100, Window: time.Hour, Clock: clk, Partitions: 1, Store: st})
		require.NoError(t, err)

		var wg sync.WaitGroup
		var allowed atomic.Int64
		allow := func(key string) {
			wg.Go(func() {
				d, err := r.AllowN(context.Background(), key, 1)
				if err == nil && d.Allowed {
					allowed.Add(1)
				} else {
					t.Errorf("AllowN(%q): %v, %v", key, d, err)
				}
			})
		}
		for i := range storeloop.MaxTrips {
			allow(fmt.Sprint("k", i))
			require.Equal(t, 1, <-st.lens)
		}
		for i := range 3 {
			allow(fmt.Sprint("gathered", i))
		}
		synctest.Wait() // the three are gathered: every trip is out
		done := make(chan struct{})
		go func() {
			r.Close()
			close(done)
		}()
		synctest.Wait()
		st.gated.Store(false) // the gathered call is not held
		for range storeloop.MaxTrips {
			g := make(chan struct{})
			st.gate <- g
			close(g)
		}
		<-done
		wg.Wait()
		assert.Equal(t, 3, <-st.lens, "the gathered requests went out as one call")
		assert.EqualValues(t, storeloop.MaxTrips+3, allowed.Load(), "the trips out landed, the gathered ones went out, and all were answered")
		_, err = r.AllowN(context.Background(), "k", 1)
		assert.ErrorIs(t, err, ErrClosed)
	})
}

// TestStoreStress: many callers, batches, resets and peeks on a router
// whose store answers after a random pause of its own, with Close in the
// middle: every call returns, with a decision or ErrClosed, and the
// quota of a key is never passed.
func TestStoreStress(t *testing.T) {
	clk := clock.NewFake(storeStart)
	st := &slowStore{memStore: newMemStore(clk, FailClosed)}
	r, err := New(Config{Limit: 50, Window: time.Hour, Clock: clk, Partitions: 2, Store: st})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for g := range 32 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 100 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Microsecond)
				switch rng.IntN(4) {
				case 0:
					out := make([]Decision, 4)
					err := r.AllowBatch(ctx, []Request{{Key: "a", N: 1}, {Key: "b", N: 1}, {Key: "a", N: 1}, {Key: "c", N: 1}}, out)
					if err == nil {
						for _, d := range out {
							if d.Allowed {
								allowed.Add(1)
							}
						}
					}
				case 1:
					_, _ = r.Peek(ctx, "a", 1)
				default:
					d, err := r.AllowN(ctx, string(rune('a'+rng.IntN(3))), 1)
					if err == nil && d.Allowed {
						allowed.Add(1)
					}
				}
				cancel()
			}
		})
	}
	for st.calls.Load() < 50 {
		runtime.Gosched() // the callers get going
	}
	require.NoError(t, r.Close())
	wg.Wait()
	assert.LessOrEqual(t, allowed.Load(), int64(3*50), "three keys of 50")
}

// slowStore answers after a random pause, or gives up with the context.
type slowStore struct{ *memStore }

func (s *slowStore) Decide(ctx context.Context, ops []StoreOp) {
	select {
	case <-time.After(time.Duration(rand.IntN(500)) * time.Microsecond): // the network's time, not the limiter's
	case <-ctx.Done():
	}
	s.memStore.Decide(ctx, ops)
}

// TestStoreDueLineIsServedBeforeABatch: through a store too, a line that
// is due is served before a batch's item on its key is decided, though
// the timer (late, as real ones are) has not fired yet.
func TestStoreDueLineIsServedBeforeABatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.NewLate(storeStart, time.Millisecond)
		r, err := New(Config{Algorithm: "fixed_window", Limit: 2, Window: time.Second, Clock: clk, Partitions: 1, Store: newMemStore(clk, FailClosed)})
		require.NoError(t, err)
		defer r.Close()
		ctx := context.Background()
		d, err := r.AllowN(ctx, "k", 2)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		granted := make(chan error, 1)
		go func() {
			_, err := r.WaitN(ctx, "k", 1)
			granted <- err
		}()
		synctest.Wait()
		clk.Advance(time.Second) // due; the timer fires 1 ms later
		out := make([]Decision, 1)
		require.NoError(t, r.AllowBatch(ctx, []Request{{Key: "k", N: 1}}, out))
		assert.True(t, out[0].Allowed, "at the waiter's grant time, behind it: %+v", out[0])
		synctest.Wait()
		select {
		case err := <-granted:
			assert.NoError(t, err)
		default:
			t.Fatal("the waiter was due at 1 s")
		}
	})
}

// TestStoreCallWithADeadlineCenturiesAway: a round trip takes the latest
// deadline of its callers; one as far as a Duration goes bounds nothing.
// (Before the fix, it wrapped to 1970, and the trip's context had ended
// before it went out: ErrStoreUnavailable, "context deadline exceeded".)
func TestStoreCallWithADeadlineCenturiesAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(clock.Real(), FailClosed)
		r := routerOn(t, st, st, Config{Limit: 10, Window: time.Hour, Partitions: 1})
		ctx, cancel := context.WithTimeout(context.Background(), math.MaxInt64)
		defer cancel()
		d, err := r.AllowN(ctx, "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
	})
}

// TestStoreTopDeniedAndObserve: with a Store, a router lists the keys it
// denied and observes each answer, as in memory.
func TestStoreTopDeniedAndObserve(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	m := newMemStore(clk, FailClosed)
	var events []Event
	r := routerOn(t, m, m, Config{Limit: 1, Window: time.Hour, Clock: clk, Partitions: 2,
		Observe: func(_ context.Context, e Event) { events = append(events, e) }})
	ctx := context.Background()
	for range 3 {
		r.Allow("a")
	}
	r.Allow("b")
	r.Allow("b")
	top, err := r.TopDenied(ctx, 5)
	require.NoError(t, err)
	assert.Equal(t, []KeyCount{{Key: "a", Count: 2}, {Key: "b", Count: 1}}, top)
	require.Len(t, events, 5)
	assert.Equal(t, Event{Kind: EventAllow, Key: "b", N: 1, Decision: events[4].Decision}, events[4])
	assert.False(t, events[4].Decision.Allowed)
}

// TestStoreStatsPolicies: with a Store, Stats.Policies counts the
// denials by policy as in memory, and a decision the store says a
// dry-run policy would have denied under the key's dry-run policy.
func TestStoreStatsPolicies(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	m := newMemStore(clk, FailClosed)
	r := routerOn(t, m, m, Config{Clock: clk, Policies: []Policy{
		{Name: "second", Limit: 2, Window: time.Second},
		{Name: "trial", Limit: 1, Window: time.Hour, DryRun: true},
	}})
	for range 3 {
		r.Allow("a")
	}
	_, err := r.Peek(context.Background(), "a", 1)
	require.NoError(t, err)
	st, err := r.Stats(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []PolicyStats{{Name: "second", Denied: 1}, {Name: "trial", WouldDeny: 2}}, st.Policies)
}

// TestPeekQuotaThroughAStoreAsksOnce: with a Store, an allowed PeekQuota
// asks the store one peek, and tells the deciding policy's quota from its
// Decision: Remaining what the peek would leave, More 0 (one more unit
// than that is the peek's own, there now). Before, it asked a second peek
// of one more unit, whose answer was that 0 again.
func TestPeekQuotaThroughAStoreAsksOnce(t *testing.T) {
	clk := clock.NewFake(storeStart)
	st := newMemStore(clk, FailClosed)
	r := routerOn(t, st, st, Config{Limit: 4, Window: time.Second, Clock: clk, Partitions: 1})
	ctx := context.Background()
	_, err := r.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	before := st.kinds[StorePeek].Load()

	var q Quota
	d, err := r.PeekQuota(ctx, "k", 1, &q)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(1), st.kinds[StorePeek].Load()-before, "one peek asked")
	assert.Equal(t, []PolicyQuota{{Policy: 0, Remaining: 2, More: 0}}, q.Each)

	_, err = r.AllowN(ctx, "k", 3)
	require.NoError(t, err)
	before = st.kinds[StorePeek].Load()
	d, err = r.PeekQuota(ctx, "k", 1, &q)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, int64(1), st.kinds[StorePeek].Load()-before, "one peek asked")
	assert.Equal(t, []PolicyQuota{{Policy: 0, Remaining: 0, More: 250 * time.Millisecond}}, q.Each, "a denial's: its RetryAfter")
}
