package actor_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

// allowance is a Table of its own: each key may take 3 units, ever. It
// shows what a partition asks of its keys; only the partition's goroutine
// calls it, so it needs no lock.
type allowance struct{ used map[string]int }

const allowed = 3

// errTooMany is the answer to more than a key may ever take: an error, not
// a denial, since no wait would ever grant it.
var errTooMany = errors.New("more than a key's allowance")

// AllowN takes n units if key has them left.
func (a *allowance) AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	err := a.PeekN(key, now, n, d)
	if err == nil && d.Allowed {
		a.used[key] += n
	}
	return err
}

// PeekN writes into d what AllowN would answer, taking nothing.
func (a *allowance) PeekN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if n > allowed {
		*d = algorithms.Decision{}
		return errTooMany
	}
	left := allowed - a.used[key]
	*d = algorithms.Decision{Allowed: n <= left, Limit: allowed, Remaining: left, Policy: "allowance"}
	if d.Allowed {
		d.Remaining -= n
	} else {
		d.RetryAfter = math.MaxInt64 // never
	}
	return nil
}

// Refund gives units back: the partition gives back a grant whose caller
// left with it too.
func (a *allowance) Refund(key string, now time.Duration, n int) error {
	if used, ok := a.used[key]; ok {
		a.used[key] = max(used-n, 0)
	}
	return nil
}

func (a *allowance) Reset(key string) { delete(a.used, key) }

// Expire drops nothing: a key's allowance never comes back.
func (a *allowance) Expire(time.Duration, int) int { return 0 }

// Ahead makes allowance a Foreseer, so that a WaitN whose deadline its
// grant would pass is refused at once: a line's requests are granted at
// once while the key has enough left, and never once it has not.
func (a *allowance) Ahead(key string, now time.Duration, ns []int) (at, free time.Duration, ok bool, err error) {
	left := allowed - a.used[key]
	for _, n := range ns {
		if n <= allowed { // a request above the allowance is passed by
			left -= n
		}
	}
	if left < 0 {
		return math.MaxInt64, math.MaxInt64, true, nil
	}
	return now, math.MaxInt64, true, nil // a key's allowance never comes back
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

// TestATableOfYourOwnWithWaiters: with allowance, the partition keeps
// WaitN's promises: a batch does not pass a waiter, a request above the
// allowance fails at once, and a wait its deadline would pass is refused
// at once.
func TestATableOfYourOwnWithWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		p := actor.Start(&allowance{used: map[string]int{}}, clk, clk.Now(), 16, 0)
		defer func() { p.Stop(); <-p.Done() }()
		ctx := context.Background()
		_, err := p.AllowN(ctx, "ann", 3)
		require.NoError(t, err)
		waited := make(chan error, 1)
		go func() {
			_, err := p.WaitN(ctx, "ann", 2)
			waited <- err
		}()
		synctest.Wait() // in line
		require.NoError(t, p.Refund(ctx, "ann", 1))
		batch := []actor.Item{{Key: "ann", N: 1}}
		pending, err := p.SendBatch(ctx, &batch)
		require.NoError(t, err)
		require.NoError(t, pending.Wait(ctx))
		assert.False(t, batch[0].D.Allowed, "the unit is the waiter's line's")

		_, err = p.WaitN(ctx, "bob", 4)
		assert.ErrorIs(t, err, errTooMany, "at once")
		short, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err = p.WaitN(short, "ann", 1)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "at once: the grant never comes")

		require.NoError(t, p.Refund(ctx, "ann", 1))
		synctest.Wait()
		select {
		case err := <-waited:
			require.NoError(t, err, "granted once ann had 2 again")
		default:
			t.Fatal("the waiter was not granted")
		}
	})
}
