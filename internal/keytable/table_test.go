package keytable

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

const (
	ms      = time.Millisecond
	s       = time.Second
	century = 100 * 365 * 24 * time.Hour
)

type (
	Decision = algorithms.Decision
	Params   = algorithms.Params
)

// must returns v, or panics with err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// builtins are the built-in rules, each for Params.
var builtins = map[string]func(Params) Rule{
	"token_bucket": func(p Params) Rule { return NewRule(must(algorithms.NewTokenBucket(p))) },
	"gcra":         func(p Params) Rule { return NewRule(must(algorithms.NewGCRA(p))) },
	"leaky_bucket": func(p Params) Rule { return NewRule(must(algorithms.NewLeakyBucket(p))) },
	"sliding_window_log": func(p Params) Rule {
		return NewRule(must(algorithms.NewSlidingWindowLog(p)))
	},
	"fixed_window": func(p Params) Rule { return NewRule(must(algorithms.NewFixedWindow(p))) },
	"sliding_window_counter": func(p Params) Rule {
		return NewRule(must(algorithms.NewSlidingWindowCounter(p)))
	},
}

// fixedWindow returns the fixed window of limit per window.
func fixedWindow(limit int, window time.Duration) *algorithms.FixedWindow {
	return must(algorithms.NewFixedWindow(Params{Limit: limit, Window: window}))
}

// decide is the rule's AllowN on s, returning the Decision.
func decide[S any](m algorithms.Machine[S], s *S, now time.Duration, n int) (d Decision) {
	m.AllowN(s, now, n, &d)
	return d
}

// tryAllow asks tab for n units on key at now.
func tryAllow(tab *Keys, key string, now time.Duration, n int) (d Decision, err error) {
	err = tab.AllowN(key, now, n, &d)
	return d, err
}

// peek asks tab what AllowN would answer.
func peek(tab *Keys, key string, now time.Duration, n int) (d Decision, err error) {
	err = tab.PeekN(key, now, n, &d)
	return d, err
}

// allow asks tab for n units on key at now and requires an answer.
func allow(t *testing.T, tab *Keys, key string, now time.Duration, n int) Decision {
	t.Helper()
	d, err := tryAllow(tab, key, now, n)
	require.NoError(t, err, "AllowN(%q, %v, %d)", key, now, n)
	return d
}

func fixedWindows(limit int) *Keys {
	return NewRule(fixedWindow(limit, s)).NewTable()
}

func TestTableExpiresKeysExactlyWhenIdle(t *testing.T) {
	for name, rule := range builtins {
		t.Run(name, func(t *testing.T) {
			tab := rule(Params{Limit: 3, Window: s}).NewTable()

			// Keys touched at different instants, some twice.
			var last []time.Duration // the latest deadline of each key
			for k := range 5 {
				now := time.Duration(k) * 100 * ms
				d := allow(t, tab, fmt.Sprint(k), now, 1+k%2)
				require.True(t, d.Allowed)
				last = append(last, now+d.ResetAfter)
			}
			d := allow(t, tab, "0", 450*ms, 1)
			last[0] = 450*ms + d.ResetAfter

			slices.Sort(last)
			for _, deadline := range last {
				held := tab.Len()
				tab.Expire(deadline-1, 1000)
				assert.Equal(t, held, tab.Len(), "nothing expires 1ns before a deadline at %v", deadline)
				tab.Expire(deadline, 1000)
				assert.Less(t, tab.Len(), held, "a key expires at its deadline %v", deadline)
			}
			assert.Equal(t, 0, tab.Len())
			assert.Equal(t, uint64(5), tab.Counts(0).Expired)
		})
	}
}

func TestTableExpireKeepsToItsBudget(t *testing.T) {
	tab := fixedWindows(1)
	for k := range 10 {
		allow(t, tab, fmt.Sprint(k), 0, 1)
	}
	assert.Equal(t, 3, tab.Expire(s, 3))
	assert.Equal(t, 7, tab.Len())
	assert.Equal(t, 7, tab.Expire(s, 100))
	assert.Equal(t, 0, tab.Expire(s, 100))
}

