package actor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The race branches of WaitN's leaving, forced one at a time on a parked
// partition (see partition_internal_test.go).

// cancelled returns a context that is done.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestLeaveAnsweredFirst: the grant is in the channel when ctx ends: it
// stands, and no leave message is sent.
func TestLeaveAnsweredFirst(t *testing.T) {
	p, _ := parked(t)
	for range 100 {
		ch := make(chan reply, 1)
		ch <- answer
		d, err := p.leave(cancelled(), "k", ch)
		require.NoError(t, err)
		require.Equal(t, answer.d, d)
		if len(p.mailbox) > 0 { // both cases were ready: the leave went too, and the partition will pass it by
			req := <-p.mailbox
			require.Equal(t, KindLeave, req.kind)
		}
	}
}

// TestLeaveSentThenLeft: the partition takes the waiter out of its line
// and answers errLeft: WaitN returns ctx's error, and the waiter counts
// nowhere.
func TestLeaveSentThenLeft(t *testing.T) {
	p, table := parked(t)
	l := p.loop
	allow(t, table, "k", 0, 2) // the window is spent
	ch := make(chan reply, 1)
	l.serve(&Message{kind: KindWait, key: "k", n: 1, reply: ch}, 0, nil)
	require.Equal(t, 1, l.state.Waiting)
	require.Empty(t, ch, "in line")

	done := make(chan error, 1)
	go func() {
		_, err := p.leave(cancelled(), "k", ch)
		done <- err
	}()
	req := <-p.mailbox
	require.Equal(t, KindLeave, req.kind)
	l.serve(&req, 0, nil)
	assert.ErrorIs(t, <-done, context.Canceled)
	assert.Zero(t, l.state.Waiting)
	assert.Empty(t, l.waits.lines, "the line is closed")
}

// TestLeaveGrantedBeforeTheLeave: the waiter is granted while its leave
// message waits in the mailbox: the partition passes the leave by, and
// the grant stands.
func TestLeaveGrantedBeforeTheLeave(t *testing.T) {
	p, table := parked(t)
	l := p.loop
	allow(t, table, "k", 0, 2)
	ch := make(chan reply, 1)
	l.serve(&Message{kind: KindWait, key: "k", n: 1, reply: ch}, 0, nil)
	p.mailbox <- Message{kind: KindLeave, key: "k", reply: ch} // as leave sends it
	l.serveDue(l.waits.due[0].at)                              // the window ends: granted
	require.Len(t, ch, 1)
	leave := <-p.mailbox
	l.serve(&leave, l.state.Now, nil)
	r := <-ch
	require.NoError(t, r.err)
	assert.True(t, r.d.Allowed)
	assert.Empty(t, ch, "one answer only")
}

// TestLeaveAfterExit: the goroutine exited, having answered every waiter
// (ErrClosed): the leave finds it there.
func TestLeaveAfterExit(t *testing.T) {
	p, _ := parked(t)
	close(p.done)
	ch := make(chan reply, 1)
	ch <- reply{err: ErrClosed}
	p.mailbox <- Message{} // full: the leave cannot be sent
	_, err := p.leave(cancelled(), "k", ch)
	assert.ErrorIs(t, err, ErrClosed)

	// A wait sent after the goroutine's last look was never answered.
	_, err = p.leave(cancelled(), "k", make(chan reply, 1))
	assert.ErrorIs(t, err, context.Canceled)
}

// TestWaitSentWhileStoppingUnanswered: a WaitN sent after the partition's
// last look returns ErrClosed once it exits.
func TestWaitSentWhileStoppingUnanswered(t *testing.T) {
	p, _ := parked(t)
	close(p.stop)
	close(p.done)
	_, err := p.WaitN(context.Background(), "k", 1)
	assert.ErrorIs(t, err, ErrClosed)
}

// TestTryEachGrantsWhatNeedNotWait: a batch of tries grants what WaitN
// would grant at once, leaves the rest untaken (a key with a line, a
// denial), and counts only what it granted.
func TestTryEachGrantsWhatNeedNotWait(t *testing.T) {
	p, table := parked(t)
	l := p.loop
	allow(t, table, "lined", 0, 2)
	l.serve(&Message{kind: KindWait, key: "lined", n: 1, reply: make(chan reply, 1)}, 0, nil)
	allow(t, table, "full", 0, 2)
	items := []Item{{Key: "fresh", N: 2}, {Key: "lined", N: 1}, {Key: "full", N: 1}, {Key: "big", N: 3}}
	ch := make(chan reply, 1)
	l.serve(&Message{kind: KindTry, arg: &items, reply: ch}, 0, nil)
	<-ch
	assert.True(t, items[0].D.Allowed)
	assert.False(t, items[1].D.Allowed, "behind a line")
	assert.NoError(t, items[1].Err)
	assert.False(t, items[2].D.Allowed, "denied: left to wait")
	assert.NoError(t, items[2].Err)
	assert.ErrorIs(t, items[3].Err, ErrExceedsCapacity)
	assert.Equal(t, uint64(1), l.state.Counts.Allowed)
	assert.Zero(t, l.state.Counts.Denied, "one left to wait is no answer")
	assert.Equal(t, 1, l.state.Waiting)
}
