package actor_test

import (
	"context"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// states is a Table of one of package algorithms' rules, each key's state
// in a map: the least a partition needs. (A router's tables do more:
// they supervise the rule, forget idle keys, and keep their states inline;
// Example_table shows the optional interfaces.)
type states[S any] struct {
	rule algorithms.Machine[S]
	keys map[string]*S
}

func (t *states[S]) AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if n > t.rule.Capacity() {
		*d = algorithms.Decision{}
		return fmt.Errorf("%w: n = %d", actor.ErrExceedsCapacity, n)
	}
	s := t.keys[key]
	if s == nil {
		s = new(S) // untouched: held only once it is allowed something
	}
	if t.rule.AllowN(s, now, n, d); d.Allowed {
		t.keys[key] = s
	}
	return nil
}

func (t *states[S]) PeekN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if n > t.rule.Capacity() {
		*d = algorithms.Decision{}
		return fmt.Errorf("%w: n = %d", actor.ErrExceedsCapacity, n)
	}
	s := t.keys[key]
	if s == nil {
		s = new(S)
	}
	t.rule.PeekN(s, now, n, d)
	return nil
}

func (t *states[S]) Refund(key string, now time.Duration, n int) error {
	if s := t.keys[key]; s != nil {
		t.rule.Refund(s, now, n)
	}
	return nil
}

func (t *states[S]) Reset(key string)                    { delete(t.keys, key) }
func (t *states[S]) Expire(now time.Duration, _ int) int { return 0 } // keeps every key

// One partition: a goroutine that owns a table of keys, fed through its
// mailbox. Callers on any goroutine send it requests and read their
// answers; none of them touches the table. (A router starts one such
// partition per share of the keys, each with a table of its own.)
func Example() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	bucket, err := algorithms.NewTokenBucket(algorithms.Params{Limit: 2, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	table := &states[algorithms.TokenBucketState]{rule: bucket, keys: map[string]*algorithms.TokenBucketState{}}
	p := actor.Start(table, clk, clk.Now(), 16, 0)
	defer func() {
		p.Stop()   // answers what is queued, then the goroutine exits
		<-p.Done() // closed once it has
	}()

	ctx := context.Background()
	for range 3 {
		d, err := p.AllowN(ctx, "ann", 1) // a request by value; the answer on a reply channel
		fmt.Println(d.Allowed, d.RetryAfter, err)
	}

	// A caller that gives up takes nothing: its context is done before
	// its turn, so the partition skips it, or gives its grant back.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.AllowN(gone, "bob", 1)
	fmt.Println(err)
	d, _ := p.PeekN(ctx, "bob", 1) // what an AllowN would leave: 1 of 2, so bob's call took nothing
	fmt.Println("bob's remaining:", d.Remaining)

	clk.Advance(30 * time.Second) // the fake clock moves only when told
	d, _ = p.AllowN(ctx, "ann", 1)
	fmt.Println(d.Allowed)
	// Output:
	// true 0s <nil>
	// true 0s <nil>
	// false 30s <nil>
	// context canceled
	// bob's remaining: 1
	// true
}
