package chanlimit_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// registered is every algorithm registered when the package starts, before
// any test registers one of its own: package variables are set before init
// functions run.
var registered = chanlimit.RegisteredAlgorithms()

// TestConformance runs every check below over every registered algorithm,
// through a router on a fake clock.
func TestConformance(t *testing.T) {
	checks := []struct {
		name  string
		check func(t *testing.T, algorithm string)
	}{
		{"KeysAreIsolated", keysAreIsolated},
		{"AllOrNothing", allOrNothing},
		{"RefusedCallsChangeNothing", refusedCallsChangeNothing},
		{"CapacityErrors", capacityErrors},
		{"RetryAfterIsExact", retryAfterIsExact},
		{"ResetAfterIsExact", resetAfterIsExact},
		{"NoDoubleCounts", noDoubleCounts},
		{"PeekAgreesAndChangesNothing", peekAgreesAndChangesNothing},
		{"ResetDrops", resetDrops},
		{"JumpBackwards", jumpBackwards},
		{"BatchMatchesSequential", batchMatchesSequential},
		{"KeysVanishWhenUntouched", keysVanishWhenUntouched},
		{"RestoreAnswersAsTheOriginal", restoreAnswersAsTheOriginal},
	}
	require.NotEmpty(t, registered)
	for _, algorithm := range registered {
		for _, c := range checks {
			t.Run(algorithm+"/"+c.name, func(t *testing.T) { c.check(t, algorithm) })
		}
	}
}

const capacity = 3 // Limit 3 per second, no Burst, for every algorithm

func conformanceRouter(t *testing.T, algorithm string) (*chanlimit.Router, func(time.Duration)) {
	r, clk := newRouter(t, chanlimit.Config{Algorithm: algorithm, Limit: capacity, Window: time.Second, Partitions: 4})
	return r, clk.Advance
}

// twinRouters returns two routers of algorithm whose clocks move together.
func twinRouters(t *testing.T, algorithm string) (a, b *chanlimit.Router, advance func(time.Duration)) {
	a, advanceA := conformanceRouter(t, algorithm)
	b, advanceB := conformanceRouter(t, algorithm)
	return a, b, func(d time.Duration) { advanceA(d); advanceB(d) }
}

func allowN(t *testing.T, r *chanlimit.Router, key string, n int) chanlimit.Decision {
	t.Helper()
	d, err := r.AllowN(context.Background(), key, n)
	require.NoError(t, err, "AllowN(%q, %d)", key, n)
	return d
}

func keysAreIsolated(t *testing.T, algorithm string) {
	r, _ := conformanceRouter(t, algorithm)
	require.True(t, allowN(t, r, "a", capacity).Allowed)
	require.False(t, allowN(t, r, "a", 1).Allowed)
	for _, key := range []string{"", "b", "A", "a ", "ключ", strings.Repeat("a", 4096)} {
		d := allowN(t, r, key, capacity)
		assert.True(t, d.Allowed, "key %.10q is untouched by a", key)
	}
}

func allOrNothing(t *testing.T, algorithm string) {
	r, _ := conformanceRouter(t, algorithm)
	d := allowN(t, r, "k", 2)
	require.True(t, d.Allowed)
	assert.Equal(t, 1, d.Remaining)
	d = allowN(t, r, "k", 2)
	assert.False(t, d.Allowed, "2 asked, 1 left: nothing is taken")
	assert.Equal(t, 1, d.Remaining)
	d = allowN(t, r, "k", 1)
	assert.True(t, d.Allowed, "the 1 left is still there")
	assert.Equal(t, 0, d.Remaining)
}

