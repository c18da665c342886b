//go:build !race

// The race detector changes how sync.Pool keeps values, so allocation counts
// are checked without it: .ci/run runs this test in a second, plain pass.

package chanlimit_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit"
)

// TestAllocs: the steady state of Allow, AllowN, Peek and AllowBatch
// allocates nothing (pooled reply channels and batch scratch, requests by
// value), for keys the router already holds.
func TestAllocs(t *testing.T) {
	for _, algorithm := range registered {
		t.Run(algorithm, func(t *testing.T) {
			r, _ := newRouter(t, chanlimit.Config{Algorithm: algorithm, Limit: 1 << 20, Window: time.Second, Partitions: 4})
			ctx := context.Background()
			keys := make([]string, 1000)
			reqs := make([]chanlimit.Request, 64)
			for i := range keys {
				keys[i] = fmt.Sprint("key-", i)
				r.Allow(keys[i])
			}
			for i := range reqs {
				reqs[i] = chanlimit.Request{Key: keys[i*7], N: 1}
			}
			out := make([]chanlimit.Decision, len(reqs))
			i := 0
			next := func() string { i++; return keys[i%len(keys)] }

			assert.Zero(t, testing.AllocsPerRun(1000, func() { r.Allow(next()) }), "Allow")
			assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = r.AllowN(ctx, next(), 2) }), "AllowN")
			assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = r.Peek(ctx, next(), 2) }), "Peek")
			assert.Zero(t, testing.AllocsPerRun(200, func() { _ = r.AllowBatch(ctx, reqs, out) }), "AllowBatch")
		})
	}
}

// TestKeysDoNotPinBuffers: a key sliced from a large buffer is copied when
// the router keeps it, so the buffer can be collected.
func TestKeysDoNotPinBuffers(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Second})
	freed := make(chan struct{})
	func() {
		buf := strings.Repeat("k", 1<<20) // a request body, say
		runtime.SetFinalizer(unsafe.StringData(buf), func(*byte) { close(freed) })
		key := buf[:16]
		assert.True(t, r.Allow(key))
		_, err := r.AllowN(context.Background(), key, 2) // an update, not only the insert
		assert.NoError(t, err)
	}()
	for range 20 {
		runtime.GC()
		select {
		case <-freed:
			return
		default:
			runtime.Gosched() // let the finalizer goroutine run
		}
	}
	t.Fatal("the buffer a key was sliced from is still reachable: the router kept the caller's string")
}

// TestAllocsOfAKeyIdleInItsGrace: a key whose state is untouched between uses,
// but which comes back within the second's grace, allocates nothing.
func TestAllocsOfAKeyIdleInItsGrace(t *testing.T) {
	for _, algorithm := range registered {
		r, clk := newRouter(t, chanlimit.Config{Algorithm: algorithm, Limit: 10, Window: 100 * time.Millisecond, Partitions: 1})
		r.Allow("k")
		allocs := testing.AllocsPerRun(200, func() {
			clk.Advance(300 * time.Millisecond) // untouched, well within the grace
			if !r.Allow("k") {
				t.Fatal("denied")
			}
		})
		assert.Zero(t, allocs, algorithm)
	}
}

// TestAllocsOfNewKeys: once a partition has held as many keys as it now
// gets, a new key allocates nothing (amortized) beyond what its state
// holds: its bytes go into the table's own slice of keys, whose garbage is
// squeezed out now and then instead of growing it.
func TestAllocsOfNewKeys(t *testing.T) {
	for _, algorithm := range registered {
		if algorithm == "sliding_window_log" {
			continue // its state holds a slice of its own, made per key
		}
		r, clk := newRouter(t, chanlimit.Config{Algorithm: algorithm, Limit: 10, Window: 100 * time.Millisecond, Partitions: 1})
		for i := range 5000 {
			r.Allow(fmt.Sprint("key-", i))
		}
		keys := make([]string, 5000) // made beforehand: their allocations are not the router's
		for i := range keys {
			keys[i] = fmt.Sprint("new-key-", i)
		}
		clk.Advance(10 * time.Second) // every key untouched, and past the grace
		// On one processor, as testing.AllocsPerRun measures: with more,
		// a busy machine moves the goroutines between processors, whose
		// caches of pooled reply channels and of the runtime's own
		// structures for blocked goroutines then miss and allocate.
		var before, after runtime.MemStats
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			runtime.ReadMemStats(&before)
			for _, k := range keys {
				r.Allow(k)
			}
			runtime.ReadMemStats(&after)
		}()
		assert.LessOrEqual(t, after.Mallocs-before.Mallocs, uint64(16), "%s: allocations for %d new keys", algorithm, len(keys))
	}
}

// TestAllocsOfAnObserve: an Observe that keeps nothing costs no
// allocation on Allow, AllowN or AllowBatch.
func TestAllocsOfAnObserve(t *testing.T) {
	var seen int
	r, _ := newRouter(t, chanlimit.Config{Limit: 1 << 20, Window: time.Second, Partitions: 4,
		Observe: func(_ context.Context, e chanlimit.Event) { seen += e.N }})
	ctx := context.Background()
	keys := make([]string, 100)
	reqs := make([]chanlimit.Request, 64)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
		r.Allow(keys[i])
	}
	for i := range reqs {
		reqs[i] = chanlimit.Request{Key: keys[i], N: 1}
	}
	out := make([]chanlimit.Decision, len(reqs))
	i := 0
	next := func() string { i++; return keys[i%len(keys)] }
	assert.Zero(t, testing.AllocsPerRun(1000, func() { r.Allow(next()) }), "Allow")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = r.AllowN(ctx, next(), 2) }), "AllowN")
	assert.Zero(t, testing.AllocsPerRun(200, func() { _ = r.AllowBatch(ctx, reqs, out) }), "AllowBatch")
	assert.Positive(t, seen)
}
