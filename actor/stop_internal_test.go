package actor

import (
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// TestStopInABurstSurvivesAGoexit: a request that came after the stop
// message, in the same burst, and ends the goroutine (a function run by
// Do that calls runtime.Goexit) leaves the next goroutine stopping: it
// drains and exits.
func TestStopInABurstSurvivesAGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(time.Unix(0, 0))
		p := newPartition(fixedWindows(t), clk, clk.Now(), 4)
		allowed, exited, after := make(chan reply, 1), make(chan reply, 1), make(chan reply, 1)
		// As a sender that passed the stop check before Stop closed
		// stop would leave them: one request before the stop message,
		// two after it.
		p.mailbox <- Message{kind: KindAllow, key: "k", n: 1, reply: allowed}
		close(p.stop)
		p.mailbox <- Message{kind: KindStop}
		p.mailbox <- Message{kind: KindDo, arg: func(*State) error { runtime.Goexit(); return nil }, reply: exited}
		p.mailbox <- Message{kind: KindAllow, key: "k", n: 1, reply: after}
		go p.run()
		synctest.Wait()
		select {
		case <-p.done:
		default:
			p.mailbox <- Message{kind: KindStop} // let it go, so that the bubble ends
			t.Fatal("the partition did not exit")
		}
		r := <-allowed
		require.NoError(t, r.err)
		assert.True(t, r.d.Allowed)
		assert.ErrorIs(t, (<-exited).err, ErrAlgorithmPanic)
		r = <-after
		require.NoError(t, r.err, "answered by the drain")
		assert.True(t, r.d.Allowed)
	})
}
