// Command redis shows two routers, as two instances of a service would
// be, sharing one quota through Redis: each has its own client and its
// own Store, and together they allow exactly the quota once.
//
//	go run . -addr 127.0.0.1:6379
//
// It needs a running redis-server; .ci/redis starts one for it:
//
//	.ci/redis bash -c 'cd examples/redis && go run . -addr "$REDIS_ADDR"'
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/redislimit"
)

func main() {
	addr := flag.String("addr", envOr("REDIS_ADDR", "127.0.0.1:6379"), "the Redis server, host:port")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "redis example:", err)
		os.Exit(1)
	}
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// instance is one service instance: its own client, store and router.
type instance struct {
	client *redis.Client
	router *chanlimit.Router
}

func newInstance(addr, prefix string) (*instance, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix})
	if err != nil {
		client.Close()
		return nil, err
	}
	r, err := chanlimit.New(chanlimit.Config{Limit: 10, Window: time.Minute, Store: st})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &instance{client, r}, nil
}

func (in *instance) close() {
	in.router.Close()
	in.client.Close()
}

func run(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	probe := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	err := probe.Ping(ctx).Err()
	probe.Close()
	if err != nil {
		return fmt.Errorf("cannot reach Redis at %s (%v).\n"+
			"This example needs a running redis-server: start one (Debian: apt-get install redis-server)\n"+
			"and pass its address with -addr, or let the repository's script start one for it:\n"+
			"  .ci/redis bash -c 'cd examples/redis && go run . -addr \"$REDIS_ADDR\"'", addr, err)
	}

	// A prefix of this run's own, so that each run starts with a full quota.
	prefix := fmt.Sprintf("example:%d:", time.Now().UnixNano())
	var instances []*instance
	for range 2 {
		in, err := newInstance(addr, prefix)
		if err != nil {
			return err
		}
		defer in.close()
		// A first request connects and loads the script, so that both
		// instances start on an equal footing.
		if _, err := in.router.Peek(context.Background(), "warm-up", 1); err != nil {
			return err
		}
		instances = append(instances, in)
	}

	fmt.Println("quota: 10 requests per minute for tenant-42, shared by two instances")
	var total atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, in := range instances {
		var allowed atomic.Int64
		var each sync.WaitGroup
		for range 16 { // 16 concurrent requests per instance, 3 each
			each.Go(func() {
				<-start
				for range 3 {
					if in.router.Allow("tenant-42") {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Go(func() {
			each.Wait()
			fmt.Printf("instance %d: %2d of 48 requests allowed\n", i+1, allowed.Load())
			total.Add(allowed.Load())
		})
	}
	close(start)
	wg.Wait()
	fmt.Printf("together:   %2d allowed: exactly one quota\n", total.Load())
	d, err := instances[0].router.Peek(context.Background(), "tenant-42", 1)
	if err != nil {
		return err
	}
	fmt.Printf("the next request may come in %v\n", d.RetryAfter.Round(time.Second))
	if total.Load() != 10 {
		return fmt.Errorf("%d allowed in all, not 10", total.Load())
	}
	return nil
}
