package redislimit

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestHashSlot: the store's hash slots are the Cluster's own (CLUSTER
// KEYSLOT), hash tags included.
func TestHashSlot(t *testing.T) {
	addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
	if addrs == "" {
		t.Fatal("REDIS_CLUSTER_ADDRS is not set: run these tests through .ci/redis")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	defer cc.Close()
	for _, key := range []string{"", "a", "chanlimit:user-1", "{user}:1", "x{}y", "x{a}b{c}", "{", "}{", "a{b", "中文", fmt.Sprint(1 << 40)} {
		want, err := cc.ClusterKeySlot(context.Background(), key).Result()
		require.NoError(t, err)
		require.EqualValues(t, want, hashSlot(key), "%q", key)
	}
}
