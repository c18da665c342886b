package redislimit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/redislimit"
)

// TestSlotMoves: the hash slot of a key moves to another master of the
// Cluster mid-run (CLUSTER SETSLOT and MIGRATE, as redis-cli --cluster
// reshard does), and the router follows it (MOVED, ASK) with the key's
// state: the quota is taken exactly once.
func TestSlotMoves(t *testing.T) {
	ctx := context.Background()
	cc := cluster(t)
	st, err := redislimit.NewStore(cc, redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 10, Window: time.Hour, Store: st})
	require.NoError(t, err)
	defer r.Close()

	allowed := 0
	allow := func(times int) {
		for range times {
			d, err := r.AllowN(ctx, "moving", 1)
			require.NoError(t, err)
			if d.Allowed {
				allowed++
			}
		}
	}
	allow(4)

	// The masters, by address, and the one that holds the key's slot.
	key := st.Key("moving")
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	nodes := map[string]*redis.Client{}
	ids := map[string]string{}
	for _, addr := range strings.Split(env(t, "REDIS_CLUSTER_ADDRS"), ",") {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		nodes[addr] = c
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		require.NoError(t, err)
		ids[addr] = id
	}
	var from, to string
	for addr, c := range nodes {
		if c.Exists(ctx, key).Err() == nil { // the others answer MOVED
			from = addr
		}
	}
	require.Contains(t, nodes, from)
	for addr := range nodes {
		if addr != from {
			to = addr
			break
		}
	}
	src, dst := nodes[from], nodes[to]
	// Another key of the slot, as a Cluster shared with other tests may
	// hold: a reshard moves it too, or the slot cannot change hands.
	bystander := "{" + key + "}:bystander"
	require.NoError(t, src.Set(ctx, bystander, "x", time.Minute).Err())
	require.NoError(t, dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from]).Err())
	require.NoError(t, src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to]).Err())
	allow(2) // mid-migration: the key is still at the source
	host, port, _ := strings.Cut(to, ":")
	p, _ := strconv.Atoi(port)
	moving, err := src.ClusterGetKeysInSlot(ctx, int(slot), 1000).Result()
	require.NoError(t, err)
	require.Subset(t, moving, []string{key, bystander})
	for _, k := range moving { // the key, then (or first) the rest of the slot's: a key that expired meanwhile answers NOKEY
		require.NoError(t, src.Migrate(ctx, host, strconv.Itoa(p), k, 0, 5*time.Second).Err())
	}
	allow(2) // the source answers ASK: the key is at the destination
	for _, c := range nodes {
		require.NoError(t, c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to]).Err())
	}
	allow(6) // MOVED, then the new owner
	assert.Equal(t, 10, allowed, "exactly the quota, across the move")
	n, err := dst.Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the key's state moved with its slot")
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, s.StoreErrors)
}
