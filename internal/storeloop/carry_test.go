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
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

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
		fw, err := algorithms.NewFixedWindow(algorithms.Params{Limit: 1, Window: time.Second})
		require.NoError(t, err)
		set := keytable.NewSet([]keytable.Policy{{Name: "p", Algorithm: "fixed_window", Params: algorithms.Params{Limit: 1, Window: time.Second}, Rule: keytable.NewRule(fw)}})
		clk := exitingNow{clock.NewFake(time.Unix(0, 0)), &exit}
		st := &store{keys: map[*keytable.Set]*keytable.Keys{}, origin: clk.Fake.Now(), release: make(chan struct{})}
		table := storetable.New(st, storetable.FailClosed, keytable.NewKeys(set), true, clk.Fake.Now())
		p := Start(table, clk, clk.Fake.Now(), 8, 0)
		defer func() { p.Stop(); <-p.Done() }()
		exit.Store(true)
		err = p.Do(context.Background(), func(s *actor.State) error { _, err := s.ReadClock(); return err })
		exit.Store(false)
		assert.ErrorIs(t, err, actor.ErrClockPanic)
		var panics uint64
		require.NoError(t, p.Do(context.Background(), func(s *actor.State) error { panics = s.Counts.ClockPanics; return nil }))
		assert.EqualValues(t, 1, panics)
	})
}
