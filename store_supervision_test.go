package chanlimit

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/clock"
)

// failingStore is a memStore whose Decide panics, or ends its goroutine
// (runtime.Goexit), when a call has an op on key "bad".
type failingStore struct {
	*memStore
	exit bool // Goexit, not panic
}

func (s failingStore) Decide(ctx context.Context, ops []StoreOp) {
	for i := range ops {
		if ops[i].Key == "bad" {
			if s.exit {
				runtime.Goexit()
			}
			panic("store: bad")
		}
	}
	s.memStore.Decide(ctx, ops)
}

// TestAStoreThatPanicsOrExitsCouldNotAnswer: a Store whose Decide panics,
// or ends the goroutine it runs on, could not answer: the requests of
// that round trip fail with ErrStoreUnavailable, or are decided as the
// FailMode says; the other keys go on, the failures are counted, and
// Close returns. Before, a panic ended the process, and a Goexit left the
// round trip out for ever: its callers, and Close, waited for it.
func TestAStoreThatPanicsOrExitsCouldNotAnswer(t *testing.T) {
	for _, exit := range []bool{false, true} {
		for _, mode := range []FailMode{FailClosed, FailOpen, FailLocal} {
			name := mode.String() + "/panic"
			if exit {
				name = mode.String() + "/Goexit"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					st := failingStore{newMemStore(clock.Real(), mode), exit}
					r := routerOn(t, st.memStore, st, Config{Limit: 1, Window: time.Hour, Partitions: 1})
					ctx := context.Background()
					for i := range 2 { // the second: the partition goes on after the first
						d, err := r.AllowN(ctx, "bad", 1)
						switch mode {
						case FailClosed:
							require.ErrorIs(t, err, ErrStoreUnavailable)
						case FailOpen:
							require.NoError(t, err)
							assert.True(t, d.Allowed)
						case FailLocal: // a limit of 1, on the local keys
							require.NoError(t, err)
							assert.Equal(t, i == 0, d.Allowed, i)
						}
						d, err = r.AllowN(ctx, "good", 1)
						require.NoError(t, err)
						assert.Equal(t, i == 0, d.Allowed, "the store decides the other keys")
					}
					s, err := r.Stats(ctx)
					require.NoError(t, err)
					assert.EqualValues(t, 2, s.StoreErrors)
					require.NoError(t, r.Close())
				})
			})
		}
	}
}
