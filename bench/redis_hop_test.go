package bench

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkRedisHop: the floor under a router's latency through Redis, at
// one caller. A router makes its round trips off its callers' goroutines
// (a round trip never runs on the partition goroutine, and a caller whose
// ctx ends must be able to leave before its answer comes), so a caller
// waits on a channel while another goroutine waits on the network.
// hop=none is a GET made by its caller; hop=one the same GET made by a
// goroutine that takes the caller's key over a channel and answers over
// another; hop=two has one more goroutine between them that passes the
// key on and the answer back, as a router's partition does. No limiter is
// measured: the gaps are what the Go runtime charges for hand-offs around
// a wait on the network on this machine (with a P idle, each wakes a
// thread to run it, which competes for the CPUs with Redis when they
// share them).
func BenchmarkRedisHop(b *testing.B) {
	ks := keys(redisKeys)
	for _, hop := range []string{"none", "one", "two"} {
		b.Run("hop="+hop, func(b *testing.B) {
			client := redis.NewClient(&redis.Options{Addr: redisAddr(b)})
			defer client.Close()
			l := &redisLimiter{allow: func(ctx context.Context, key string) (bool, error) { return get(ctx, client, key) }, client: client}
			switch hop { // the deferred stops run outermost first
			case "one":
				defer handOff(l)()
			case "two":
				defer handOff(l)()
				defer handOff(l)()
			}
			for _, k := range ks[:256] { // the connection and the path, warm
				if _, err := l.allow(context.Background(), k); err != nil {
					b.Fatal(err)
				}
			}
			reportCost(b, client, func() { benchRedis(b, l, ks, 1) })
		})
	}
}

// get makes one GET of key, which holds nothing: a round trip to Redis
// and back, and a "yes".
func get(ctx context.Context, client *redis.Client, key string) (bool, error) {
	if err := client.Get(ctx, key).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	return true, nil
}

// handOff puts a goroutine between l's callers and l.allow as it was: it
// takes each caller's key over an unbuffered channel, decides it by that
// allow, and answers on the caller's reply channel. It returns the function
// that stops the goroutine.
func handOff(l *redisLimiter) (stop func()) {
	type ask struct {
		key   string
		reply chan error
	}
	next := l.allow
	asks := make(chan ask)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for a := range asks {
			_, err := next(context.Background(), a.key)
			a.reply <- err
		}
	}()
	l.allow = func(ctx context.Context, key string) (bool, error) {
		a := ask{key, make(chan error, 1)}
		asks <- a
		return true, <-a.reply
	}
	return func() { close(asks); <-done }
}
