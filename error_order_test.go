package chanlimit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// A request's errors come in one order for every entry point: a bad n
// (ErrInvalidCount, ErrExceedsCapacity) before any cap (ErrTooManyWaiters,
// ErrTooManyKeys), so that a request that can never pass is never told
// to come back (DESIGN, protocol property 9).
func TestErrorOrderIsOneForEveryEntryPoint(t *testing.T) {
	ctx := context.Background()
	entries := []struct {
		name string
		ask  func(r *chanlimit.Router, key string, n int) error
	}{
		{"AllowN", func(r *chanlimit.Router, key string, n int) error { _, err := r.AllowN(ctx, key, n); return err }},
		{"Peek", func(r *chanlimit.Router, key string, n int) error { _, err := r.Peek(ctx, key, n); return err }},
		{"WaitN", func(r *chanlimit.Router, key string, n int) error { _, err := r.WaitN(ctx, key, n); return err }},
		{"AllowBatch", func(r *chanlimit.Router, key string, n int) error {
			return r.AllowBatch(ctx, []chanlimit.Request{{Key: key, N: n}}, make([]chanlimit.Decision, 1))
		}},
	}
	cases := []struct {
		name string
		key  string // "k" has a full line; the partition holds as many keys as MaxKeys lets it
		n    int
		want error
	}{
		{"NTooLargeOnAFullLine", "k", 3, chanlimit.ErrExceedsCapacity},
		{"NTooLargeOnANewKeyWithNoRoom", "new", 3, chanlimit.ErrExceedsCapacity},
		{"NZeroOnAFullLine", "k", 0, chanlimit.ErrInvalidCount},
		{"NZeroOnANewKeyWithNoRoom", "new", 0, chanlimit.ErrInvalidCount},
	}
	for _, e := range entries {
		for _, c := range cases {
			t.Run(e.name+"/"+c.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second, Partitions: 1, MaxKeys: 1, MaxWaiters: 1})
					exhaust(t, r, "k", 2)
					goWait(ctx, r, "k", 1) // the line is full
					_, err := r.WaitN(ctx, "k", 1)
					require.ErrorIs(t, err, chanlimit.ErrTooManyWaiters, "the cap on the line holds")
					_, err = r.AllowN(ctx, "new", 1)
					require.ErrorIs(t, err, chanlimit.ErrTooManyKeys, "the cap on keys holds")

					assert.ErrorIs(t, e.ask(r, c.key, c.n), c.want)
				})
			})
		}
	}
}
