//go:build !race

package chanlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/pipeline"
)

// TestAllocsOfWaitsAndPolice: a WaitN that need not wait and a Police stage
// in steady state allocate nothing per call, or per item.
func TestAllocsOfWaitsAndPolice(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1 << 20, Window: time.Second, Partitions: 4})
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
		r.Allow(keys[i])
	}
	i := 0
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		i++
		if _, err := r.WaitN(ctx, keys[i%len(keys)], 1); err != nil {
			t.Fatal(err)
		}
	}), "WaitN")

	in := make(chan string, 64)
	out := pipeline.Police(ctx, r, in, func(k string) string { return k }, pipeline.Options[string]{})
	defer func() {
		close(in)
		for range out {
		}
	}()
	batch := func() { // 64 items in, 64 results out
		for k := range 64 {
			in <- keys[(i+k)%len(keys)]
		}
		for range 64 {
			if res := <-out; res.Err != nil || !res.Decision.Allowed {
				t.Fatal(res)
			}
		}
		i += 64
	}
	batch()
	assert.Zero(t, testing.AllocsPerRun(200, batch), "Police, per 64 items")
}