func TestTableExpiresAKeyARefundLeavesUntouched(t *testing.T) {
	tab := fixedWindows(2)
	allow(t, tab, "new", 0, 1)
	tab.Refund("new", 0, 1)
	assert.Equal(t, 1, tab.Counts(0).Idle, "the refund took back the key's only grant: idle, like any key")
	assert.Equal(t, 1, tab.Expire(0, 10))

	allow(t, tab, "old", 0, 1)
	allow(t, tab, "old", 10*ms, 1)
	tab.Refund("old", 10*ms, 1)
	require.Equal(t, 1, tab.Len())
	tab.Expire(s-1, 10)
	assert.Equal(t, 1, tab.Len())
	tab.Expire(s, 10)
	assert.Equal(t, 0, tab.Len(), "the window that opened at 0 ends at 1s")
}

func TestTableKeyLimitRefusesNewKeysAndForgivesNothing(t *testing.T) {
	a := fixedWindows(1)
	a.Bound(Limit{Max: 2})

	allow(t, a, "x", 0, 1)
	allow(t, a, "z", 500*ms, 1)
	_, err := tryAllow(a, "new", 600*ms, 1)
	assert.ErrorIs(t, err, actor.ErrTooManyKeys)
	assert.Equal(t, 2, a.Len())
	for _, k := range []string{"x", "z"} {
		d := allow(t, a, k, 600*ms, 1)
		assert.False(t, d.Allowed, "%s keeps its used window", k)
	}

	// At 1s, x is untouched: a new key takes its place.
	d := allow(t, a, "new", s, 1)
	assert.True(t, d.Allowed)
	assert.Equal(t, 2, a.Len())
	assert.Equal(t, uint64(1), a.Counts(0).Expired)
	assert.Equal(t, uint64(0), a.Counts(0).Evicted)
	assert.False(t, allow(t, a, "z", s, 1).Allowed, "z's window runs to 1.5s")

	_, err = tryAllow(a, "newer", s, 1)
	assert.ErrorIs(t, err, actor.ErrTooManyKeys)
	a.Reset("z")
	assert.True(t, allow(t, a, "newer", s, 1).Allowed, "Reset frees a place")
}

func TestTableKeyLimitEvictsTheLeastRecentlyUsed(t *testing.T) {
	tab := fixedWindows(1)
	tab.Bound(Limit{Max: 3, Evict: true})
	for _, k := range []string{"a", "b", "c"} {
		allow(t, tab, k, 0, 1)
	}
	allow(t, tab, "a", 0, 1) // denied, but used: b is now the oldest
	assert.True(t, allow(t, tab, "d", 0, 1).Allowed)
	assert.Equal(t, uint64(1), tab.Counts(0).Evicted)
	assert.True(t, allow(t, tab, "b", 0, 1).Allowed, "b was evicted, so it starts afresh")
	assert.False(t, allow(t, tab, "a", 0, 1).Allowed, "a was kept")
	assert.Equal(t, 3, tab.Len())
}

func TestTableLoadRefusesBadStatesAndChangesNothing(t *testing.T) {
	tab := fixedWindows(2)
	allow(t, tab, "k", 0, 1)
	saved, keys, err := tab.AppendSnapshot(nil, 10*ms)
	require.NoError(t, err)
	require.Equal(t, 1, keys)
	key, state, rest, err := NextEntry(saved)
	require.NoError(t, err)
	require.Equal(t, "k", key)
	require.Empty(t, rest)

	fresh := fixedWindows(2)
	bad := map[string][]byte{
		"truncated":       state[:len(state)-1],
		"trailing bytes":  append(append([]byte{}, state...), 0),
		"count above N":   {2, 0, 3},
		"start in future": {2, 2, 1},
		"empty":           {},
	}
	for what, b := range bad {
		err := fresh.Load("k", b, 0, 0)
		assert.ErrorIs(t, err, ErrBadSnapshot, what)
		assert.Equal(t, 0, fresh.Len(), what)
	}
	require.NoError(t, fresh.Load("k", state, 0, 0))
	assert.ErrorIs(t, fresh.Load("k", state, 0, 0), ErrBadSnapshot, "a key twice")
	assert.False(t, allow(t, fresh, "k", 0, 2).Allowed, "one of two units is used")
	require.NoError(t, fresh.Load("old", state, 0, 990*ms))
	assert.Equal(t, 1, fresh.Len(), "a window that ended before the restore is not loaded")
}

