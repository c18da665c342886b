// Command quickstart runs concurrent clients against a few keys under each
// built-in algorithm, on the real clock, and prints what each key was
// allowed and denied. However hard a key is pushed, it gets about the same:
// the limit is per key, not per client.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -for 5s -limit 50
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/chanlimit/chanlimit"
)

// client is one key and how many goroutines push on it.
type client struct {
	key     string
	workers int
}

var clients = []client{{"alice", 1}, {"bob", 4}, {"carol", 16}}

type tally struct{ allowed, denied atomic.Int64 }

func main() {
	runFor := flag.Duration("for", 2*time.Second, "how long the clients run")
	limit := flag.Int("limit", 20, "requests allowed per window, per key")
	window := flag.Duration("window", time.Second, "the window")
	every := flag.Duration("every", 5*time.Millisecond, "how often each worker asks")
	flag.Parse()

	algorithms := chanlimit.RegisteredAlgorithms()
	results := make([][]*tally, len(algorithms))
	var wg sync.WaitGroup
	for i, algorithm := range algorithms {
		r, err := chanlimit.New(chanlimit.Config{Algorithm: algorithm, Limit: *limit, Window: *window})
		if err != nil {
			log.Fatal(err)
		}
		defer r.Close()
		results[i] = make([]*tally, len(clients))
		for j, c := range clients {
			t := new(tally)
			results[i][j] = t
			for range c.workers {
				wg.Go(func() { push(r, c.key, t, *every, *runFor) })
			}
		}
	}
	wg.Wait()

	fmt.Printf("%d per %v per key; each worker asks every %v for %v\n\n", *limit, *window, *every, *runFor)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "algorithm\tkey\tworkers\tallowed\tdenied\tallowed/s\t")
	for i, algorithm := range algorithms {
		for j, c := range clients {
			t := results[i][j]
			allowed := t.allowed.Load()
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%.1f\t\n", algorithm, c.key, c.workers,
				allowed, t.denied.Load(), float64(allowed)/runFor.Seconds())
		}
	}
	w.Flush()
	fmt.Printf("\nEvery key gets the same however many workers push on it. The buckets\n"+
		"(token_bucket, gcra, leaky_bucket) let a full bucket of %d through at once,\n"+
		"then %d per %v; the windows let %d through per %v (the counter a little\n"+
		"less or more, by its estimate). leaky_bucket admits what token_bucket does\n"+
		"but tells each request how long to wait for its turn (Decision.Delay).\n",
		*limit, *limit, *window, *limit, *window)
}

// push asks for one unit on key every tick until runFor has passed.
func push(r *chanlimit.Router, key string, t *tally, every, runFor time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	stop := time.After(runFor)
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if r.Allow(key) {
				t.allowed.Add(1)
			} else {
				t.denied.Add(1)
			}
		}
	}
}
