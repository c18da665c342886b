package redislimit_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/redislimit"
)

// decidesSent is a Store that counts its Decide calls.
type decidesSent struct {
	chanlimit.Store
	n atomic.Int64
}

func (s *decidesSent) Decide(ctx context.Context, ops []chanlimit.StoreOp) {
	s.n.Add(1)
	s.Store.Decide(ctx, ops)
}

// pipelinesSent counts a client's pipelines.
type pipelinesSent struct{ n atomic.Int64 }

func (h *pipelinesSent) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelinesSent) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelinesSent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestPartitionsShareRoundTrips: two routers of 16 partitions each, as
// on machines of 16 cores, each on a store with one round trip out at a
// time, 64 goroutines each over 48 keys, Limit 5 per hour on each: the
// partitions' Decides go together, fewer round trips than Decides, and
// exactly 5 are allowed on each key in all.
func TestPartitionsShareRoundTrips(t *testing.T) {
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			pre := prefix(t)
			const keys, limit = 48, 5
			var allowed [keys]atomic.Int64
			var wg sync.WaitGroup
			var decides []*decidesSent
			var pipelines []*pipelinesSent
			for range 2 {
				client := clientOf(t, name)
				hook := &pipelinesSent{}
				client.AddHook(hook)
				pipelines = append(pipelines, hook)
				st, err := redislimit.NewStore(client, redislimit.Options{Prefix: pre, RoundTrips: 1})
				require.NoError(t, err)
				sent := &decidesSent{Store: st}
				decides = append(decides, sent)
				r, err := chanlimit.New(chanlimit.Config{Limit: limit, Window: time.Hour, Store: sent, Partitions: 16})
				require.NoError(t, err)
				defer r.Close()
				for g := range 64 {
					wg.Go(func() {
						for i := range 2 * keys {
							k := (g + i) % keys
							d, err := r.AllowN(context.Background(), fmt.Sprint("k", k), 1)
							if !assert.NoError(t, err) {
								return
							}
							if d.Allowed {
								allowed[k].Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			for k := range allowed {
				assert.EqualValues(t, limit, allowed[k].Load(), "key %d", k)
			}
			for i := range decides {
				d, p := decides[i].n.Load(), pipelines[i].n.Load()
				t.Logf("router %d: %d Decides in %d round trips", i, d, p)
				assert.Less(t, p, d, "Decides went together")
			}
		})
	}
}

// TestNewStoreRefusesRoundTripsOutOfRange: RoundTrips below 0 or above
// MaxFixedRoundTrips is an error (a store holds a token for each round
// trip it may have out: a number past any client's connections would
// only take time and memory); MaxFixedRoundTrips itself is made at once.
func TestNewStoreRefusesRoundTripsOutOfRange(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	_, err := redislimit.NewStore(c, redislimit.Options{RoundTrips: -1})
	require.ErrorContains(t, err, "RoundTrips is -1")
	_, err = redislimit.NewStore(c, redislimit.Options{RoundTrips: math.MaxInt})
	require.ErrorContains(t, err, fmt.Sprintf("RoundTrips is %d, above %d", math.MaxInt, redislimit.MaxFixedRoundTrips))
	s, err := redislimit.NewStore(c, redislimit.Options{RoundTrips: redislimit.MaxFixedRoundTrips})
	require.NoError(t, err)
	require.NotNil(t, s)
}
