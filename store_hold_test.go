package chanlimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// TestStoreHoldUnsupported: a router on a Store cannot hold keys yet,
// and says so with an error wrapping errors.ErrUnsupported, holding
// nothing.
func TestStoreHoldUnsupported(t *testing.T) {
	clk := clock.NewFake(storeStart)
	r, err := New(Config{Limit: 2, Window: time.Second, Clock: clk, Store: newMemStore(clk, FailClosed)})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	require.ErrorIs(t, r.Hold(ctx, "k", time.Second), errors.ErrUnsupported)
	d, err := r.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}
