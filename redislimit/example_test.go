package redislimit_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/redislimit"
)

// Two routers, as two instances of a service would be, each with its own
// client of one Redis: together they allow one quota. (.ci/redis sets
// REDIS_ADDR.)
func ExampleNewStore() {
	ctx := context.Background()
	prefix := fmt.Sprintf("example:%d:", time.Now().UnixNano()) // a fresh quota for each run
	var routers []*chanlimit.Router
	for range 2 {
		client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
		defer client.Close()
		st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix})
		if err != nil {
			panic(err)
		}
		r, err := chanlimit.New(chanlimit.Config{Limit: 3, Window: time.Minute, Store: st})
		if err != nil {
			panic(err)
		}
		defer r.Close()
		routers = append(routers, r)
	}
	for i := range 4 {
		d, err := routers[i%2].AllowN(ctx, "tenant-42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("instance %d: allowed %v, remaining %d\n", i%2+1, d.Allowed, d.Remaining)
	}
	// Output:
	// instance 1: allowed true, remaining 2
	// instance 2: allowed true, remaining 1
	// instance 1: allowed true, remaining 0
	// instance 2: allowed false, remaining 0
}
