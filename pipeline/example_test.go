package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/pipeline"
)

// Police passes every event on with its decision: each tenant gets 2 a
// second here, and the rest are shed, in input order.
func ExamplePolice() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Clock: clk})
	defer r.Close()

	events := make(chan string, 5)
	for _, tenant := range []string{"acme", "acme", "globex", "acme", "globex"} {
		events <- tenant
	}
	close(events)
	tenant := func(e string) string { return e }
	for res := range pipeline.Police(context.Background(), r, events, tenant, pipeline.Options[string]{}) {
		fmt.Println(res.Item, res.Decision.Allowed, res.Decision.RetryAfter)
	}
	// Output:
	// acme true 0s
	// acme true 0s
	// globex true 0s
	// acme false 500ms
	// globex true 0s
}

// Throttle passes each event on once its tenant's quota admits it: the
// third of acme's waits for the clock, and globex's is not held back.
func ExampleThrottle() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Clock: clk})
	defer r.Close()
	ctx := context.Background()

	events := make(chan string, 4)
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		events <- tenant
	}
	close(events)
	tenant := func(e string) string { return e }
	out := pipeline.Throttle(ctx, r, events, tenant, pipeline.Options[string]{})
	for range 3 {
		res := <-out
		fmt.Println(res.Item, "at once")
	}
	clk.BlockUntilContext(ctx, 1) // acme's third waits in line
	clk.Advance(500 * time.Millisecond)
	for res := range out {
		fmt.Println(res.Item, "after 500ms:", res.Decision.Allowed)
	}
	// Unordered output:
	// acme at once
	// acme at once
	// globex at once
	// acme after 500ms: true
}