// refusedCallsChangeNothing plays one random schedule on two routers; one of
// them also gets calls that are denied or refused. Every call both get must
// be answered the same.
func refusedCallsChangeNothing(t *testing.T, algorithm string) {
	plain, noisy, advance := twinRouters(t, algorithm)
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for i := range 300 {
		advance(time.Duration(rng.IntN(4)) * 100 * time.Millisecond)
		key := []string{"x", "y"}[rng.IntN(2)]
		n := 1 + rng.IntN(capacity)

		want := allowN(t, plain, key, n)
		got := allowN(t, noisy, key, n)
		require.Equal(t, want, got, "call %d: AllowN(%q, %d)", i, key, n)

		// Noise on the noisy router only: refused calls, and a call that
		// asks for one more than is left, which is denied.
		_, err := noisy.AllowN(ctx, key, 0)
		require.ErrorIs(t, err, chanlimit.ErrInvalidCount)
		_, err = noisy.AllowN(ctx, key, capacity+1)
		require.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)
		if left := got.Remaining; left < capacity {
			require.False(t, allowN(t, noisy, key, left+1).Allowed)
		}
	}
}

func capacityErrors(t *testing.T, algorithm string) {
	r, _ := conformanceRouter(t, algorithm)
	ctx := context.Background()
	for _, n := range []int{0, -1} {
		_, err := r.AllowN(ctx, "k", n)
		assert.ErrorIs(t, err, chanlimit.ErrInvalidCount, "n = %d", n)
	}
	_, err := r.AllowN(ctx, "k", capacity+1)
	assert.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)
	d := allowN(t, r, "k", capacity)
	assert.True(t, d.Allowed, "n equal to the capacity is allowed on an untouched key")
	assert.Equal(t, 0, d.Remaining)
	assert.Equal(t, capacity, d.Limit)
}

func retryAfterIsExact(t *testing.T, algorithm string) {
	r, advance := conformanceRouter(t, algorithm)
	for _, n := range []int{1, 2, 3} {
		key := strings.Repeat("k", n)
		allowN(t, r, key, 1)
		advance(123456789)
		allowN(t, r, key, 2)
		advance(5)
		d := allowN(t, r, key, n)
		require.False(t, d.Allowed)
		require.Positive(t, d.RetryAfter)
		advance(d.RetryAfter - 1)
		require.False(t, allowN(t, r, key, n).Allowed, "n = %d: allowed 1ns before RetryAfter %v", n, d.RetryAfter)
		advance(1)
		require.True(t, allowN(t, r, key, n).Allowed, "n = %d: denied at RetryAfter %v", n, d.RetryAfter)
	}
}

// resetAfterIsExact: at now + ResetAfter the key decides like a key never
// seen, and a nanosecond earlier it does not.
func resetAfterIsExact(t *testing.T, algorithm string) {
	use := func(r *chanlimit.Router, advance func(time.Duration)) chanlimit.Decision {
		allowN(t, r, "k", 1)
		advance(333 * time.Millisecond)
		return allowN(t, r, "k", 1)
	}
	early, advanceEarly := conformanceRouter(t, algorithm)
	d := use(early, advanceEarly)
	require.Positive(t, d.ResetAfter)
	advanceEarly(d.ResetAfter - 1)
	assert.False(t, likeNeverSeen(t, early, advanceEarly, "k"), "untouched 1ns before ResetAfter %v", d.ResetAfter)

	onTime, advanceOnTime := conformanceRouter(t, algorithm)
	use(onTime, advanceOnTime)
	advanceOnTime(d.ResetAfter)
	assert.True(t, likeNeverSeen(t, onTime, advanceOnTime, "k"), "not untouched at ResetAfter %v", d.ResetAfter)
}

// likeNeverSeen reports whether key decides a few probing requests (the
// whole capacity now, then single units half a Window apart) as a key never
// seen does at the same instants.
func likeNeverSeen(t *testing.T, r *chanlimit.Router, advance func(time.Duration), key string) bool {
	t.Helper()
	for i, n := range []int{capacity, 1, 1, 1} {
		if i > 0 {
			advance(500 * time.Millisecond)
		}
		if allowN(t, r, key, n) != allowN(t, r, "never-seen-"+key, n) {
			return false
		}
	}
	return true
}

