package chanlimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

func ExampleNew() {
	// A fake clock makes the example deterministic; leave Clock nil in
	// production for the real one.
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, err := chanlimit.New(chanlimit.Config{
		Algorithm: "token_bucket",
		Limit:     3, // 3 requests per second, in bursts of up to 3
		Window:    time.Second,
		Clock:     clk,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()

	for range 4 {
		fmt.Print(r.Allow("alice"), " ")
	}
	fmt.Println(r.Allow("bob"))

	clk.Advance(time.Second / 3) // 333,333,333ns: a hair short of a token
	fmt.Println(r.Allow("alice"))
	clk.Advance(time.Nanosecond)
	fmt.Println(r.Allow("alice"))
	// Output:
	// true true true false true
	// false
	// true
}

func ExampleNew_invalidConfig() {
	_, err := chanlimit.New(chanlimit.Config{Algorithm: "sliding_window_log", Limit: 10, Window: time.Minute, Burst: 20})
	fmt.Println(errors.Is(err, chanlimit.ErrInvalidConfig))
	fmt.Println(err)

	_, err = chanlimit.New(chanlimit.Config{Algorithm: "leaky", Limit: 10, Window: time.Minute})
	fmt.Println(errors.Is(err, chanlimit.ErrUnknownAlgorithm))
	// Output:
	// true
	// chanlimit: invalid config: Algorithm "sliding_window_log": algorithms: Burst: sliding_window_log takes no burst: its capacity is Limit (got Burst 20)
	// true
}

func ExampleRouter_AllowN() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := chanlimit.New(chanlimit.Config{Algorithm: "sliding_window_log", Limit: 5, Window: time.Minute, Clock: clk})
	defer r.Close()
	ctx := context.Background()

	d, _ := r.AllowN(ctx, "tenant-7", 4) // a batch of 4 items
	fmt.Printf("allowed=%t remaining=%d reset in %v\n", d.Allowed, d.Remaining, d.ResetAfter)

	clk.Advance(20 * time.Second)
	d, _ = r.AllowN(ctx, "tenant-7", 3) // all or nothing: 1 is left
	fmt.Printf("allowed=%t remaining=%d retry in %v\n", d.Allowed, d.Remaining, d.RetryAfter)

	clk.Advance(d.RetryAfter)
	d, _ = r.AllowN(ctx, "tenant-7", 3)
	fmt.Printf("allowed=%t remaining=%d\n", d.Allowed, d.Remaining)

	_, err := r.AllowN(ctx, "tenant-7", 6)
	fmt.Println(err)
	// Output:
	// allowed=true remaining=1 reset in 1m0s
	// allowed=false remaining=1 retry in 40s
	// allowed=true remaining=2
	// chanlimit: n exceeds capacity: n = 6, capacity 5
}

// greet is the code under test in Example_testingWithAFakeClock: a handler
// that answers 429 with a Retry-After once a user is over quota.
func greet(r *chanlimit.Router, user string) string {
	d, err := r.AllowN(context.Background(), user, 1)
	switch {
	case err != nil:
		return "503 " + err.Error()
	case !d.Allowed:
		return fmt.Sprintf("429 retry after %v", d.RetryAfter)
	}
	return "200 hello " + user
}

// Testing your own code: give the router a fake clock, then move time
// yourself. Nothing sleeps, and every run prints the same.
func Example_testingWithAFakeClock() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := chanlimit.New(chanlimit.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Minute, Clock: clk})

	fmt.Println(greet(r, "ann"))
	fmt.Println(greet(r, "ann"))
	fmt.Println(greet(r, "ann"))
	clk.Advance(45 * time.Second)
	fmt.Println(greet(r, "ann"))
	clk.Advance(15 * time.Second)
	fmt.Println(greet(r, "ann"))

	r.Close()
	fmt.Println(greet(r, "ann"))
	// Output:
	// 200 hello ann
	// 200 hello ann
	// 429 retry after 1m0s
	// 429 retry after 15s
	// 200 hello ann
	// 503 chanlimit: router closed
}

func ExampleRouter_Peek() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := chanlimit.New(chanlimit.Config{Algorithm: "fixed_window", Limit: 3, Window: time.Hour, Clock: clk})
	defer r.Close()
	ctx := context.Background()

	d, _ := r.Peek(ctx, "export-job", 3) // would a batch of 3 pass? nothing is taken
	fmt.Println(d.Allowed, d.Remaining)
	r.AllowN(ctx, "export-job", 2)
	d, _ = r.Peek(ctx, "export-job", 3)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)

	r.Reset(ctx, "export-job") // an operator lifts the limit
	d, _ = r.Peek(ctx, "export-job", 3)
	fmt.Println(d.Allowed)
	// Output:
	// true 0
	// false 1 1h0m0s
	// true
}

