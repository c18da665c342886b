package actor_test

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// allowance is a Table of its own: each key may take 3 units, ever. It
// shows what a partition asks of its keys; only the partition's goroutine
// calls it, so it needs no lock.
type allowance struct{ used map[string]int }

const allowed = 3

func (a *allowance) PeekN(key string, _ time.Duration, n int, d *algorithms.Decision) error {
	left := allowed - a.used[key]
	*d = algorithms.Decision{Allowed: n <= left, Limit: allowed, Remaining: left, Policy: "allowance"}
	if d.Allowed {
		d.Remaining -= n
	} else {
		d.RetryAfter = math.MaxInt64 // never
	}
	return nil
}

func (a *allowance) AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if a.PeekN(key, now, n, d); d.Allowed {
		a.used[key] += n
	}
	return nil
}

func (a *allowance) AllowTurn(key string, now time.Duration, n int, d *algorithms.Decision) error {
	return a.AllowN(key, now, n, d)
}

func (a *allowance) AllowEach(items []actor.Item, now time.Duration) {
	for i := range items {
		it := &items[i]
		it.Err = a.AllowN(it.Key, now, it.N, &it.D)
	}
}

func (a *allowance) Refund(key string, _ time.Duration, n int) error {
	a.used[key] = max(a.used[key]-n, 0)
	return nil
}

func (a *allowance) GiveBack(key string, now time.Duration, n int) error {
	return a.Refund(key, now, n)
}

func (a *allowance) Reset(key string) { delete(a.used, key) }

// It has no dry-run policies, foresees no line, keeps nothing that
// expires, and has nothing to finish if a goroutine ends.
func (a *allowance) DecideDry(string, time.Duration, int, bool) (bool, error) { return false, nil }
func (a *allowance) HasDryRun(string) bool                                    { return false }
func (a *allowance) Ahead(string, time.Duration, []int) (at, free time.Duration, ok bool, err error) {
	return 0, 0, false, nil
}
func (a *allowance) Pin(string)                    {}
func (a *allowance) Unpin(string)                  {}
func (a *allowance) Changed() (bool, []string)     { return false, nil }
func (a *allowance) Expire(time.Duration, int) int { return 0 }
func (a *allowance) Abandoned()                    {}
func (a *allowance) Resume(time.Duration)          {}

func (a *allowance) Quota(key string, now time.Duration, q *actor.Quota) (bool, error) {
	q.Set, q.Policies = onePolicy{}, q.Policies[:0]
	return false, nil // the partition tells the deciding policy's, from the decision
}

type onePolicy struct{}

func (onePolicy) Index(name string) int {
	if name == "allowance" {
		return 0
	}
	return -1
}

// A partition over a Table of its own: the partition serialises the
// requests of every caller, and the table decides them one at a time.
func Example_table() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := actor.Start(&allowance{used: map[string]int{}}, clk, clk.Now(), 16, 0)
	defer func() { p.Stop(); <-p.Done() }()
	ctx := context.Background()

	d, _ := p.AllowN(ctx, "ann", 2)
	fmt.Println(d.Allowed, d.Remaining)
	batch := []actor.Item{{Key: "ann", N: 1}, {Key: "ann", N: 1}, {Key: "bob", N: 3}}
	pending, _ := p.SendBatch(ctx, &batch) // one message, decided in order
	pending.Wait(ctx)
	for _, it := range batch {
		fmt.Println(it.Key, it.D.Allowed, it.D.Remaining)
	}
	p.Refund(ctx, "ann", 1)
	d, _ = p.AllowN(ctx, "ann", 1)
	fmt.Println("after a refund:", d.Allowed)
	// Output:
	// true 1
	// ann true 0
	// ann false 0
	// bob true 0
	// after a refund: true
}
