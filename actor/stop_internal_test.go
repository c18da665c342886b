package actor

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// nearRemote is a remote table whose store is a table in memory: a trip
// does nothing, and Finish decides the items on the partition's
// goroutine.
type nearRemote struct{ Table }

type nearTrip struct{}

func (nearTrip) Go(context.Context) {}

func (r nearRemote) Prepare([]Item, time.Duration) Trip { return nearTrip{} }
func (r nearRemote) Finish(_ Trip, items []Item, now time.Duration) {
	decideAs(r.Table, items, now)
}
func (r nearRemote) Hint(string, int) (algorithms.Decision, error) { return algorithms.Decision{}, nil }

// TestStopInABurstSurvivesAGoexit: a request that came after the stop
// message, in the same burst, and ends the goroutine (a function run by
// Do that calls runtime.Goexit) leaves the next goroutine stopping: it
// drains and exits. Before, a remote table's burst forgot the stop
// message once past it, and the partition never exited.
func TestStopInABurstSurvivesAGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(time.Unix(0, 0))
		p := newPartition(nearRemote{fixedWindows(t)}, clk, clk.Now(), 4)
		allowed, exited, after := make(chan reply, 1), make(chan reply, 1), make(chan reply, 1)
		// As a sender that passed the stop check before Stop closed
		// stop would leave them: one request before the stop message,
		// two after it.
		p.mailbox <- request{op: opAllow, key: "k", n: 1, reply: allowed}
		close(p.stop)
		p.mailbox <- request{op: opStop}
		p.mailbox <- request{op: opDo, arg: func(*State) error { runtime.Goexit(); return nil }, reply: exited}
		p.mailbox <- request{op: opAllow, key: "k", n: 1, reply: after}
		go p.run()
		synctest.Wait()
		select {
		case <-p.done:
		default:
			p.mailbox <- request{op: opStop} // let it go, so that the bubble ends
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
