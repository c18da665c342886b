package chanlimit_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// topDenied returns r's TopDenied(n), requiring no error.
func topDenied(t *testing.T, r *chanlimit.Router, n int) []chanlimit.KeyCount {
	t.Helper()
	top, err := r.TopDenied(bg, n)
	require.NoError(t, err)
	return top
}

// TestTopDeniedListsWhoIsRefusedNow: TopDenied counts the denials callers
// got (AllowN, Allow, batch items, a WaitN refused at once), not Peeks
// or grants, most first, exactly while few keys are denied, and forgets
// them one to two minutes later on the router's clock.
func TestTopDeniedListsWhoIsRefusedNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour, Partitions: 4})
		for _, k := range []string{"a", "b", "c", "d"} {
			require.True(t, r.Allow(k), "a grant counts nowhere")
		}
		assert.Empty(t, topDenied(t, r, 10))

		for range 5 {
			r.Allow("a")
		}
		for range 3 {
			_, err := r.AllowN(bg, "b", 1)
			require.NoError(t, err)
		}
		out := make([]chanlimit.Decision, 2)
		require.NoError(t, r.AllowBatch(bg, []chanlimit.Request{{Key: "b", N: 1}, {Key: "c", N: 1}}, out))
		short, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		_, err := r.WaitN(short, "d", 1) // refused at once: its deadline comes first
		require.ErrorIs(t, err, context.DeadlineExceeded)
		for range 7 {
			_, err := r.Peek(bg, "d", 1)
			require.NoError(t, err)
		}
		want := []chanlimit.KeyCount{{Key: "a", Count: 5}, {Key: "b", Count: 4}, {Key: "c", Count: 1}, {Key: "d", Count: 1}}
		assert.Equal(t, want, topDenied(t, r, 10))
		assert.Equal(t, want[:2], topDenied(t, r, 2))
		assert.Empty(t, topDenied(t, r, 0))

		clk.Advance(time.Minute)
		r.Allow("c") // now in the next generation
		assert.Equal(t, []chanlimit.KeyCount{{Key: "a", Count: 5}, {Key: "b", Count: 4}, {Key: "c", Count: 2}, {Key: "d", Count: 1}}, topDenied(t, r, 10),
			"a minute on: the generation before is counted too")
		clk.Advance(time.Minute)
		assert.Equal(t, []chanlimit.KeyCount{{Key: "c", Count: 1}}, topDenied(t, r, 10), "two minutes on: what is older is forgotten")
		clk.Advance(time.Minute)
		assert.Empty(t, topDenied(t, r, 10))
	})
}

// TestTopDeniedInAFlood: with far more keys denied than a summary holds,
// the keys denied most are listed first, each with a Count whose bounds
// hold its true count, and the memory stays that of 64 keys a generation
// in each partition.
func TestTopDeniedInAFlood(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour, Partitions: 2})
	truth := map[string]uint64{}
	deny := func(key string) {
		if !r.Allow(key) {
			truth[key]++
		}
	}
	for i := range 5000 {
		deny(fmt.Sprint("flood-", i))
		deny(fmt.Sprint("flood-", i)) // each flood key denied once
		deny(fmt.Sprint("heavy-", i%3))
	}
	top := topDenied(t, r, 1000)
	assert.LessOrEqual(t, len(top), 2*2*64, "at most 64 keys a generation in each partition")
	for i, kc := range top[:3] {
		assert.Contains(t, []string{"heavy-0", "heavy-1", "heavy-2"}, kc.Key, "place %d", i)
	}
	for _, kc := range top {
		n := truth[kc.Key]
		assert.LessOrEqual(t, kc.Count-kc.Err, n, "%+v, true %d", kc, n)
		assert.LessOrEqual(t, n, kc.Count, "%+v, true %d", kc, n)
	}
}

// TestTopDeniedErrors: TopDenied's errors are Stats', and a bad n.
func TestTopDeniedErrors(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour})
	_, err := r.TopDenied(bg, -1)
	assert.ErrorContains(t, err, "at least 0")
	done, cancel := context.WithCancel(bg)
	cancel()
	_, err = r.TopDenied(done, 1)
	assert.ErrorIs(t, err, context.Canceled)
	require.NoError(t, r.Close())
	_, err = r.TopDenied(bg, 1)
	assert.ErrorIs(t, err, chanlimit.ErrClosed)
}
