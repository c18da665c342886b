package actor

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/clocktest"
)

// These tests take the protocol's race branches one at a time, on a
// partition whose goroutine is not running, so each interleaving is forced
// rather than hoped for.

// fixedWindows returns a table of fixed windows of 2 per second.
func fixedWindows(t *testing.T) Table {
	t.Helper()
	return newWindows()
}

// parked returns a partition whose goroutine is not running, and its table.
func parked(t *testing.T) (*Partition, Table) {
	t.Helper()
	table := fixedWindows(t)
	clk := clock.NewFake(time.Unix(0, 0))
	return newPartition(table, clk, clk.Now(), 1), table
}

// allow asks table for n units on key at now.
func allow(t *testing.T, table Table, key string, now time.Duration, n int) algorithms.Decision {
	t.Helper()
	var d algorithms.Decision
	require.NoError(t, table.AllowN(key, now, n, &d))
	return d
}

// peek asks table what allow would answer, changing nothing.
func peek(t *testing.T, table Table, key string, now time.Duration, n int) algorithms.Decision {
	t.Helper()
	var d algorithms.Decision
	require.NoError(t, table.PeekN(key, now, n, &d))
	return d
}

var answer = reply{d: algorithms.Decision{Allowed: true, Limit: 2, Remaining: 1}}

// TestWaitAfterExitUnanswered: a request sent while the partition was
// stopping, after its last look: ErrClosed once it exits, not a hang.
func TestWaitAfterExitUnanswered(t *testing.T) {
	p, _ := parked(t)
	close(p.done)
	assert.ErrorIs(t, p.wait(context.Background(), make(chan reply, 1), true).err, ErrClosed)
}

// TestWaitAfterExitAnswered: the goroutine answered, then exited; whichever
// of the two the select sees first, the answer wins.
func TestWaitAfterExitAnswered(t *testing.T) {
	p, _ := parked(t)
	close(p.done)
	for range 100 {
		ch := make(chan reply, 1)
		ch <- answer
		require.Equal(t, answer, p.wait(context.Background(), ch, true))
	}
}

// TestWaitWithoutContext: with a context that can never be done and no stop
// in sight, wait is a plain receive.
func TestWaitWithoutContext(t *testing.T) {
	p, _ := parked(t)
	ch := make(chan reply, 1)
	ch <- answer
	assert.Equal(t, answer, p.wait(context.Background(), ch, false))
}

// TestSendAfterStop: a stopped partition takes no more requests.
func TestSendAfterStop(t *testing.T) {
	p, _ := parked(t)
	close(p.stop)
	_, _, err := p.send(context.Background(), Message{kind: KindAllow, key: "k", n: 1})
	assert.ErrorIs(t, err, ErrClosed)
	assert.Empty(t, p.mailbox)
}