// TestTableMatchesAMap plays random operations on tables with a KeyLimit
// and on a plain map of states that expires keys by brute force and evicts from
// a list in order of use. Every decision and refusal must agree, and after
// a full Expire, so must the keys held.
func TestTableMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := fixedWindow(3, 10)
	for round := range 300 {
		max, evict := 1+rng.IntN(8), round%2 == 1
		tab := NewRule(m).NewTable()
		tab.Bound(Limit{Max: max, Evict: evict})
		ref := map[string]*algorithms.FixedWindowState{}
		var used []string // the reference's keys, least recently used first
		touch := func(key string) {
			if i := slices.Index(used, key); i >= 0 {
				used = slices.Delete(used, i, i+1)
			}
			used = append(used, key)
		}
		drop := func(key string) {
			delete(ref, key)
			if i := slices.Index(used, key); i >= 0 {
				used = slices.Delete(used, i, i+1)
			}
		}
		var now time.Duration
		for step := range 300 {
			where := fmt.Sprintf("round %d (max %d, evict %v) step %d", round, max, evict, step)
			now += time.Duration(rng.IntN(4))
			for k, s := range ref { // brute force: expire what is idle
				if m.ResetAfter(s, now) == 0 {
					drop(k)
				}
			}
			key, n := fmt.Sprint(rng.IntN(12)), 1+rng.IntN(2)
			switch op := rng.IntN(10); {
			case op < 7:
				got, err := tryAllow(tab, key, now, n)
				s, held := ref[key]
				if !held {
					if len(ref) >= max && !evict {
						require.ErrorIs(t, err, actor.ErrTooManyKeys, where)
						continue
					}
					s = new(algorithms.FixedWindowState)
				}
				want := decide(m, s, now, n)
				require.NoError(t, err, where)
				require.Equal(t, want, got, where)
				if !held && want.Allowed {
					if len(ref) >= max {
						drop(used[0])
					}
					ref[key] = s
				}
				if held || want.Allowed {
					touch(key)
				}
				if op == 6 && got.Allowed { // a caller that gave up
					tab.Refund(key, now, n)
					m.Refund(s, now, n)
					if m.ResetAfter(s, now) == 0 {
						drop(key)
					}
				}
			case op < 8:
				tab.Reset(key)
				drop(key)
			default:
				tab.Expire(now, 1+rng.IntN(3))
			}
			require.GreaterOrEqual(t, tab.Len(), len(ref), where)
			require.LessOrEqual(t, tab.Len(), max, where)
		}
		tab.Expire(now, math.MaxInt)
		for k, s := range ref {
			if m.ResetAfter(s, now) == 0 {
				drop(k)
			}
		}
		require.Equal(t, len(ref), tab.Len(), "round %d: after a full Expire", round)
	}
}

// hidden hides every method of a Machine but Machine's own: its codec and
// its ResetAfter.
type hidden[S any] struct{ algorithms.Machine[S] }

func TestTableWithoutCodec(t *testing.T) {
	tab := NewRule[algorithms.FixedWindowState](hidden[algorithms.FixedWindowState]{fixedWindow(2, s)}).NewTable()
	allow(t, tab, "k", 0, 1)
	_, _, err := tab.AppendSnapshot(nil, 0)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	err = tab.Load("j", []byte{2, 0, 1}, 0, 0) // one state, of 2 bytes
	assert.ErrorIs(t, err, ErrBadSnapshot)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Equal(t, 1, tab.Len())
}

// TestTableWithoutExpiring: a Machine that cannot tell when a state is
// untouched has its keys kept until the deadline of their latest grant,
// which a Refund leaves where it was.
func TestTableWithoutExpiring(t *testing.T) {
	tab := NewRule[algorithms.FixedWindowState](hidden[algorithms.FixedWindowState]{fixedWindow(2, s)}).NewTable()
	allow(t, tab, "k", 0, 1)
	d := allow(t, tab, "k", 100*ms, 1)
	require.Equal(t, 900*ms, d.ResetAfter)
	tab.Refund("k", 100*ms, 1)
	assert.Equal(t, 1, tab.Len(), "the refund leaves the grant's deadline")
	d = allow(t, tab, "k", 300*ms, 1)
	assert.True(t, d.Allowed, "the refund gave its unit back")
	assert.Equal(t, 700*ms, d.ResetAfter)

	tab.Expire(s-1, 100)
	assert.Equal(t, 1, tab.Len(), "kept until the deadline")
	assert.Zero(t, tab.Counts(s-1).Idle, "nothing idle before it")
	assert.Equal(t, 1, tab.Counts(s).Idle, "idle from the deadline on")
	tab.Expire(s, 100)
	assert.Equal(t, 0, tab.Len(), "expired at the deadline")
	assert.Equal(t, uint64(1), tab.Counts(s).Expired)
	_, _, err := tab.AppendSnapshot(nil, 0)
	assert.ErrorIs(t, err, errors.ErrUnsupported, "no snapshot without ResetAfter")
}

