package storeloop

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

// exitingNow is a Fake whose Now ends its goroutine (runtime.Goexit)
// while exit is set.
type exitingNow struct {
	*clock.Fake
	exit *atomic.Bool
}

func (c exitingNow) Now() time.Time {
	if c.exit.Load() {
		runtime.Goexit()
	}
	return c.Fake.Now()
}

// TestAGoexitInReadClock: a function run by Do whose State.ReadClock
// ends the goroutine fails with ErrClockPanic, and the panic is counted,
// as actor's loop answers it. Before, it failed with ErrAlgorithmPanic,
// uncounted.
func TestAGoexitInReadClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var exit atomic.Bool
		clk := exitingNow{clock.NewFake(time.Unix(0, 0)), &exit}
		p, l, st := setUpOn(t, clk, clk.Fake.Now(), 1, 8, storetable.FailClosed)
		go l.run()
		defer stop(p, st)
		exit.Store(true)
		err := p.Do(context.Background(), func(s *actor.State) error { _, err := s.ReadClock(); return err })
		exit.Store(false)
		assert.ErrorIs(t, err, actor.ErrClockPanic)
		var panics uint64
		require.NoError(t, p.Do(context.Background(), func(s *actor.State) error { panics = s.Counts.ClockPanics; return nil }))
		assert.EqualValues(t, 1, panics)
	})
}
