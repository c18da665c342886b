// Command pipeline runs two pipeline workers on the real clock, for many
// tenants, and prints what each tenant got per second.
//
// The first worker must not drop work: it shapes its stream with
// pipeline.Throttle, so a tenant that sends a burst has it spread out at
// its rate, and a quiet tenant behind it is never held up. The second
// sheds what is over the limit: it polices its stream with
// pipeline.Police, which decides what is ready in one AllowBatch and
// passes every event on with its decision.
//
//	go run ./examples/pipeline
//	go run ./examples/pipeline -for 5s -rate 20
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"text/tabwriter"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/pipeline"
)

// event is one unit of work for a tenant.
type event struct {
	tenant string
	at     time.Time // when it was sent
}

// tenants send bursts of these sizes to the shaper, and events at these
// shares of the traffic to the policer.
var tenants = []struct {
	name  string
	burst int // events sent at once to the shaper
	share int // events in each round sent to the policer
}{{"acme", 30, 8}, {"globex", 12, 2}, {"initech", 3, 1}}

func main() {
	runFor := flag.Duration("for", 3*time.Second, "how long the policed stream runs")
	rate := flag.Int("rate", 10, "events per second, per tenant")
	flag.Parse()
	ctx := context.Background()

	r, err := chanlimit.New(chanlimit.Config{Limit: *rate, Window: time.Second, Burst: *rate / 2})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	fmt.Printf("Throttle: each tenant's burst, shaped to %d a second (burst %d); events out per second since the start\n", *rate, *rate/2)
	start := time.Now()
	in := make(chan event)
	go func() {
		defer close(in)
		for _, t := range tenants {
			for range t.burst {
				in <- event{t.name, time.Now()}
			}
		}
	}()
	shaped := newTable()
	for res := range pipeline.Throttle(ctx, r, in, func(e event) string { return e.tenant }, pipeline.Options[event]{}) {
		if res.Err != nil {
			log.Fatal(res.Err)
		}
		shaped.add(res.Item.tenant, time.Since(start), true)
	}
	shaped.print()

	// A second router: the policed stream has a quota of its own.
	p, err := chanlimit.New(chanlimit.Config{Limit: *rate, Window: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	fmt.Printf("\nPolice: a steady stream, %d a second allowed per tenant; allowed/denied per second\n", *rate)
	start = time.Now()
	in = make(chan event, 64)
	go func() {
		defer close(in)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for time.Since(start) < *runFor {
			<-tick.C
			for _, t := range tenants {
				for range t.share {
					in <- event{t.name, time.Now()}
				}
			}
		}
	}()
	policed := newTable()
	for res := range pipeline.Police(ctx, p, in, func(e event) string { return e.tenant }, pipeline.Options[event]{}) {
		if res.Err != nil {
			log.Fatal(res.Err)
		}
		policed.add(res.Item.tenant, res.Item.at.Sub(start), res.Decision.Allowed)
	}
	policed.print()
}

// table counts events per tenant per second.
type table struct {
	allowed, denied map[string][]int
	seconds         int
	both            bool
}

func newTable() *table {
	return &table{allowed: map[string][]int{}, denied: map[string][]int{}}
}

func (t *table) add(tenant string, since time.Duration, allowed bool) {
	s := int(since / time.Second)
	t.seconds = max(t.seconds, s+1)
	count := t.allowed
	if !allowed {
		count, t.both = t.denied, true
	}
	for len(count[tenant]) <= s {
		count[tenant] = append(count[tenant], 0)
	}
	count[tenant][s]++
}

func (t *table) print() {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "tenant\t")
	for s := range t.seconds {
		fmt.Fprintf(w, "%ds-%ds\t", s, s+1)
	}
	fmt.Fprintln(w)
	for _, tn := range tenants {
		fmt.Fprintf(w, "%s\t", tn.name)
		for s := range t.seconds {
			cell := fmt.Sprint(at(t.allowed[tn.name], s))
			if t.both {
				cell += fmt.Sprintf("/%d", at(t.denied[tn.name], s))
			}
			fmt.Fprintf(w, "%s\t", cell)
		}
		fmt.Fprintln(w)
	}
	w.Flush()
}

// at returns counts[s], or 0.
func at(counts []int, s int) int {
	if s < len(counts) {
		return counts[s]
	}
	return 0
}
