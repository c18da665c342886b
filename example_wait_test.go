package chanlimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// A worker that must not drop work waits for its turn: WaitN returns once
// the key grants the units. On a fake clock the grant comes exactly when
// the clock reaches it.
func ExampleRouter_WaitN() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Clock: clk})
	defer r.Close()
	ctx := context.Background()

	r.AllowN(ctx, "tenant-a", 2) // the bucket is empty now
	granted := make(chan chanlimit.Decision)
	go func() {
		d, _ := r.WaitN(ctx, "tenant-a", 1) // due in 500ms
		granted <- d
	}()
	clk.BlockUntilContext(ctx, 1) // the partition's timer is set: the waiter is in line

	// While it waits, nobody passes it: a plain request is told the
	// wait it would have in line (behind it: 1s).
	d, _ := r.Peek(ctx, "tenant-a", 1)
	fmt.Println("Peek:", d.Allowed, d.RetryAfter)

	clk.Advance(500 * time.Millisecond)
	fmt.Println("WaitN:", (<-granted).Allowed)

	// A deadline the grant cannot meet fails at once, queueing nothing.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := r.WaitN(short, "tenant-a", 1)
	fmt.Println("deadline:", err != nil)
	// Output:
	// Peek: false 1s
	// WaitN: true
	// deadline: true
}

// One goroutine with many waits out: each Ticket waits in its key's line,
// as WaitN's callers do, with no goroutine of its own, and comes on ready
// once answered.
func ExampleRouter_StartWait() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second, Clock: clk})
	defer r.Close()
	ctx := context.Background()

	ready := make(chan *chanlimit.Ticket, 3) // room for every Ticket out
	for _, tenant := range []string{"a", "b", "c"} {
		r.Allow(tenant) // each tenant's unit is spent: each Ticket waits a second
		r.StartWait(ctx, tenant, 1, ready)
	}
	// A partition's timer is set: its Tickets are in line. (Another
	// partition may still be on its way to its own; its timer is then set
	// for the instant its line is due, and fires as soon as the clock has
	// reached it, whenever it is set.)
	clk.BlockUntilContext(ctx, 1)

	clk.Advance(time.Second)
	granted := map[string]bool{}
	for range 3 {
		tk := <-ready
		d, err := tk.Answer()
		granted[tk.Key()] = err == nil && d.Allowed
	}
	fmt.Println(granted)
	// Output:
	// map[a:true b:true c:true]
}