// TestAbandonTakesAnAnswerThatArrived: the context ended, but the answer was
// already there: the decision was made and applied, so the caller gets it.
func TestAbandonTakesAnAnswerThatArrived(t *testing.T) {
	p, _ := parked(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ch := make(chan reply, 1)
	ch <- answer
	assert.Equal(t, answer, p.abandon(ctx, ch))
	assert.Empty(t, ch)
}

// TestAbandonMarksTheChannel: with no answer yet, abandon fills the channel,
// and the partition then skips the request.
func TestAbandonMarksTheChannel(t *testing.T) {
	p, table := parked(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ch := make(chan reply, 1)
	require.ErrorIs(t, p.abandon(ctx, ch).err, context.Canceled)
	require.Len(t, ch, 1, "the mark")

	p.loop.serve(&Message{kind: KindAllow, key: "k", n: 2, reply: ch}, 0, nil)
	assert.Equal(t, 0, table.(interface{ Len() int }).Len(), "a marked request is not applied")
}

// TestServeRefundsAnUndeliveredGrant: the caller's mark arrives while the
// partition decides; the send finds the channel full and the grant is
// taken back. A Peek that cannot be delivered refunds nothing.
func TestServeRefundsAnUndeliveredGrant(t *testing.T) {
	p, table := parked(t)
	full := func() chan reply {
		ch := make(chan reply, 1)
		ch <- reply{}
		return ch
	}
	// serve skips a request whose channel is full before it decides, so
	// call the delivery step as serve does after deciding.
	d := allow(t, table, "k", 0, 2)
	p.loop.deliver(&Message{kind: KindAllow, key: "k", n: 2, reply: full()}, 0, &reply{d: d})
	assert.True(t, allow(t, table, "k", 0, 2).Allowed, "the undelivered grant was given back")

	require.False(t, peek(t, table, "k", 0, 1).Allowed)
	p.loop.deliver(&Message{kind: KindPeek, key: "k", n: 1, reply: full()}, 0, &reply{d: algorithms.Decision{Allowed: true}})
	assert.False(t, allow(t, table, "k", 0, 1).Allowed, "an undelivered Peek gives nothing back")
	assert.Zero(t, p.loop.state.Counts, "undelivered answers count nowhere")
}

// TestAClockThatPanicsFailsOnlyItsBurst: the requests that came with a
// reading of the clock that panicked and need the time fail with an error
// wrapping the panic, a batch's items each; Reset and Do need none and go
// on at the latest reading that worked. The partition counts the panic,
// keeps its timeline, and serves the next burst once the clock reads again.
func TestAClockThatPanicsFailsOnlyItsBurst(t *testing.T) {
	clk := clocktest.NewRigged(time.Unix(0, 0))
	p := newPartition(fixedWindows(t), clk, clk.Now(), 4)
	ch := func() chan reply { return make(chan reply, 1) }

	clk.Advance(time.Second)
	now, err := p.loop.tick()
	require.NoError(t, err)
	require.Equal(t, time.Second, now)
	allow(t, p.loop.state.Table, "r", now, 1)

	clk.Rig(func() { panic("the clock is broken") })
	clk.Advance(time.Second)
	now, err = p.loop.tick()
	require.ErrorIs(t, err, ErrClockPanic)
	assert.Equal(t, "chanlimit: clock panicked: the clock is broken", err.Error())
	assert.Equal(t, time.Second, now, "the timeline stays")

	allowReply, peekReply, resetReply, doReply := ch(), ch(), ch(), ch()
	p.loop.serve(&Message{kind: KindAllow, key: "k", n: 1, reply: allowReply}, now, err)
	p.loop.serve(&Message{kind: KindPeek, key: "k", n: 1, reply: peekReply}, now, err)
	items := []Item{{Key: "a", N: 1}, {Key: "b", N: 1}}
	p.loop.serve(&Message{kind: KindBatch, arg: &items, reply: ch()}, now, err)
	p.loop.serve(&Message{kind: KindReset, key: "r", reply: resetReply}, now, err)
	var seen State
	p.loop.serve(&Message{kind: KindDo, arg: func(s *State) error { seen = *s; return nil }, reply: doReply}, now, err)
	assert.ErrorIs(t, (<-allowReply).err, ErrClockPanic)
	assert.ErrorIs(t, (<-peekReply).err, ErrClockPanic)
	for _, it := range items {
		assert.ErrorIs(t, it.Err, ErrClockPanic)
	}
	assert.NoError(t, (<-resetReply).err)
	assert.NoError(t, (<-doReply).err)
	assert.Equal(t, time.Second, seen.Now, "Do sees the latest reading that worked")
	assert.Zero(t, p.loop.state.Table.(interface{ Len() int }).Len(), "nothing was decided, and r was reset")
	assert.Equal(t, Counts{ClockPanics: 1}, p.loop.state.Counts, "a panic counts once; its answers count nowhere else")

	clk.Rig(nil)
	now, err = p.loop.tick()
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, now, "the step taken meanwhile counts once the clock reads again")
}

// TestTicketAfterExitUnanswered: a Ticket sent after the goroutine's last
// look rings with ErrClosed once the goroutine has exited.
func TestTicketAfterExitUnanswered(t *testing.T) {
	p, _ := parked(t)
	ready := make(chan *Ticket, 1)
	tk := &Ticket{p: p, key: "k", ch: make(chan reply, 1), ready: ready}
	close(p.done)
	p.settle(tk)
	require.Same(t, tk, <-ready)
	_, err := tk.Answer()
	assert.ErrorIs(t, err, ErrClosed)
}

// TestTicketAfterExitAnswered: a Ticket the goroutine answered before it
// exited rings once, with that answer.
func TestTicketAfterExitAnswered(t *testing.T) {
	p, _ := parked(t)
	ready := make(chan *Ticket, 2)
	tk := &Ticket{p: p, key: "k", ch: make(chan reply, 1), ready: ready}
	tk.ch <- reply{d: algorithms.Decision{Allowed: true}}
	ring(tk)
	close(p.done)
	p.settle(tk)
	require.Same(t, tk, <-ready)
	require.Empty(t, ready, "once")
	d, err := tk.Answer()
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

// TestARequestFitsACacheLine: a message carries a kind and what that kind
// needs, so that sending one copies a cache line at most.
func TestARequestFitsACacheLine(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Message{}), uintptr(64))
}

// TestPolicyNamesAreBounded: past MaxPolicyNames names, a partition
// counts the denials of a new name under OtherPolicies, every denial
// counted once.
func TestPolicyNamesAreBounded(t *testing.T) {
	var s State
	const names = MaxPolicyNames + 44
	for i := range names {
		req := &Message{kind: KindAllow, key: "k", reply: make(chan reply, 1)}
		for range 2 {
			require.True(t, s.Answer(req, algorithms.Decision{Policy: fmt.Sprint("p", i)}, nil))
			<-req.reply
		}
	}
	got, sum := map[string]uint64{}, uint64(0)
	s.EachPolicyDenied(func(policy string, n uint64) { got[policy] = n; sum += n })
	assert.Len(t, got, MaxPolicyNames+1)
	assert.Equal(t, uint64(2), got["p0"])
	assert.Equal(t, uint64(2*44), got[OtherPolicies])
	assert.Equal(t, uint64(2*names), sum, "every denial counted once")
}
