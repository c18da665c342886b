package chanlimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// TestAllowEachFailsEachAlone: a bad n, a key too long and an n above
// the key's capacity fail their own requests; the others are decided as
// AllowN would, in order; a request whose error was set already is passed
// by, taking nothing.
func TestAllowEachFailsEachAlone(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Minute, MaxKeyBytes: 8})
	ctx := context.Background()
	mine := errors.New("the caller's own")
	reqs := []chanlimit.Request{
		{Key: "a", N: 2}, {Key: "b", N: 0}, {Key: strings.Repeat("k", 9), N: 1},
		{Key: "a", N: 2}, {Key: "c", N: 4}, {Key: "d", N: 1}, {Key: "a", N: 1},
	}
	out, errs := make([]chanlimit.Decision, len(reqs)), make([]error, len(reqs))
	errs[5] = mine
	require.NoError(t, r.AllowEach(ctx, reqs, out, errs))

	assert.True(t, out[0].Allowed)
	assert.Equal(t, 1, out[0].Remaining)
	assert.ErrorIs(t, errs[1], chanlimit.ErrInvalidCount)
	assert.ErrorIs(t, errs[2], chanlimit.ErrKeyTooLong)
	assert.False(t, out[3].Allowed, "a's second request finds 1 left")
	assert.NoError(t, errs[3])
	assert.ErrorIs(t, errs[4], chanlimit.ErrExceedsCapacity)
	assert.Same(t, mine, errs[5])
	assert.Zero(t, out[5], "passed by")
	assert.True(t, out[6].Allowed)
	assert.Equal(t, 0, out[6].Remaining)
	for _, i := range []int{1, 2, 4} {
		assert.Zero(t, out[i], "request %d", i)
	}
	d, err := r.Peek(ctx, "d", 1)
	require.NoError(t, err)
	assert.Equal(t, 2, d.Remaining, "d took nothing")

	assert.ErrorIs(t, r.AllowEach(ctx, reqs, out[:2], errs), chanlimit.ErrShortOutput)
	assert.ErrorIs(t, r.AllowEach(ctx, reqs, out, errs[:2]), chanlimit.ErrShortOutput)
	require.NoError(t, r.Close())
	clear(errs)
	assert.ErrorIs(t, r.AllowEach(ctx, reqs[:1], out, errs), chanlimit.ErrClosed)
}

// TestTryWaitEach: a request WaitN would grant at once is granted; one
// behind a caller waiting on its key, or one its policy would make wait,
// takes nothing and is not Allowed; one WaitN would refuse at once gets
// WaitN's error; several on one key are decided in order.
func TestTryWaitEach(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second, Partitions: 1})
	ctx := context.Background()
	require.True(t, r.Allow("lined"))
	require.True(t, r.Allow("lined"))
	waited := make(chan error, 1)
	go func() { waited <- r.Wait(ctx, "lined") }()
	require.NoError(t, clk.BlockUntilContext(ctx, 1)) // the waiter's timer

	reqs := []chanlimit.Request{{Key: "a", N: 1}, {Key: "a", N: 1}, {Key: "a", N: 1}, {Key: "lined", N: 1}, {Key: "b", N: 3}}
	out, errs := make([]chanlimit.Decision, len(reqs)), make([]error, len(reqs))
	require.NoError(t, r.TryWaitEach(ctx, reqs, out, errs))
	assert.True(t, out[0].Allowed)
	assert.True(t, out[1].Allowed)
	assert.False(t, out[2].Allowed, "a has no unit left now: its wait is WaitN's")
	assert.NoError(t, errs[2])
	assert.False(t, out[3].Allowed, "behind the caller waiting")
	assert.NoError(t, errs[3])
	assert.ErrorIs(t, errs[4], chanlimit.ErrExceedsCapacity)
	d, err := r.Peek(ctx, "a", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "a's third try took nothing, its first two took both units")

	clk.Advance(time.Second)
	require.NoError(t, <-waited)
}

// TestTryWaitEachOnAFullLine: a try on a key whose line is full fails as
// WaitN would, with ErrTooManyWaiters, after an n above capacity has had
// its turn. Before, it was left not Allowed with no error, and its
// caller's WaitN failed only then.
func TestTryWaitEachOnAFullLine(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Partitions: 1, MaxWaiters: 1})
	ctx := context.Background()
	require.True(t, r.Allow("k"))
	waited := make(chan error, 1)
	go func() { waited <- r.Wait(ctx, "k") }()
	require.NoError(t, clk.BlockUntilContext(ctx, 1)) // the waiter's timer
	_, err := r.WaitN(ctx, "k", 1)
	require.ErrorIs(t, err, chanlimit.ErrTooManyWaiters, "WaitN's answer")

	reqs := []chanlimit.Request{{Key: "k", N: 1}, {Key: "k", N: 2}}
	out, errs := make([]chanlimit.Decision, 2), make([]error, 2)
	require.NoError(t, r.TryWaitEach(ctx, reqs, out, errs))
	assert.ErrorIs(t, errs[0], chanlimit.ErrTooManyWaiters)
	assert.Zero(t, out[0])
	assert.ErrorIs(t, errs[1], chanlimit.ErrExceedsCapacity, "a bad n first, as everywhere")

	clk.Advance(time.Second)
	require.NoError(t, <-waited)
}