// TestTableIndexAgainstASet inserts and removes thousands of keys at random
// (growing the index, and shifting entries back on every removal) and
// checks the index against a plain set throughout.
func TestTableIndexAgainstASet(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tab := NewRule(fixedWindow(1, century)).NewTable()
	impl := implOf[algorithms.FixedWindowState](tab)
	set := map[string]bool{}
	universe := make([]string, 3000)
	for i := range universe {
		universe[i] = fmt.Sprintf("k%d", rng.Uint64())
		if i%10 == 0 { // a key's length takes one byte in keys below 128, more from 128 on
			universe[i] = strings.Repeat("x", rng.IntN(300)) + universe[i]
		}
	}
	universe = append(universe, "", strings.Repeat("y", 127), strings.Repeat("y", 128), strings.Repeat("y", 16383), strings.Repeat("y", 16384))
	for op := range 60_000 {
		key := universe[rng.IntN(len(universe))]
		if rng.IntN(3) > 0 {
			d := allow(t, tab, key, 0, 1)
			require.Equal(t, !set[key], d.Allowed, "op %d: %s", op, key)
			set[key] = true
		} else {
			tab.Reset(key)
			delete(set, key)
		}
		require.Equal(t, len(set), tab.Len())
		if op%5000 == 0 {
			checkIndex(t, impl)
			for _, k := range universe {
				d, err := peek(tab, k, 0, 1)
				require.NoError(t, err)
				require.Equal(t, !set[k], d.Allowed, "op %d: Peek %s", op, k)
			}
		}
	}
	checkIndex(t, impl)
}

// checkIndex checks that every slot is indexed once, at a bucket its probe
// reaches, and that nothing else is.
func checkIndex[S any](t *testing.T, tab *table[S]) {
	t.Helper()
	entries := 0
	for _, e := range tab.buckets {
		if e != 0 {
			entries++
		}
	}
	require.Equal(t, len(tab.slots), entries)
	require.Equal(t, len(tab.slots), tab.held)
	require.LessOrEqual(t, 4*tab.held, 3*len(tab.buckets))
	mask := uint32(len(tab.buckets) - 1)
	seen := make(map[uint32]bool)
	for b, e := range tab.buckets {
		if e == 0 {
			continue
		}
		i := entrySlot(e, mask)
		require.Less(t, int(i), len(tab.slots), "bucket %d names a slot", b)
		require.False(t, seen[i], "slot %d is indexed twice", i)
		seen[i] = true
		key := string(tab.keyBytes(tab.slots[i].key))
		require.Equal(t, entry(tab.hash(key), i, mask), e, "bucket %d: the entry of slot %d's key", b)
		i2, ok := tab.lookup(key)
		require.True(t, ok && i2 == i, "bucket %d: its key %q is found at slot %d", b, key, i)
	}
	live := 0
	for i := range tab.slots {
		k := tab.slots[i].key
		require.LessOrEqual(t, int(k.off)+tab.sizeAt(k), len(tab.keys), "slot %d's key lies in keys", i)
		live += tab.sizeAt(k)
	}
	require.Equal(t, len(tab.keys)-tab.garbage, live, "keys holds the keys held, and garbage")
}

// TestTableKeysTakeAtMostKeyRoom: a table whose keys would pass keyRoom
// refuses a new key with actor.ErrTooManyKeys, squeezes out the bytes of keys it
// dropped to make room, and refuses to load past it.
func TestTableKeysTakeAtMostKeyRoom(t *testing.T) {
	tab := fixedWindows(1)
	impl := implOf[algorithms.FixedWindowState](tab)
	impl.keyRoom = 44
	impl.keys = make([]byte, 0, 64) // room to grow: the squeeze must come from keyRoom
	for k := range 4 {
		allow(t, tab, fmt.Sprintf("key-%05d", k), 0, 1) // 11 bytes each, with the length
	}
	_, err := tryAllow(tab, "one-more", 0, 1)
	require.ErrorIs(t, err, actor.ErrTooManyKeys)
	assert.Equal(t, 4, tab.Len())

	tab.Reset("key-00001")
	tab.Reset("key-00002")
	allow(t, tab, "longer-key-16-by", 0, 1) // fits once the garbage is squeezed out
	assert.Equal(t, 3, tab.Len())
	assert.Equal(t, 0, impl.garbage)
	checkIndex(t, impl)
	for _, k := range []string{"key-00000", "key-00003", "longer-key-16-by"} {
		d, err := peek(tab, k, 0, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "%s is still held", k)
	}

	err = tab.Load("yet-another-key", []byte{2, 0, 1}, 0, 0) // one state, of 2 bytes
	require.ErrorIs(t, err, ErrBadSnapshot)
	require.ErrorIs(t, err, actor.ErrTooManyKeys)
	assert.Equal(t, 3, tab.Len())
}

