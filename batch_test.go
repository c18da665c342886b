package chanlimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// batchMatchesSequential: AllowBatch decides as AllowN one by one would, on
// random batches over keys spread across partitions, repeated keys included.
func batchMatchesSequential(t *testing.T, algorithm string) {
	batched, single, advance := twinRouters(t, algorithm)
	rng := rand.New(rand.NewPCG(5, 6))
	ctx := context.Background()
	for round := range 50 {
		advance(time.Duration(rng.IntN(6)) * 111 * time.Millisecond)
		reqs := make([]chanlimit.Request, rng.IntN(40))
		for i := range reqs {
			reqs[i] = chanlimit.Request{Key: fmt.Sprint("key-", rng.IntN(12)), N: 1 + rng.IntN(capacity)}
		}
		out := make([]chanlimit.Decision, len(reqs))
		require.NoError(t, batched.AllowBatch(ctx, reqs, out))
		for i, req := range reqs {
			require.Equal(t, allowN(t, single, req.Key, req.N), out[i], "round %d, request %d: %+v", round, i, req)
		}
	}
}

func TestAllowBatchRefusesBadRequestsFirst(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 4})
	ctx := context.Background()
	tests := []struct {
		name string
		give []chanlimit.Request
		want error
		at   string
	}{
		{"ZeroN", []chanlimit.Request{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 0}}, chanlimit.ErrInvalidCount, "request 3"},
		{"NegativeN", []chanlimit.Request{{"a", -1}}, chanlimit.ErrInvalidCount, "request 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]chanlimit.Decision, len(tt.give))
			err := r.AllowBatch(ctx, tt.give, out)
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.at)
		})
	}
	for _, key := range []string{"a", "b", "c", "d"} {
		d, err := r.Peek(ctx, key, 3)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "%s: nothing was applied", key)
	}

	err := r.AllowBatch(ctx, []chanlimit.Request{{"a", 1}, {"b", 1}}, make([]chanlimit.Decision, 1))
	assert.ErrorIs(t, err, chanlimit.ErrShortOutput)
	assert.NoError(t, r.AllowBatch(ctx, nil, nil), "an empty batch is fine")
}

// TestAllowBatchRefusesAnNAboveItsKeysCapacity: capacity is per key (its
// policies'), so its partition checks it, and refuses that request alone,
// as it refuses a new key that has no room.
func TestAllowBatchRefusesAnNAboveItsKeysCapacity(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 4})
	out := make([]chanlimit.Decision, 3)
	err := r.AllowBatch(bg, []chanlimit.Request{{"a", 3}, {"b", 4}, {"c", 5}}, out)
	require.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)
	assert.ErrorContains(t, err, "request 1")
	assert.True(t, out[0].Allowed, "a was decided")
	assert.Equal(t, []chanlimit.Decision{{}, {}}, out[1:], "b and c were refused")
	st := stats(t, r)
	assert.Equal(t, uint64(1), st.Allowed)
	assert.Zero(t, st.Refused, "Refused counts ErrTooManyKeys alone")
	assert.True(t, allowN(t, r, "b", 3).Allowed, "b took nothing")
}

func TestAllowBatchOnAClosedRouter(t *testing.T) {
	r, err := chanlimit.New(chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 4})
	require.NoError(t, err)
	require.NoError(t, r.Close())
	out := []chanlimit.Decision{{Allowed: true, Limit: 9}, {Allowed: true, Limit: 9}}
	err = r.AllowBatch(context.Background(), []chanlimit.Request{{"a", 1}, {"b", 1}}, out)
	assert.ErrorIs(t, err, chanlimit.ErrClosed)
	assert.Equal(t, []chanlimit.Decision{{}, {}}, out, "nothing was decided")
}

func TestAllowBatchContextDone(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 4})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := make([]chanlimit.Decision, 2)
	err := r.AllowBatch(ctx, []chanlimit.Request{{"a", 3}, {"b", 3}}, out)
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, allowN(t, r, "a", 3).Allowed, "the cancelled batch took nothing")
	assert.True(t, allowN(t, r, "b", 3).Allowed)
}
