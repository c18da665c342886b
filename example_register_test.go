package chanlimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// cooldown is a rule of your own: a key may take up to Limit units at
// once, then nothing until Window has passed. Not safe for concurrent use:
// one partition goroutine owns each state.
type cooldown struct {
	limit  int
	window time.Duration
}

// cooldownState is one key's: when it may take again. The zero value, a
// key that never took anything, may take now.
type cooldownState struct{ until time.Duration }

func newCooldown(p algorithms.Params) (cooldown, error) {
	if err := p.Validate(); err != nil {
		return cooldown{}, err
	}
	return cooldown{p.Limit, p.Window}, nil
}

// Capacity is the most a key may take at once.
func (c cooldown) Capacity() int { return c.limit }

// AllowN lets n units through if the key is not cooling down, and starts
// its cooldown.
func (c cooldown) AllowN(s *cooldownState, now time.Duration, n int, d *chanlimit.Decision) {
	c.PeekN(s, now, n, d)
	if d.Allowed {
		s.until = now + c.window
	}
}

// PeekN says what AllowN would, and changes nothing.
func (c cooldown) PeekN(s *cooldownState, now time.Duration, n int, d *chanlimit.Decision) {
	wait := max(s.until-now, 0)
	*d = chanlimit.Decision{Allowed: wait == 0, Limit: c.limit, RetryAfter: wait, ResetAfter: wait}
	if d.Allowed {
		d.ResetAfter = c.window // Remaining stays 0: the key cools down
	}
}

// Refund gives back a grant made at now: the key no longer cools down.
func (c cooldown) Refund(s *cooldownState, now time.Duration, n int) { s.until = 0 }

// ResetAfter tells the router when a key is untouched again, so that it
// can let the key go then (algorithms.Expiring).
func (c cooldown) ResetAfter(s *cooldownState, now time.Duration) time.Duration {
	return max(s.until-now, 0)
}

func init() {
	// Register before any router names the rule; init is the usual place.
	if err := chanlimit.Register[cooldownState]("cooldown", newCooldown); err != nil {
		panic(err)
	}
}

func ExampleRegister() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, err := chanlimit.New(chanlimit.Config{Algorithm: "cooldown", Limit: 5, Window: time.Minute, Clock: clk})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	ctx := context.Background()

	for _, n := range []int{3, 1} {
		d, _ := r.AllowN(ctx, "export-job", n)
		fmt.Printf("take %d: allowed %v, retry after %v\n", n, d.Allowed, d.RetryAfter)
	}
	clk.Advance(time.Minute)
	d, _ := r.AllowN(ctx, "export-job", 5)
	fmt.Printf("take 5: allowed %v\n", d.Allowed)
	_, err = r.AllowN(ctx, "export-job", 6)
	fmt.Println(err)
	// Output:
	// take 3: allowed true, retry after 0s
	// take 1: allowed false, retry after 1m0s
	// take 5: allowed true
	// chanlimit: n exceeds capacity: n = 6, capacity 5
}
