//go:build !race

// The race detector changes how sync.Pool keeps values, so allocation counts
// are checked without it: .ci/run runs this test in a second, plain pass.

package chanlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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