// A leaky bucket shapes instead of dropping: ten jobs arriving together are
// all admitted, each told when to start so that they leave 100ms apart.
func ExampleRouter_AllowN_leakyBucket() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := chanlimit.New(chanlimit.Config{Algorithm: "leaky_bucket", Limit: 10, Window: time.Second, Clock: clk})
	defer r.Close()

	for i := range 11 {
		d, _ := r.AllowN(context.Background(), "worker-pool", 1)
		if !d.Allowed {
			fmt.Printf("job %d: queue full, retry in %v\n", i, d.RetryAfter)
			continue
		}
		fmt.Printf("job %d: start in %v\n", i, d.Delay)
	}
	// Output:
	// job 0: start in 0s
	// job 1: start in 100ms
	// job 2: start in 200ms
	// job 3: start in 300ms
	// job 4: start in 400ms
	// job 5: start in 500ms
	// job 6: start in 600ms
	// job 7: start in 700ms
	// job 8: start in 800ms
	// job 9: start in 900ms
	// job 10: queue full, retry in 100ms
}

// A restart in the middle of a window: the state goes to a snapshot, and a
// new router (in a new process, say) restores it. The time the restart took
// counts, as it would have had the router kept running.
func ExampleRouter_Snapshot() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := chanlimit.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Minute, Clock: clk}
	ctx := context.Background()

	before, _ := chanlimit.New(cfg)
	before.Allow("alice")
	before.Allow("alice")
	var saved bytes.Buffer
	if err := before.Snapshot(ctx, &saved); err != nil {
		fmt.Println(err)
		return
	}
	before.Close()

	clk.Advance(20 * time.Second) // the restart
	after, _ := chanlimit.New(cfg)
	defer after.Close()
	if err := after.Restore(ctx, &saved); err != nil {
		fmt.Println(err) // errors.Is(err, chanlimit.ErrBadSnapshot): nothing was loaded
		return
	}
	d, _ := after.AllowN(ctx, "alice", 1)
	fmt.Println(d.Allowed, d.RetryAfter)

	st, _ := after.Stats(ctx)
	fmt.Println("keys held:", st.Keys)
	// Output:
	// false 40s
	// keys held: 1
}

// With MaxKeys, a flood of new keys is refused once the cap is reached,
// and no key held is forgiven.
func ExampleConfig_maxKeys() {
	r, _ := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Minute, MaxKeys: 2, Partitions: 1})
	defer r.Close()
	fmt.Println(r.Allow("a"), r.Allow("b"))
	_, err := r.AllowN(context.Background(), "c", 1)
	fmt.Println(errors.Is(err, chanlimit.ErrTooManyKeys))
	fmt.Println(r.Allow("a"), "(a keeps its used quota)")
	// Output:
	// true true
	// true
	// false (a keeps its used quota)
}

// Two limits on every key, 10 a second and 100 a minute, and a tenant on a
// bigger contract with its own.
func ExampleConfig_policies() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := chanlimit.New(chanlimit.Config{
		Policies: []chanlimit.Policy{
			{Name: "second", Limit: 10, Window: time.Second},
			{Name: "minute", Algorithm: "sliding_window_log", Limit: 100, Window: time.Minute},
		},
		Clock: clk,
	})
	defer r.Close()
	ctx := context.Background()
	show := func(d chanlimit.Decision) {
		fmt.Printf("allowed=%t by %q: remaining=%d retry in %v\n", d.Allowed, d.Policy, d.Remaining, d.RetryAfter)
	}

	d, _ := r.AllowN(ctx, "alice", 10) // a burst: the second's limit
	show(d)
	d, _ = r.AllowN(ctx, "alice", 1)
	show(d)
	for range 9 { // 10 a second for 9 seconds more: the minute's 100 are gone
		clk.Advance(time.Second)
		r.AllowN(ctx, "alice", 10)
	}
	clk.Advance(time.Second)
	d, _ = r.AllowN(ctx, "alice", 1)
	show(d)

	// An override: acme's own policies, until ClearOverride.
	r.SetOverride(ctx, "acme", chanlimit.Policy{Name: "second", Limit: 100, Window: time.Second})
	d, _ = r.AllowN(ctx, "acme", 50)
	show(d)
	// Output:
	// allowed=true by "second": remaining=0 retry in 0s
	// allowed=false by "second": remaining=0 retry in 100ms
	// allowed=false by "minute": remaining=0 retry in 50s
	// allowed=true by "second": remaining=50 retry in 0s
}
