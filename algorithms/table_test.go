package algorithms

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
)

// allow asks tab for n units on key at now and requires an answer.
func allow(t *testing.T, tab Table, key string, now time.Duration, n int) Decision {
	t.Helper()
	d, err := tab.AllowN(key, now, n)
	require.NoError(t, err, "AllowN(%q, %v, %d)", key, now, n)
	return d
}

func fixedWindows(limit int) Table {
	return Keyed[FixedWindowState](&FixedWindow{limit: limit, window: s}).NewTable()
}

func TestTableForgetsKeysExactlyWhenUntouched(t *testing.T) {
	for _, name := range builtins {
		t.Run(name, func(t *testing.T) {
			f, err := Lookup(name)
			require.NoError(t, err)
			alg, err := f(Params{Limit: 3, Window: s})
			require.NoError(t, err)
			tab := alg.NewTable()

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
				assert.Equal(t, held, tab.Len(), "nothing is forgotten 1ns before a deadline at %v", deadline)
				tab.Expire(deadline, 1000)
				assert.Less(t, tab.Len(), held, "a key is forgotten at its deadline %v", deadline)
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

func TestTableForgetsAKeyARefundLeavesUntouched(t *testing.T) {
	tab := fixedWindows(2)
	allow(t, tab, "new", 0, 1)
	tab.Refund("new", 0, 1)
	assert.Equal(t, 0, tab.Len(), "the refund took back the key's only grant")

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
	a.Bound(KeyLimit{Max: 2})

	allow(t, a, "x", 0, 1)
	allow(t, a, "z", 500*ms, 1)
	_, err := a.AllowN("new", 600*ms, 1)
	assert.ErrorIs(t, err, ErrTooManyKeys)
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

	_, err = a.AllowN("newer", s, 1)
	assert.ErrorIs(t, err, ErrTooManyKeys)
	a.Reset("z")
	assert.True(t, allow(t, a, "newer", s, 1).Allowed, "Reset frees a place")
}

func TestTableKeyLimitEvictsTheLeastRecentlyUsed(t *testing.T) {
	tab := fixedWindows(1)
	tab.Bound(KeyLimit{Max: 3, Evict: true})
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
		"count above N":   {0, 3},
		"start in future": {2, 1},
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
// and on a plain map of states that forgets by brute force and evicts from
// a list in order of use. Every decision and refusal must agree, and after
// a full Expire, so must the keys held.
func TestTableMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := &FixedWindow{limit: 3, window: 10}
	for round := range 300 {
		max, evict := 1+rng.IntN(8), round%2 == 1
		tab := Keyed[FixedWindowState](m).NewTable()
		tab.Bound(KeyLimit{Max: max, Evict: evict})
		ref := map[string]*FixedWindowState{}
		var used []string // the reference's keys, least recently used first
		touch := func(key string) {
			if i := slices.Index(used, key); i >= 0 {
				used = slices.Delete(used, i, i+1)
			}
			used = append(used, key)
		}
		forget := func(key string) {
			delete(ref, key)
			if i := slices.Index(used, key); i >= 0 {
				used = slices.Delete(used, i, i+1)
			}
		}
		var now time.Duration
		for step := range 300 {
			where := fmt.Sprintf("round %d (max %d, evict %v) step %d", round, max, evict, step)
			now += time.Duration(rng.IntN(4))
			for k, s := range ref { // brute force: forget what is untouched
				if m.ResetAfter(s, now) == 0 {
					forget(k)
				}
			}
			key, n := fmt.Sprint(rng.IntN(12)), 1+rng.IntN(2)
			switch op := rng.IntN(10); {
			case op < 7:
				got, err := tab.AllowN(key, now, n)
				s, held := ref[key]
				if !held {
					if len(ref) >= max && !evict {
						require.ErrorIs(t, err, ErrTooManyKeys, where)
						continue
					}
					s = new(FixedWindowState)
				}
				want, _ := m.AllowN(s, now, n)
				require.NoError(t, err, where)
				require.Equal(t, want, got, where)
				if !held && want.Allowed {
					if len(ref) >= max {
						forget(used[0])
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
						forget(key)
					}
				}
			case op < 8:
				tab.Reset(key)
				forget(key)
			default:
				tab.Expire(now, 1+rng.IntN(3))
			}
			require.GreaterOrEqual(t, tab.Len(), len(ref), where)
			require.LessOrEqual(t, tab.Len(), max, where)
		}
		tab.Expire(now, math.MaxInt)
		for k, s := range ref {
			if m.ResetAfter(s, now) == 0 {
				forget(k)
			}
		}
		require.Equal(t, len(ref), tab.Len(), "round %d: after a full Expire", round)
	}
}

func TestTableWithoutCodec(t *testing.T) {
	var m Machine[FixedWindowState] = &FixedWindow{limit: 2, window: s}
	tab := Keyed(struct{ Machine[FixedWindowState] }{m}).NewTable() // hides the codec
	allow(t, tab, "k", 0, 1)
	_, _, err := tab.AppendSnapshot(nil, 0)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	err = tab.Load("j", []byte{0, 1}, 0, 0)
	assert.ErrorIs(t, err, ErrBadSnapshot)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Equal(t, 1, tab.Len())
}

// TestTableWithoutExpiring: a Machine that cannot tell when a state is
// untouched has its keys kept until the deadline of their latest grant,
// which a Refund leaves where it was.
func TestTableWithoutExpiring(t *testing.T) {
	var m Machine[FixedWindowState] = &FixedWindow{limit: 2, window: s}
	tab := Keyed(struct{ Machine[FixedWindowState] }{m}).NewTable() // hides ResetAfter
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
	assert.Equal(t, 0, tab.Len(), "forgotten at the deadline")
	assert.Equal(t, uint64(1), tab.Counts(s).Expired)
	_, _, err := tab.AppendSnapshot(nil, 0)
	assert.ErrorIs(t, err, errors.ErrUnsupported, "no snapshot without ResetAfter")
}

// TestTableIndexAgainstASet inserts and removes thousands of keys at random
// (growing the index, and shifting entries back on every removal) and
// checks the index against a plain set throughout.
func TestTableIndexAgainstASet(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tab := Keyed[FixedWindowState](&FixedWindow{limit: 1, window: century}).NewTable()
	impl := tab.(*table[FixedWindowState])
	set := map[string]bool{}
	universe := make([]string, 3000)
	for i := range universe {
		universe[i] = fmt.Sprintf("k%d", rng.Uint64())
	}
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
				d, err := tab.PeekN(k, 0, 1)
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
	live := 0
	for i := range tab.slots {
		b := tab.bucketOf(uint32(i))
		require.Equal(t, entry(tab.slots[i].hash, uint32(i)), tab.buckets[b])
		k := tab.slots[i].key
		require.LessOrEqual(t, int(k.off+k.n), len(tab.keys), "slot %d's key lies in keys", i)
		require.Equal(t, tab.hash(string(tab.keyBytes(k))), tab.slots[i].hash, "slot %d's key bytes are its key's", i)
		live += int(k.n)
	}
	require.Equal(t, len(tab.keys)-tab.garbage, live, "keys holds the keys held, and garbage")
}

// TestTableKeysTakeAtMostKeyRoom: a table whose keys would pass keyRoom
// refuses a new key with ErrTooManyKeys, squeezes out the bytes of keys it
// forgot to make room, and refuses to load past it.
func TestTableKeysTakeAtMostKeyRoom(t *testing.T) {
	tab := fixedWindows(1)
	impl := tab.(*table[FixedWindowState])
	impl.keyRoom = 40
	impl.keys = make([]byte, 0, 64) // room to grow: the squeeze must come from keyRoom
	for k := range 4 {
		allow(t, tab, fmt.Sprintf("key-%05d", k), 0, 1) // 10 bytes each
	}
	_, err := tab.AllowN("one-more", 0, 1)
	require.ErrorIs(t, err, ErrTooManyKeys)
	assert.Equal(t, 4, tab.Len())

	tab.Reset("key-00001")
	tab.Reset("key-00002")
	allow(t, tab, "longer-key-16-by", 0, 1) // fits once the garbage is squeezed out
	assert.Equal(t, 3, tab.Len())
	assert.Equal(t, 0, impl.garbage)
	checkIndex(t, impl)
	for _, k := range []string{"key-00000", "key-00003", "longer-key-16-by"} {
		d, err := tab.PeekN(k, 0, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "%s is still held", k)
	}

	err = tab.Load("yet-another-key", []byte{0, 1}, 0, 0)
	require.ErrorIs(t, err, ErrBadSnapshot)
	require.ErrorIs(t, err, ErrTooManyKeys)
	assert.Equal(t, 3, tab.Len())
}

// TestTableDueHeap plays random grants, refunds, resets and expiries
// (some lingering behind the latest now, as a partition's do) with
// deadlines all over the place, for every built-in rule and for one that
// cannot tell when a state is untouched, and checks the due heap after
// each: the heap order, every slot's place in it, and that no entry is
// after its key's deadline (else a key would be forgotten late, or counted
// wrongly as in use).
func TestTableDueHeap(t *testing.T) {
	rules := map[string]Algorithm{}
	for _, name := range builtins {
		f, err := Lookup(name)
		require.NoError(t, err)
		rules[name], err = f(Params{Limit: 4, Window: 1000})
		require.NoError(t, err)
	}
	var m Machine[FixedWindowState] = &FixedWindow{limit: 4, window: 1000}
	rules["granted"] = Keyed(struct{ Machine[FixedWindowState] }{m}) // hides ResetAfter
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
func checkHeapOf(t *testing.T, tab Table, now time.Duration, expired bool) {
	t.Helper()
	switch impl := tab.(type) {
	case *table[TokenBucketState]:
		checkHeap(t, impl, now, expired)
	case *table[GCRAState]:
		checkHeap(t, impl, now, expired)
	case *table[FixedWindowState]:
		checkHeap(t, impl, now, expired)
	case *table[SlidingWindowLogState]:
		checkHeap(t, impl, now, expired)
	case *table[SlidingWindowCounterState]:
		checkHeap(t, impl, now, expired)
	case *table[timed[FixedWindowState]]:
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
			require.LessOrEqual(t, tab.due[(h-1)/arity].at, e.at, "heap order at %d", h)
		}
		wait := tab.expiring.ResetAfter(&tab.slots[e.slot].state, now)
		require.LessOrEqual(t, e.at, after(now, max(wait, 0)), "entry %d is after its key's deadline", h)
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
	m := &FixedWindow{limit: 3, window: 50}
	for round := range 200 {
		limit := KeyLimit{Max: 1 + rng.IntN(6), Evict: round%2 == 1}
		batch, single := Keyed[FixedWindowState](m).NewTable(), Keyed[FixedWindowState](m).NewTable()
		room := 20 + rng.IntN(20)
		for _, tab := range []Table{batch, single} {
			tab.Bound(limit)
			tab.(*table[FixedWindowState]).keyRoom = room
		}
		var now time.Duration
		for step := range 30 {
			now += time.Duration(rng.IntN(30))
			items := make([]Item, rng.IntN(8))
			for k := range items {
				items[k] = Item{Key: fmt.Sprint("key-", rng.IntN(10)), N: 1 + rng.IntN(2)}
			}
			next := 0
			batch.(BatchTable).AllowEach(items, now, &next)
			require.Equal(t, len(items), next)
			for k, it := range items {
				d, err := single.AllowN(it.Key, now, it.N)
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

// panicky is a fixed window that panics on a request for 3 units.
type panicky struct{ *FixedWindow }

func (p panicky) AllowN(s *FixedWindowState, now time.Duration, n int) (Decision, error) {
	if n == 3 {
		panic("three")
	}
	return p.FixedWindow.AllowN(s, now, n)
}

// TestTableAllowEachTellsWhereItPanicked: when the rule panics on an item,
// next holds that item's index, and the items before it are decided.
func TestTableAllowEachTellsWhereItPanicked(t *testing.T) {
	tab := Keyed[FixedWindowState](panicky{&FixedWindow{limit: 5, window: s}}).NewTable().(BatchTable)
	items := []Item{{Key: "a", N: 1}, {Key: "b", N: 2}, {Key: "new", N: 3}, {Key: "a", N: 1}}
	next := 0
	func() {
		defer func() { require.Equal(t, "three", recover()) }()
		tab.AllowEach(items, 0, &next)
	}()
	assert.Equal(t, 2, next, "the item it panicked on")
	assert.True(t, items[0].D.Allowed)
	assert.True(t, items[1].D.Allowed)
	assert.Zero(t, items[3].D, "not reached")

	next = 3
	tab.AllowEach(items, 0, &next)
	assert.Equal(t, 4, next)
	assert.Equal(t, 3, items[3].D.Remaining, "a took its second unit")
}

// TestTableRefusesABigKeyWithoutEvicting: a new key its keys have no room
// for is refused before eviction makes room for it, so no key loses its
// state for a key that is refused anyway.
func TestTableRefusesABigKeyWithoutEvicting(t *testing.T) {
	tab := fixedWindows(1)
	tab.Bound(KeyLimit{Max: 2, Evict: true})
	tab.(*table[FixedWindowState]).keyRoom = 20
	allow(t, tab, "aaaaaaaaaa", 0, 1)
	allow(t, tab, "bbbbbbbbbb", 0, 1)
	_, err := tab.AllowN("c", 0, 1)
	require.ErrorIs(t, err, ErrTooManyKeys)
	assert.Zero(t, tab.Counts(0).Evicted)
	for _, k := range []string{"aaaaaaaaaa", "bbbbbbbbbb"} {
		d, err := tab.PeekN(k, 0, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "%s keeps its state", k)
	}
}

// TestTableGivesBackTheBytesOfForgottenKeys: once most of a table's keys
// are forgotten, Expire gives back the memory their bytes took.
func TestTableGivesBackTheBytesOfForgottenKeys(t *testing.T) {
	tab := fixedWindows(1)
	impl := tab.(*table[FixedWindowState])
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
	d, err := tab.PeekN("hot", 2*s, 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "hot is still held, its key intact")
}

// tetchy is a fixed window that panics in one method, named by in
// ("ResetAfter" or "AppendState"), for a state once allowed a request for
// 2 units; the panic's value is that name.
type tetchy struct {
	*FixedWindow
	in string
}

type tetchyState struct {
	fw  FixedWindowState
	bad bool
}

func (m tetchy) AllowN(s *tetchyState, now time.Duration, n int) (Decision, error) {
	s.bad = s.bad || n == 2
	return m.FixedWindow.AllowN(&s.fw, now, n)
}

func (m tetchy) PeekN(s *tetchyState, now time.Duration, n int) (Decision, error) {
	return m.FixedWindow.PeekN(&s.fw, now, n)
}

func (m tetchy) Refund(s *tetchyState, now time.Duration, n int) { m.FixedWindow.Refund(&s.fw, now, n) }

// sulk panics if the state is bad and the method is the one named in.
func (m tetchy) sulk(s *tetchyState, method string) {
	if s.bad && m.in == method {
		panic(method)
	}
}

func (m tetchy) ResetAfter(s *tetchyState, now time.Duration) time.Duration {
	m.sulk(s, "ResetAfter")
	return m.FixedWindow.ResetAfter(&s.fw, now)
}

func (m tetchy) AppendState(dst []byte, s *tetchyState, now time.Duration) []byte {
	m.sulk(s, "AppendState")
	return m.FixedWindow.AppendState(dst, &s.fw, now)
}

func (m tetchy) ParseState(src []byte, s *tetchyState, now, age time.Duration) error {
	return m.FixedWindow.ParseState(src, &s.fw, now, age)
}

// TestTableDropsAKeyItCannotSave: a state whose codec panics fails the
// snapshot once and is forgotten, so the next snapshot succeeds.
func TestTableDropsAKeyItCannotSave(t *testing.T) {
	tab := Keyed[tetchyState](tetchy{&FixedWindow{limit: 3, window: s}, "AppendState"}).NewTable()
	allow(t, tab, "good", 0, 1)
	allow(t, tab, "bad", 0, 2)
	func() {
		defer func() { require.Equal(t, "AppendState", recover()) }()
		_, _, _ = tab.AppendSnapshot(nil, 0)
	}()
	assert.Equal(t, 1, tab.Len(), "bad is forgotten")
	_, keys, err := tab.AppendSnapshot(nil, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, keys)
	checkIndex(t, tab.(*table[tetchyState]))
}

// TestTableForgetsAKeyWhoseResetAfterPanics: Expire and Refund forget the
// key whose ResetAfter panicked, also when it is not in the last slot (so
// that another key moves into its place), and leave the index and the heap
// whole.
func TestTableForgetsAKeyWhoseResetAfterPanics(t *testing.T) {
	tab := Keyed[tetchyState](tetchy{&FixedWindow{limit: 3, window: s}, "ResetAfter"}).NewTable()
	impl := tab.(*table[tetchyState])
	allow(t, tab, "bad", 0, 2) // due first
	allow(t, tab, "a", 5*ms, 1)
	allow(t, tab, "c", 10*ms, 1)
	require.Zero(t, slotOf(t, impl, "bad"), "bad is not in the last slot: forgetting it moves c")
	func() {
		defer func() { require.Equal(t, "ResetAfter", recover()) }()
		tab.Expire(2*s, 100)
	}()
	assert.Equal(t, none, impl.asking)
	checkIndex(t, impl)
	checkHeap(t, impl, 2*s, false)
	_, held := impl.lookup("bad")
	assert.False(t, held, "bad is forgotten")
	tab.Expire(2*s, 100)
	assert.Zero(t, tab.Len(), "the others are forgotten, as usual")
	assert.Equal(t, uint64(2), tab.Counts(2*s).Expired, "a and c")

	allow(t, tab, "bad", 3*s, 2)
	allow(t, tab, "d", 3*s, 1)
	func() {
		defer func() { require.Equal(t, "ResetAfter", recover()) }()
		tab.Refund("bad", 3*s, 2)
	}()
	_, held = impl.lookup("bad")
	assert.False(t, held, "a refund that panics forgets bad too")
	checkIndex(t, impl)
	checkHeap(t, impl, 3*s, false)
}

// slotOf returns the slot that holds key.
func slotOf[S any](t *testing.T, tab *table[S], key string) uint32 {
	t.Helper()
	i, ok := tab.lookup(key)
	require.True(t, ok, "%s is held", key)
	return i
}
