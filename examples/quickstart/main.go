// Command quickstart runs concurrent clients against a few keys under each
// built-in algorithm, on the real clock, and prints what each key was
// allowed and denied. However hard a key is pushed, it gets about the same:
// the limit is per key, not per client. Then it runs the same clients
// under two policies at once, with an override for one key and a live
// change of the router's policies halfway through.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -for 5s -limit 50
package main

import (
	"context"
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
				wg.Go(func() {
					push(*every, *runFor, func() {
						if r.Allow(c.key) {
							t.allowed.Add(1)
						} else {
							t.denied.Add(1)
						}
					})
				})
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

	severalLimits(*limit, *window, *every, *runFor)
}

// severalLimits runs the clients against a router with two policies: the
// limit per window, and as much again per two windows; carol has an
// override of twice the limit per window; halfway through, the router's
// second policy is raised to twice the limit per two windows.
func severalLimits(limit int, window, every, runFor time.Duration) {
	perWindow := chanlimit.Policy{Name: "window", Limit: limit, Window: window}
	longer := chanlimit.Policy{Name: "longer", Algorithm: "sliding_window_log", Limit: limit, Window: 2 * window}
	r, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{perWindow, longer}})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if err := r.SetOverride(ctx, "carol", chanlimit.Policy{Name: "window", Limit: 2 * limit, Window: window}); err != nil {
		log.Fatal(err)
	}
	denials := make([]map[string]*atomic.Int64, len(clients)) // by the policy that decided
	allowed := make([]atomic.Int64, len(clients))
	var wg sync.WaitGroup
	for j, c := range clients {
		denials[j] = map[string]*atomic.Int64{"window": new(atomic.Int64), "longer": new(atomic.Int64)}
		for range c.workers {
			wg.Go(func() {
				push(every, runFor, func() {
					d, err := r.AllowN(ctx, c.key, 1)
					switch {
					case err != nil:
						log.Fatal(err)
					case d.Allowed:
						allowed[j].Add(1)
					default:
						denials[j][d.Policy].Add(1)
					}
				})
			})
		}
	}
	time.Sleep(runFor / 2) // the demo runs on the real clock
	longer.Limit = 2 * limit
	if err := r.SetPolicies(ctx, perWindow, longer); err != nil {
		log.Fatal(err)
	}
	wg.Wait()

	fmt.Printf("\nSeveral limits: %d per %v and %d per %v (raised to %d halfway); carol's override: %d per %v\n\n",
		limit, window, limit, 2*window, 2*limit, 2*limit, window)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "key\tworkers\tallowed\tdenied by window\tdenied by longer\t")
	for j, c := range clients {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t\n", c.key, c.workers, allowed[j].Load(),
			denials[j]["window"].Load(), denials[j]["longer"].Load())
	}
	w.Flush()
}

// push calls ask every tick until runFor has passed.
func push(every, runFor time.Duration, ask func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	stop := time.After(runFor)
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			ask()
		}
	}
}
