package actor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// These tests take the protocol's race branches one at a time, on a
// partition whose goroutine is not running, so each interleaving is forced
// rather than hoped for.

func idle(t *testing.T) (*Partition, algorithms.Table) {
	t.Helper()
	w, err := algorithms.NewFixedWindow(algorithms.Params{Limit: 2, Window: time.Second})
	require.NoError(t, err)
	table := algorithms.Keyed[algorithms.FixedWindowState](w).NewTable()
	return newPartition(table, clock.NewFake(time.Unix(0, 0)), 1), table
}

var answer = reply{d: algorithms.Decision{Allowed: true, Limit: 2, Remaining: 1}}

// TestWaitAfterExitUnanswered: a request sent while the partition was
// stopping, after its last look: ErrClosed once it exits, not a hang.
func TestWaitAfterExitUnanswered(t *testing.T) {
	p, _ := idle(t)
	close(p.done)
	_, err := p.wait(context.Background(), make(chan reply, 1), true)
	assert.ErrorIs(t, err, ErrClosed)
}

// TestWaitAfterExitAnswered: the goroutine answered, then exited; whichever
// of the two the select sees first, the answer wins.
func TestWaitAfterExitAnswered(t *testing.T) {
	p, _ := idle(t)
	close(p.done)
	for range 100 {
		ch := make(chan reply, 1)
		ch <- answer
		d, err := p.wait(context.Background(), ch, true)
		require.NoError(t, err)
		require.Equal(t, answer.d, d)
	}
}

// TestWaitWithoutContext: with a context that can never be done and no stop
// in sight, wait is a plain receive.
func TestWaitWithoutContext(t *testing.T) {
	p, _ := idle(t)
	ch := make(chan reply, 1)
	ch <- answer
	d, err := p.wait(context.Background(), ch, false)
	require.NoError(t, err)
	assert.Equal(t, answer.d, d)
}

// TestSendAfterStop: a stopped partition takes no more requests.
func TestSendAfterStop(t *testing.T) {
	p, _ := idle(t)
	close(p.stop)
	_, _, err := p.send(context.Background(), request{op: opAllow, key: "k", n: 1})
	assert.ErrorIs(t, err, ErrClosed)
	assert.Empty(t, p.mailbox)
}

// TestAbandonTakesAnAnswerThatArrived: the context ended, but the answer was
// already there: the decision was made and applied, so the caller gets it.
func TestAbandonTakesAnAnswerThatArrived(t *testing.T) {
	p, _ := idle(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ch := make(chan reply, 1)
	ch <- answer
	d, err := p.abandon(ctx, ch)
	require.NoError(t, err)
	assert.Equal(t, answer.d, d)
	assert.Empty(t, ch)
}

// TestAbandonMarksTheChannel: with no answer yet, abandon fills the channel,
// and the partition then skips the request.
func TestAbandonMarksTheChannel(t *testing.T) {
	p, table := idle(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ch := make(chan reply, 1)
	_, err := p.abandon(ctx, ch)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, ch, 1, "the mark")

	p.loop.serve(request{op: opAllow, key: "k", n: 2, reply: ch}, 0)
	assert.Equal(t, 0, table.Len(), "a marked request is not applied")
}

// TestServeRefundsAnUndeliveredGrant: the caller's mark arrives while the
// partition decides; the send finds the channel full and the grant is
// taken back. A Peek that cannot be delivered refunds nothing.
func TestServeRefundsAnUndeliveredGrant(t *testing.T) {
	p, table := idle(t)
	full := func() chan reply {
		ch := make(chan reply, 1)
		ch <- reply{}
		return ch
	}
	// serve skips a request whose channel is full before it decides, so
	// call the delivery step as serve does after deciding.
	d, err := table.AllowN("k", 0, 2)
	require.NoError(t, err)
	p.loop.deliver(request{op: opAllow, key: "k", n: 2, reply: full()}, 0, reply{d: d})
	d, err = table.AllowN("k", 0, 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the undelivered grant was given back")

	d, err = table.PeekN("k", 0, 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	p.loop.deliver(request{op: opPeek, key: "k", n: 1, reply: full()}, 0, reply{d: algorithms.Decision{Allowed: true}})
	d, err = table.AllowN("k", 0, 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "an undelivered Peek gives nothing back")
}

// TestMessagesForgetKeysAfterLinger: messages forget a key once it has
// been untouched for linger, not before; Stats counts it apart meanwhile.
func TestMessagesForgetKeysAfterLinger(t *testing.T) {
	w, err := algorithms.NewFixedWindow(algorithms.Params{Limit: 2, Window: time.Second})
	require.NoError(t, err)
	clk := clock.NewFake(time.Unix(0, 0))
	p := Start(algorithms.Keyed[algorithms.FixedWindowState](w).NewTable(), clk, 4)
	defer func() { p.Stop(); <-p.Done() }()
	ctx := context.Background()
	held := func() (keys, idle int) {
		t.Helper()
		st, err := p.Stats(ctx)
		require.NoError(t, err)
		return st.Keys, st.Idle
	}

	_, err = p.AllowN(ctx, "k", 1) // untouched from 1s
	require.NoError(t, err)
	clk.Advance(time.Second + linger - 1)
	_, err = p.AllowN(ctx, "other", 1)
	require.NoError(t, err)
	keys, idle := held()
	assert.Equal(t, 1, keys, "other")
	assert.Equal(t, 1, idle, "k is untouched, but within its linger")

	clk.Advance(1)
	_, err = p.AllowN(ctx, "other", 1)
	require.NoError(t, err)
	keys, idle = held()
	assert.Equal(t, 1, keys)
	assert.Equal(t, 0, idle, "k has lingered its time: forgotten")
	st, err := p.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.Expired)
}

// sourRefund is a table whose Refund panics.
type sourRefund struct{ algorithms.Table }

func (sourRefund) Refund(string, time.Duration, int) { panic("no refunds") }

// TestAPanickingRefundIsCountedAndDropsTheKey: giving back the grant of a
// caller who left, the rule panics: nobody gets an error, so the panic is
// counted, and the key is dropped.
func TestAPanickingRefundIsCountedAndDropsTheKey(t *testing.T) {
	_, inner := idle(t)
	p := newPartition(sourRefund{inner}, clock.NewFake(time.Unix(0, 0)), 1)
	full := make(chan reply, 1)
	full <- reply{}
	d, err := inner.AllowN("k", 0, 2)
	require.NoError(t, err)
	p.loop.deliver(request{op: opAllow, key: "k", n: 2, reply: full}, 0, reply{d: d})
	assert.Equal(t, uint64(1), p.loop.stats.Panicked)
	assert.Zero(t, inner.Len(), "k is dropped")
}