// TestTableDueHeap plays random grants, refunds, resets and expiries
// (some a grace period behind the latest now, as a partition's are) with
// deadlines all over the place, for every built-in rule and for one that
// cannot tell when a state is untouched, and checks the due heap after
// each: the heap order, every slot's place in it, and that no entry is
// after its key's deadline (else a key would expire late, or be counted
// wrongly as in use).
func TestTableDueHeap(t *testing.T) {
	rules := map[string]Rule{}
	for name, rule := range builtins {
		rules[name] = rule(Params{Limit: 4, Window: 1000})
	}
	rules["granted"] = NewRule[algorithms.FixedWindowState](hidden[algorithms.FixedWindowState]{fixedWindow(4, 1000)})
	for name, rule := range rules {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 8))
			tab := rule.NewTable()
			var now time.Duration
			for op := range 20_000 {
				now += time.Duration(rng.IntN(40))
				key := fmt.Sprint(rng.IntN(500))
				switch r := rng.IntN(20); {
				case r < 14:
					n := 1 + rng.IntN(4)
					if d := allow(t, tab, key, now, n); d.Allowed && r == 0 {
						tab.Refund(key, now, n)
					}
				case r < 16:
					tab.Reset(key)
				default:
					tab.Expire(now-time.Duration(rng.IntN(50)), rng.IntN(8))
				}
				if op%97 == 0 {
					checkHeapOf(t, tab, now, false)
				}
			}
			checkHeapOf(t, tab, now, false)
			tab.Expire(now, math.MaxInt)
			checkHeapOf(t, tab, now, true)
		})
	}
}

// checkHeapOf checks the due heap of tab at now (see checkHeap).
func checkHeapOf(t *testing.T, tab *Keys, now time.Duration, expired bool) {
	t.Helper()
	switch impl := tab.def.(type) {
	case *table[algorithms.TokenBucketState]:
		checkHeap(t, impl, now, expired)
	case *table[algorithms.GCRAState]:
		checkHeap(t, impl, now, expired)
	case *table[algorithms.FixedWindowState]:
		checkHeap(t, impl, now, expired)
	case *table[algorithms.SlidingWindowLogState]:
		checkHeap(t, impl, now, expired)
	case *table[algorithms.SlidingWindowCounterState]:
		checkHeap(t, impl, now, expired)
	case *table[timed[algorithms.FixedWindowState]]:
		checkHeap(t, impl, now, expired)
	default:
		t.Fatalf("no heap check for %T", tab)
	}
}

// checkHeap checks the due heap of tab at now and, if expired is set, that
// it holds no key untouched at now.
func checkHeap[S any](t *testing.T, tab *table[S], now time.Duration, expired bool) {
	t.Helper()
	require.Equal(t, len(tab.slots), len(tab.due))
	for h, e := range tab.due {
		require.Equal(t, uint32(h), tab.slots[e.slot].due, "slot %d's place", e.slot)
		if h > 0 {
			require.LessOrEqual(t, tab.due[(h-1)/arity].at(), e.at(), "heap order at %d", h)
		}
		wait := tab.e.ResetAfter(&tab.slots[e.slot].state, now)
		require.LessOrEqual(t, e.at(), after(now, max(wait, 0)), "entry %d is after its key's deadline", h)
		if expired {
			require.Positive(t, wait, "a full Expire leaves no untouched key")
		}
	}
}

