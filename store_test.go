package chanlimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/keytable"
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
	tables map[string]keytable.Table // by the policies' id
	check  error                     // Check's answer

	down  atomic.Bool        // Decide answers every op with errDown
	gate  chan chan struct{} // while gated, Decide takes a channel from it and waits for it to close
	gated atomic.Bool
	calls atomic.Int64    // Decide calls
	ops   atomic.Int64    // ops served
	kinds [5]atomic.Int64 // ops served by kind
	lens  chan int        // if set, each call's number of ops
}

var errDown = errors.New("memStore: down")

func newMemStore(clk clock.Clock, mode FailMode) *memStore {
	return &memStore{clk: clk, epoch: clk.Now(), mode: mode, tables: make(map[string]keytable.Table)}
}

func (m *memStore) Check(policies []Policy) error { return m.check }
func (m *memStore) FailMode() FailMode            { return m.mode }

func (m *memStore) Decide(ctx context.Context, ops []StoreOp) {
	m.calls.Add(1)
	if m.lens != nil {
		m.lens <- len(ops)
	}
	if m.gated.Load() {
		select {
		case g := <-m.gate:
			<-g
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
		t := m.table(op.Policies)
		at := op.Now
		if at.IsZero() {
			at = m.clk.Now()
		}
		now := at.Sub(m.epoch)
		switch op.Kind {
		case StoreAllow:
			op.Err = t.AllowN(op.Key, now, op.N, &op.Decision)
		case StorePeek:
			op.Err = t.PeekN(op.Key, now, op.N, &op.Decision)
		case StoreRefund:
			t.Refund(op.Key, now, op.N)
		case StoreReset:
			t.Reset(op.Key)
		}
	}
}

func (m *memStore) table(policies []Policy) keytable.Table {
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
		})
	}
}

// TestStoreBurstOneCall: the requests queued in a partition's mailbox
// while the store answers go to it as one call, and a batch's items as
// one.
func TestStoreBurstOneCall(t *testing.T) {
	clk := clock.NewFake(storeStart)
	st := newMemStore(clk, FailClosed)
	st.gate = make(chan chan struct{})
	st.gated.Store(true)
	st.lens = make(chan int, 100)
	r, err := New(Config{Limit: 1000, Window: time.Second, Clock: clk, Partitions: 1, Store: st})
	require.NoError(t, err)
	defer r.Close()

	ctx := context.Background()
	var wg sync.WaitGroup
	allowed := atomic.Int64{}
	wg.Go(func() {
		if r.Allow("first") {
			allowed.Add(1)
		}
	})
	require.Equal(t, 1, <-st.lens) // the partition waits on the store
	for i := range 20 {
		wg.Go(func() {
			if r.Allow(fmt.Sprint("k", i)) {
				allowed.Add(1)
			}
		})
	}
	for r.parts[0].Queued() < 20 {
		time.Sleep(time.Millisecond) // for the goroutines to send: not the limiter's time
	}
	first := make(chan struct{})
	st.gate <- first
	close(first)
	require.Equal(t, 20, <-st.lens, "the burst behind the first call goes as one")
	rest := make(chan struct{})
	st.gate <- rest
	close(rest)
	wg.Wait()
	assert.EqualValues(t, 21, allowed.Load())

	st.gated.Store(false) // no call is in flight
	reqs := make([]Request, 64)
	for i := range reqs {
		reqs[i] = Request{Key: fmt.Sprint("b", i%10), N: 1}
	}
	out := make([]Decision, len(reqs))
	require.NoError(t, r.AllowBatch(ctx, reqs, out))
	assert.Equal(t, 64, <-st.lens)
	for i, d := range out {
		assert.True(t, d.Allowed, i)
	}
}

// TestStoreCallerLeft: a request whose caller left before its run was
// handed over is not sent; one whose caller left during the round trip is
// given back.
func TestStoreCallerLeft(t *testing.T) {
	clk := clock.NewFake(storeStart)
	st := newMemStore(clk, FailClosed)
	st.gate = make(chan chan struct{})
	st.gated.Store(true)
	st.lens = make(chan int, 100)
	r, err := New(Config{Limit: 3, Window: time.Hour, Clock: clk, Partitions: 1, Store: st})
	require.NoError(t, err)
	defer r.Close()

	// The first call holds the partition; the second waits in the mailbox
	// and its caller leaves.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var firstErr error
	wg.Go(func() { _, firstErr = r.AllowN(ctx, "k", 1) })
	require.Equal(t, 1, <-st.lens)
	left := make(chan error)
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		_, err := r.AllowN(ctx2, "k", 1)
		left <- err
	}()
	for r.parts[0].Queued() < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel2()
	require.ErrorIs(t, <-left, context.Canceled)
	cancel() // the first leaves during its round trip
	wg.Wait()
	require.ErrorIs(t, firstErr, context.Canceled)
	st.gated.Store(false) // before the first call goes on: the refund is not held
	g := make(chan struct{})
	st.gate <- g
	close(g)
	<-st.lens // the refund
	d, err := r.Peek(context.Background(), "k", 3)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "nothing was taken: %+v", d)
	assert.Equal(t, int64(0), st.kinds[StoreAllow].Load()+st.kinds[StoreRefund].Load()-2, "one allow, refunded; the other never sent")
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
			time.Sleep(time.Millisecond)
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
