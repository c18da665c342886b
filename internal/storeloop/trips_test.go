package storeloop

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

// TestTripsOutAndGathered: with room for two trips (testTrips), two go
// out at once, each alone under a light load; what comes while both are
// out is gathered, the loop serving its other messages meanwhile, and
// goes out in one trip when one lands; a batch's items go as one call.
// Before, a partition with no room waited for a trip to land, its mailbox
// unread, holding the one burst it had taken.
func TestTripsOutAndGathered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, l, st := setUp(t, 1000, 64, storetable.FailClosed)
		go l.run()
		defer stop(p, st)
		ctx := context.Background()
		var wg sync.WaitGroup
		var allowed atomic.Int64
		allow := func(key string) {
			wg.Go(func() {
				if d, err := p.AllowN(ctx, key, 1); err == nil && d.Allowed {
					allowed.Add(1)
				}
			})
		}
		for i := range 2 {
			allow(fmt.Sprint("single", i))
			synctest.Wait()
			require.Len(t, st.callsOf(), i+1, "out at once, alone")
		}
		for i := range 20 {
			allow(fmt.Sprint("k", i))
		}
		batch := []actor.Item{{Key: "batch", N: 1}} // a batch of one: SendBatch returns once it is in the mailbox
		pending, err := p.SendBatch(ctx, &batch)
		require.NoError(t, err)
		synctest.Wait()
		assert.Zero(t, p.Queued(), "the loop took every request while two trips were out")
		require.Len(t, st.callsOf(), 2, "no room: gathered")
		require.NoError(t, p.Do(ctx, func(*actor.State) error { return nil }), "a Do is served while the requests are gathered")

		st.release <- struct{}{} // a trip lands: the gathered requests go out
		synctest.Wait()
		require.Len(t, st.callsOf(), 3)
		assert.Len(t, st.callsOf()[2], 21, "the twenty requests and the batch gathered meanwhile, in one call")
		st.release <- struct{}{} // the other single
		st.release <- struct{}{} // the gathered call
		wg.Wait()
		require.NoError(t, pending.Wait(ctx))
		assert.True(t, batch[0].D.Allowed)
		assert.EqualValues(t, 22, allowed.Load())

		items := make([]actor.Item, 64)
		for i := range items {
			items[i] = actor.Item{Key: fmt.Sprint("b", i%10), N: 1}
		}
		pending, err = p.SendBatch(ctx, &items)
		require.NoError(t, err)
		synctest.Wait()
		st.release <- struct{}{}
		require.NoError(t, pending.Wait(ctx))
		assert.Len(t, st.callsOf()[3], 64, "a batch's items in one call")
		for i := range items {
			assert.True(t, items[i].D.Allowed, i)
		}
	})
}

// TestGatheredIsBounded: a partition whose trips have no room gathers at
// most a mailbox's worth of requests; then its mailbox waits, full, and
// so do callers, as for a partition in memory. Before, it took every
// request sent meanwhile, however many.
func TestGatheredIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, l, st := setUp(t, 1000, 4, storetable.FailClosed)
		go l.run()
		defer stop(p, st)
		var wg sync.WaitGroup
		var allowed atomic.Int64
		for i := range 22 {
			wg.Go(func() {
				if d, err := p.AllowN(context.Background(), fmt.Sprint("k", i), 1); err == nil && d.Allowed {
					allowed.Add(1)
				}
			})
			if i < 2 {
				synctest.Wait() // out at once, alone
			}
		}
		synctest.Wait()
		assert.Equal(t, 4, p.Queued(), "four gathered, and four in the mailbox, full")
		st.mu.Lock()
		st.held = false
		st.mu.Unlock()
		st.release <- struct{}{} // a trip lands: the four gathered go out
		synctest.Wait()
		assert.Len(t, st.callsOf()[2], 4)
		st.release <- struct{}{}
		wg.Wait()
		assert.EqualValues(t, 22, allowed.Load())
	})
}

// TestChoresTakeTurnsWithGathered: under a load that keeps both trips
// busy and requests gathered at every landing, the partition's own work
// (a line's head asked, the quota an AllowQuota's grant waits for) still
// goes out, taking turns with the gathered requests. Before, the gathered
// requests took every free trip: six landings went by and the head was
// never asked, and AllowQuota never returned.
func TestChoresTakeTurnsWithGathered(t *testing.T) {
	for _, c := range []struct {
		name    string
		call    func(p *actor.Partition)
		granted bool // the call's grant must land before its chore is made
	}{
		{"a line's head", func(p *actor.Partition) { _, _ = p.WaitN(context.Background(), "w", 1) }, false},
		{"a grant's quota", func(p *actor.Partition) {
			var q actor.Quota
			_, _ = p.AllowQuota(context.Background(), "w", 1, &q)
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, l, st := setUp(t, 1000, 64, storetable.FailClosed)
				go l.run()
				var wg sync.WaitGroup
				defer func() {
					stop(p, st)
					wg.Wait()
				}()
				allow := func(key string) { wg.Go(func() { _, _ = p.AllowN(context.Background(), key, 1) }) }
				for i := range 2 {
					allow(fmt.Sprint("single", i))
					synctest.Wait() // both trips out
				}
				done := make(chan struct{})
				wg.Go(func() {
					c.call(p)
					close(done)
				})
				synctest.Wait()
				if c.granted {
					for range 2 { // the grant goes out in the first trip free, and lands
						allow("more")
						synctest.Wait()
						st.release <- struct{}{}
						synctest.Wait()
					}
				}
				asked := 0
				for i := range 6 {
					allow(fmt.Sprint("g", i))
					synctest.Wait()          // gathered: no room
					st.release <- struct{}{} // a trip lands
					synctest.Wait()
					calls := st.callsOf()
					if slices.Contains(st.keysOf(len(calls)-1), "w") {
						asked++
					}
				}
				assert.Positive(t, asked, "six trips landed: the partition's own work on w went out")
				st.mu.Lock()
				st.held = false
				st.mu.Unlock()
				st.release <- struct{}{}
				st.release <- struct{}{}
				synctest.Wait()
				select {
				case <-done:
				default:
					t.Fatal("the call on w never returned")
				}
			})
		})
	}
}

// TestMaxTripsOutAlone: a partition has up to MaxTrips round trips out at
// once, each request alone under a light load, so that across a network
// none waits for another's trip to land; the request after them is
// gathered for the next.
func TestMaxTripsOutAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, l, st := setUp(t, 1000, 64, storetable.FailClosed)
		l.trips = newTrips(MaxTrips)
		go l.run()
		defer stop(p, st)
		var wg sync.WaitGroup
		for i := range MaxTrips + 1 {
			wg.Go(func() {
				d, err := p.AllowN(context.Background(), fmt.Sprint("k", i), 1)
				assert.NoError(t, err)
				assert.True(t, d.Allowed)
			})
			synctest.Wait()
			if i < MaxTrips {
				require.Len(t, st.callsOf(), i+1, "out at once, alone")
			}
		}
		require.Len(t, st.callsOf(), MaxTrips, "no room: gathered")
		st.release <- struct{}{}
		synctest.Wait()
		require.Len(t, st.callsOf(), MaxTrips+1, "a trip landed: the gathered request goes")
		for range MaxTrips {
			st.release <- struct{}{}
		}
		wg.Wait()
	})
}