// TestTableAllowEachIsAllowNInTurn: AllowEach answers a batch exactly as
// AllowN does item by item, on random batches with repeated keys, new
// keys, keys refused by the cap or by the room for key bytes, and
// eviction; and leaves the same keys held.
func TestTableAllowEachIsAllowNInTurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	m := fixedWindow(3, 50)
	for round := range 200 {
		limit := Limit{Max: 1 + rng.IntN(6), Evict: round%2 == 1}
		batch, single := NewRule(m).NewTable(), NewRule(m).NewTable()
		room := 20 + rng.IntN(20)
		for _, tab := range []*Keys{batch, single} {
			tab.Bound(limit)
			implOf[algorithms.FixedWindowState](tab).keyRoom = room
		}
		var now time.Duration
		for step := range 30 {
			now += time.Duration(rng.IntN(30))
			items := make([]Item, rng.IntN(8))
			for k := range items {
				items[k] = Item{Key: fmt.Sprint("key-", rng.IntN(10)), N: 1 + rng.IntN(2)}
				if rng.IntN(2) == 0 { // as a router hands it over
					items[k].Hash, items[k].Hashed = Hash(items[k].Key), true
				}
			}
			batch.AllowEach(items, now)
			for k, it := range items {
				d, err := tryAllow(single, it.Key, now, it.N)
				where := fmt.Sprintf("round %d step %d item %d (%s, %d)", round, step, k, it.Key, it.N)
				require.Equal(t, err, it.Err, where)
				require.Equal(t, d, it.D, where)
			}
			require.Equal(t, single.Len(), batch.Len())
			batch.Expire(now, 4)
			single.Expire(now, 4)
		}
	}
}

// TestTableRefusesABigKeyWithoutEvicting: a new key its keys have no room
// for is refused before eviction makes room for it, so no key loses its
// state for a key that is refused anyway.
func TestTableRefusesABigKeyWithoutEvicting(t *testing.T) {
	tab := fixedWindows(1)
	tab.Bound(Limit{Max: 2, Evict: true})
	implOf[algorithms.FixedWindowState](tab).keyRoom = 22 // two keys of 10 bytes and their lengths
	allow(t, tab, "aaaaaaaaaa", 0, 1)
	allow(t, tab, "bbbbbbbbbb", 0, 1)
	_, err := tryAllow(tab, "c", 0, 1)
	require.ErrorIs(t, err, actor.ErrTooManyKeys)
	assert.Zero(t, tab.Counts(0).Evicted)
	for _, k := range []string{"aaaaaaaaaa", "bbbbbbbbbb"} {
		d, err := peek(tab, k, 0, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "%s keeps its state", k)
	}
}

// TestTableGivesBackTheBytesOfExpiredKeys: once most of a table's keys
// have expired, Expire gives back the memory their bytes took.
func TestTableGivesBackTheBytesOfExpiredKeys(t *testing.T) {
	tab := fixedWindows(1)
	impl := implOf[algorithms.FixedWindowState](tab)
	long := strings.Repeat("k", 1000)
	for k := range 1000 {
		allow(t, tab, fmt.Sprint(long, k), time.Duration(k), 1) // a megabyte of keys
	}
	allow(t, tab, "hot", 2*s, 1)
	require.GreaterOrEqual(t, cap(impl.keys), 1000*1000)
	tab.Expire(2*s, math.MaxInt)
	assert.Equal(t, 1, tab.Len())
	assert.Less(t, cap(impl.keys), minShrink, "the garbage is given back")
	checkIndex(t, impl)
	d, err := peek(tab, "hot", 2*s, 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "hot is still held, its key intact")
}

func TestTableKeysAreIndependentCopies(t *testing.T) {
	tab := fixedWindows(1)
	buf := []byte("alice bob")
	alice := string(buf[:5])
	assert.True(t, allow(t, tab, alice, 0, 1).Allowed)
	assert.True(t, allow(t, tab, "bob", 0, 1).Allowed, "keys are independent")
	assert.False(t, allow(t, tab, "alice", 0, 1).Allowed)
	assert.Equal(t, 2, tab.Len())

	tab.Refund("alice", 0, 1)
	assert.True(t, allow(t, tab, "alice", 0, 1).Allowed, "the refund gave alice's unit back")
	tab.Refund("nobody", 0, 1)
	assert.Equal(t, 2, tab.Len(), "refunding an unseen key stores nothing")
}

// implOf returns the table of the router's policies in tab, a *Keys.
func implOf[S any](tab *Keys) *table[S] { return tab.def.(*table[S]) }

// TestDueKeepsEveryDeadline: a heap entry's deadline, kept in halves,
// comes back as it went in, the extremes included.
func TestDueKeepsEveryDeadline(t *testing.T) {
	for _, at := range []time.Duration{0, 1, -1, 1<<32 - 1, 1 << 32, -1 << 32, math.MaxInt64, math.MinInt64, 1234567890123} {
		e := newDue(at, 7)
		assert.Equal(t, at, e.at(), "%d", at)
		assert.Equal(t, uint32(7), e.slot)
	}
}