// noDoubleCounts: with time frozen, 64 goroutines hammering one key are
// allowed exactly the capacity, and other keys are unaffected.
func noDoubleCounts(t *testing.T, algorithm string) {
	const limit = 1000
	r, _ := newRouter(t, chanlimit.Config{Algorithm: algorithm, Limit: limit, Window: time.Second, Partitions: 4})
	var (
		units atomic.Int64
		wg    sync.WaitGroup
	)
	for g := range 64 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 50 {
				n := 1 + rng.IntN(3)
				d, err := r.AllowN(context.Background(), "hot", n)
				if err != nil {
					t.Errorf("AllowN: %v", err)
					return
				}
				if d.Allowed {
					units.Add(int64(n))
				}
			}
		})
	}
	wg.Wait()
	allowed := int(units.Load())
	assert.LessOrEqual(t, allowed, limit)
	assert.Greater(t, allowed, limit-3, "64 × 50 requests of 1 to 3 leave less than 3 units")
	d := allowN(t, r, "hot", limit)
	assert.Equal(t, limit, allowed+d.Remaining, "units allowed + units left = capacity: nothing counted twice, nothing lost")
	assert.True(t, allowN(t, r, "cold", limit).Allowed, "another key is unaffected")

	// Exactly the capacity when every request is for one unit.
	var ones atomic.Int64
	for range 64 {
		wg.Go(func() {
			for range 20 {
				if r.Allow("ones") {
					ones.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(limit), ones.Load())
}

// peekAgreesAndChangesNothing: on a random schedule, Peek answers what the
// AllowN right after it answers; a router that only peeks stays untouched.
func peekAgreesAndChangesNothing(t *testing.T, algorithm string) {
	r, advance := conformanceRouter(t, algorithm)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		advance(time.Duration(rng.IntN(5)) * 77 * time.Millisecond)
		n := 1 + rng.IntN(capacity)
		peek, err := r.Peek(ctx, "k", n)
		require.NoError(t, err)
		require.Equal(t, peek, allowN(t, r, "k", n), "call %d: Peek(%d) then AllowN(%d)", i, n, n)
	}

	fresh, _ := conformanceRouter(t, algorithm)
	for range 10 {
		for n := 1; n <= capacity; n++ {
			d, err := fresh.Peek(ctx, "unseen", n)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Equal(t, capacity-n, d.Remaining)
		}
	}
	_, err := fresh.Peek(ctx, "unseen", 0)
	assert.ErrorIs(t, err, chanlimit.ErrInvalidCount)
	_, err = fresh.Peek(ctx, "unseen", capacity+1)
	assert.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)
	assert.Equal(t, allowN(t, r, "other", capacity), allowN(t, fresh, "unseen", capacity),
		"after all those Peeks the key decides like an untouched one")
}

// resetDrops: a Reset key decides like one never seen; Reset of an unseen
// key is fine.
func resetDrops(t *testing.T, algorithm string) {
	r, advance := conformanceRouter(t, algorithm)
	ctx := context.Background()
	allowN(t, r, "k", capacity)
	advance(400 * time.Millisecond)
	require.False(t, allowN(t, r, "k", capacity).Allowed)
	require.NoError(t, r.Reset(ctx, "k"))
	assert.Equal(t, allowN(t, r, "never-seen", capacity), allowN(t, r, "k", capacity))
	assert.NoError(t, r.Reset(ctx, "unseen"))
}

// jumpBackwards: a clock that steps back an hour grants nothing, and locks
// nobody out: the wait it was told before the step is still the wait.
func jumpBackwards(t *testing.T, algorithm string) {
	r, advance := conformanceRouter(t, algorithm)
	allowN(t, r, "k", capacity)
	advance(100 * time.Millisecond)
	before := allowN(t, r, "k", 1)
	require.False(t, before.Allowed)

	advance(-time.Hour)
	after := allowN(t, r, "k", 1)
	assert.Equal(t, before, after, "the step back counts as no time: nothing granted, nothing owed")
	advance(after.RetryAfter - 1)
	assert.False(t, allowN(t, r, "k", 1).Allowed)
	advance(1)
	assert.True(t, allowN(t, r, "k", 1).Allowed, "allowed once the wait told before the step has passed")
}
