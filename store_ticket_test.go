package chanlimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// TestStoreTicketsWaitInOrder: Tickets through a store wait in their
// key's line, are granted in order, and one that leaves takes nothing.
func TestStoreTicketsWaitInOrder(t *testing.T) {
	clk := clock.NewFake(storeStart)
	st := newMemStore(clk, FailClosed)
	r, err := New(Config{Limit: 1, Window: time.Second, Clock: clk, Store: st})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	require.True(t, r.Allow("k"))

	ready := make(chan *Ticket, 4)
	var tickets []*Ticket
	for range 4 {
		tk, err := r.StartWait(ctx, "k", 1, ready)
		require.NoError(t, err)
		tickets = append(tickets, tk)
	}
	for {
		s, err := r.Stats(ctx)
		require.NoError(t, err)
		if s.Waiting == 4 {
			break
		}
		time.Sleep(time.Millisecond) // for the store's trips to land: not the limiter's time
	}
	tickets[1].Leave(context.Canceled)
	got := ringing(t, ready)
	require.Same(t, tickets[1], got, "the one that left rings first")
	_, err = got.Answer()
	require.ErrorIs(t, err, context.Canceled)

	for _, want := range []*Ticket{tickets[0], tickets[2], tickets[3]} {
		require.NoError(t, clk.BlockUntilContext(ctx, 1))
		clk.Advance(time.Second)
		got := ringing(t, ready)
		require.Same(t, want, got)
		d, err := got.Answer()
		require.NoError(t, err)
		assert.True(t, d.Allowed)
	}
	d, err := r.Peek(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the third grant took 3s's unit")
	assert.Empty(t, ready, "each rang once")
}

// ringing returns the next Ticket on ready, failing the test if none
// comes in a while: a grant that took a step too many never would.
func ringing(t *testing.T, ready <-chan *Ticket) *Ticket {
	t.Helper()
	select {
	case tk := <-ready:
		return tk
	case <-time.After(10 * time.Second): // a bound on a hang, not the limiter's time
		t.Fatal("no Ticket rang")
		return nil
	}
}
