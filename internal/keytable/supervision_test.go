package keytable

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
)

// panicsOnMarked is a fixed window of 3 per second whose method named in
// panics, with that name as the value, for a state that was once allowed a
// request for 2 units (marked). In "AllowN" it panics on a request for 3
// units instead, on any state.
type panicsOnMarked struct {
	*algorithms.FixedWindow
	in string
}

type markedState struct {
	fw     algorithms.FixedWindowState
	marked bool
}

func newPanicsOnMarked(in string) *Keys {
	return NewRule[markedState](panicsOnMarked{fixedWindow(3, s), in}).NewTable()
}

func (m panicsOnMarked) panicIf(bad bool, method string) {
	if bad && m.in == method {
		panic(method)
	}
}

func (m panicsOnMarked) AllowN(st *markedState, now time.Duration, n int, d *Decision) {
	m.panicIf(n == 3, "AllowN")
	m.FixedWindow.AllowN(&st.fw, now, n, d)
	st.marked = st.marked || (d.Allowed && n == 2)
}

func (m panicsOnMarked) PeekN(st *markedState, now time.Duration, n int, d *Decision) {
	m.panicIf(st.marked, "PeekN")
	m.FixedWindow.PeekN(&st.fw, now, n, d)
}

func (m panicsOnMarked) Refund(st *markedState, now time.Duration, n int) {
	m.panicIf(st.marked, "Refund")
	m.FixedWindow.Refund(&st.fw, now, n)
}

func (m panicsOnMarked) ResetAfter(st *markedState, now time.Duration) time.Duration {
	m.panicIf(st.marked, "ResetAfter")
	return m.FixedWindow.ResetAfter(&st.fw, now)
}

func (m panicsOnMarked) AppendState(dst []byte, st *markedState, now time.Duration) []byte {
	m.panicIf(st.marked, "AppendState")
	return m.FixedWindow.AppendState(dst, &st.fw, now)
}

func (m panicsOnMarked) ParseState(src []byte, st *markedState, now, age time.Duration) error {
	m.panicIf(true, "ParseState")
	return m.FixedWindow.ParseState(src, &st.fw, now, age)
}

// held reports whether tab holds key.
func held(tab *Keys, key string) bool {
	_, ok := implOf[markedState](tab).lookup(key)
	return ok
}

// checkWhole checks the index and the due heap of tab at now.
func checkWhole(t *testing.T, tab *Keys, now time.Duration) {
	t.Helper()
	impl := implOf[markedState](tab)
	assert.Equal(t, none, impl.asking)
	checkIndex(t, impl)
	checkHeap(t, impl, now, false)
}

func TestTableAllowNOfAPanickingRuleFailsAndDropsTheKey(t *testing.T) {
	tab := newPanicsOnMarked("AllowN")
	allow(t, tab, "k", 0, 1)
	allow(t, tab, "other", 0, 1)
	d, err := tryAllow(tab, "k", 0, 3)
	require.ErrorIs(t, err, actor.ErrAlgorithmPanic)
	assert.Equal(t, "chanlimit: algorithm panicked: AllowN", err.Error())
	assert.Zero(t, d, "no decision with the error")
	assert.False(t, held(tab, "k"), "k's state may be half-written: dropped")
	assert.True(t, held(tab, "other"))
	assert.Equal(t, uint64(1), tab.Counts(0).Panicked)

	_, err = tryAllow(tab, "new", 0, 3)
	require.ErrorIs(t, err, actor.ErrAlgorithmPanic, "on a new key too")
	assert.False(t, held(tab, "new"))
	assert.Equal(t, uint64(2), tab.Counts(0).Panicked)
	checkWhole(t, tab, 0)
}

// TestTableAllowEachFailsOnlyTheItemItPanickedOn: the items before and
// after the one the rule panicked on are decided as AllowN would.
func TestTableAllowEachFailsOnlyTheItemItPanickedOn(t *testing.T) {
	tab := newPanicsOnMarked("AllowN")
	allow(t, tab, "held", 0, 1)
	items := []Item{{Key: "a", N: 1}, {Key: "held", N: 3}, {Key: "new", N: 3}, {Key: "a", N: 1}, {Key: "held", N: 1}}
	tab.AllowEach(items, 0)
	for k, want := range []bool{true, false, false, true, true} {
		assert.Equal(t, want, items[k].D.Allowed, "item %d", k)
	}
	for _, k := range []int{1, 2} {
		require.ErrorIs(t, items[k].Err, actor.ErrAlgorithmPanic, "item %d", k)
		assert.Zero(t, items[k].D, "item %d", k)
	}
	assert.Equal(t, 1, items[3].D.Remaining, "a took its second unit")
	assert.Equal(t, 2, items[4].D.Remaining, "held was dropped, and starts afresh")
	assert.Equal(t, uint64(2), tab.Counts(0).Panicked)
	checkWhole(t, tab, 0)
}

func TestTablePeekOfAPanickingRuleFailsAndDropsTheKey(t *testing.T) {
	tab := newPanicsOnMarked("PeekN")
	allow(t, tab, "k", 0, 2)
	_, err := peek(tab, "k", 0, 1)
	require.ErrorIs(t, err, actor.ErrAlgorithmPanic)
	assert.False(t, held(tab, "k"))
	assert.Equal(t, uint64(1), tab.Counts(0).Panicked)
	checkWhole(t, tab, 0)
}

// TestTableDropsAKeyWhoseResetAfterPanics: Expire, Counts, Refund and a new
// key that needs room each meet a key whose ResetAfter panics: they drop
// it, count it, and go on with the others. The key is not in the last slot,
// so that dropping it moves another into its place.
func TestTableDropsAKeyWhoseResetAfterPanics(t *testing.T) {
	setup := func(t *testing.T) *Keys {
		tab := newPanicsOnMarked("ResetAfter")
		allow(t, tab, "bad", 0, 2) // due first
		allow(t, tab, "a", 5*ms, 1)
		allow(t, tab, "c", 10*ms, 1)
		require.Zero(t, slotOf(t, implOf[markedState](tab), "bad"))
		return tab
	}
	t.Run("Expire", func(t *testing.T) {
		tab := setup(t)
		assert.Equal(t, 2, tab.Expire(2*s, 100), "a and c")
		assert.Zero(t, tab.Len())
		c := tab.Counts(2 * s)
		assert.Equal(t, uint64(2), c.Expired)
		assert.Equal(t, uint64(1), c.Panicked)
		checkWhole(t, tab, 2*s)
	})
	t.Run("Counts", func(t *testing.T) {
		tab := setup(t)
		c := tab.Counts(2 * s)
		assert.Equal(t, 2, c.Idle, "a and c; bad is dropped")
		assert.Equal(t, uint64(1), c.Panicked)
		assert.False(t, held(tab, "bad"))
		checkWhole(t, tab, 2*s)
	})
	t.Run("Refund", func(t *testing.T) {
		tab := setup(t)
		tab.Refund("bad", 0, 2)
		assert.False(t, held(tab, "bad"))
		assert.Equal(t, 2, tab.Len())
		assert.Equal(t, uint64(1), tab.Counts(0).Panicked)
		checkWhole(t, tab, 0)
	})
	t.Run("Room", func(t *testing.T) {
		tab := setup(t)
		tab.Bound(Limit{Max: 3})
		d, err := peek(tab, "new", 2*s, 1)
		require.NoError(t, err, "a and c are idle: room for a new key")
		assert.True(t, d.Allowed)
		assert.False(t, held(tab, "bad"), "dropped while looking for an idle key")
		assert.True(t, allow(t, tab, "new", 2*s, 1).Allowed)
		assert.Equal(t, uint64(1), tab.Counts(2*s).Panicked)
		checkWhole(t, tab, 2*s)
	})
}

// TestTableDropsAKeyItCannotSave: a key whose AppendState panics is
// dropped, and the snapshot holds the others.
func TestTableDropsAKeyItCannotSave(t *testing.T) {
	tab := newPanicsOnMarked("AppendState")
	allow(t, tab, "good", 0, 1)
	allow(t, tab, "bad", 0, 2)
	allow(t, tab, "fine", 0, 1)
	saved, keys, err := tab.AppendSnapshot([]byte("head"), 0)
	require.NoError(t, err)
	assert.Equal(t, 2, keys)
	assert.Equal(t, "head", string(saved[:4]), "what dst held is kept")
	var got []string
	for rest := saved[4:]; len(rest) > 0; {
		key, _, next, err := NextEntry(rest)
		require.NoError(t, err)
		got, rest = append(got, key), next
	}
	assert.ElementsMatch(t, []string{"good", "fine"}, got)
	assert.False(t, held(tab, "bad"))
	assert.Equal(t, uint64(1), tab.Counts(0).Panicked)
	checkWhole(t, tab, 0)
}

// TestTableLoadOfAPanickingCodecIsABadSnapshot: nothing is loaded.
func TestTableLoadOfAPanickingCodecIsABadSnapshot(t *testing.T) {
	tab := newPanicsOnMarked("ParseState")
	err := tab.Load("k", []byte{2, 0, 1}, 0, 0) // one state, of 2 bytes
	require.ErrorIs(t, err, ErrBadSnapshot)
	require.ErrorIs(t, err, actor.ErrAlgorithmPanic)
	assert.Zero(t, tab.Len())
}

// TestTablePeekOnANewKeyAnswersAsAllowNWould: when a new key would be
// refused for want of room, Peek refuses it too, and drops nothing; when a
// key is idle, or eviction is on, both allow it.
func TestTablePeekOnANewKeyAnswersAsAllowNWould(t *testing.T) {
	for _, evict := range []bool{false, true} {
		for _, now := range []time.Duration{600 * ms, s} { // a is idle from 1s
			tab := fixedWindows(1)
			tab.Bound(Limit{Max: 2, Evict: evict})
			allow(t, tab, "a", 0, 1)
			allow(t, tab, "b", 500*ms, 1)
			where := fmt.Sprintf("evict %v, at %v", evict, now)

			peeked, peekErr := peek(tab, "new", now, 1)
			assert.Equal(t, 2, tab.Len(), where+": Peek drops nothing")
			c := tab.Counts(0)
			assert.Zero(t, c.Expired+c.Evicted, where)
			got, err := tryAllow(tab, "new", now, 1)
			assert.Equal(t, got, peeked, where)
			assert.Equal(t, err, peekErr, where)
			assert.Equal(t, evict || now == s, err == nil, where)
		}
	}

	tab := fixedWindows(1)
	implOf[algorithms.FixedWindowState](tab).keyRoom = 4
	allow(t, tab, "abc", 0, 1) // 4 bytes, with its length
	_, err := peek(tab, "de", 0, 1)
	require.ErrorIs(t, err, actor.ErrTooManyKeys, "no room for the key's bytes")
	_, err = tryAllow(tab, "de", 0, 1)
	require.ErrorIs(t, err, actor.ErrTooManyKeys)
}

// TestTableReplaceTakesTheOthersKeys: the table holds what the other held,
// keeps its own counts and cap, and the other is empty.
func TestTableReplaceTakesTheOthersKeys(t *testing.T) {
	tab, other := fixedWindows(2), fixedWindows(2)
	tab.Bound(Limit{Max: 2, Evict: true})
	allow(t, tab, "old", 0, 1)
	tab.Expire(2*s, 10)
	allow(t, other, "x", s, 2)
	allow(t, other, "y", s, 1)
	tab.Replace(other)
	assert.Zero(t, other.Len())
	assert.Equal(t, 2, tab.Len())
	assert.Equal(t, uint64(1), tab.Counts(s).Expired, "its own counts")
	assert.False(t, allow(t, tab, "x", s, 1).Allowed, "x's state came along")
	assert.True(t, allow(t, tab, "z", s, 1).Allowed, "the cap evicts the least recently used")
	assert.Equal(t, uint64(1), tab.Counts(s).Evicted)
	assert.Equal(t, 2, tab.Len())
	impl := implOf[algorithms.FixedWindowState](tab)
	checkIndex(t, impl)
	checkHeap(t, impl, s, false)
	assert.True(t, allow(t, other, "x", s, 1).Allowed, "the other starts afresh")
}

// TestTableResetNeverCallsTheRule: Reset drops a key whose rule panics in
// every method, without asking the rule anything.
func TestTableResetNeverCallsTheRule(t *testing.T) {
	for _, in := range []string{"PeekN", "Refund", "ResetAfter", "AppendState"} {
		tab := newPanicsOnMarked(in)
		allow(t, tab, "k", 0, 2)
		tab.Reset("k")
		assert.False(t, held(tab, "k"), in)
		assert.Zero(t, tab.Counts(0).Panicked, in)
	}
}

// slotOf returns the slot that holds key.
func slotOf[S any](t *testing.T, tab *table[S], key string) uint32 {
	t.Helper()
	i, ok := tab.lookup(key)
	require.True(t, ok, "%s is held", key)
	return i
}

// TestTableRefundOfAPanickingRuleDropsTheKey: giving back the grant of a
// caller who left, the rule panics: nobody is there to tell, so the panic
// is counted, and the key dropped.
func TestTableRefundOfAPanickingRuleDropsTheKey(t *testing.T) {
	tab := newPanicsOnMarked("Refund")
	allow(t, tab, "k", 0, 2)
	allow(t, tab, "other", 0, 2)
	tab.Refund("k", 0, 2)
	assert.False(t, held(tab, "k"))
	assert.True(t, held(tab, "other"))
	assert.Equal(t, uint64(1), tab.Counts(0).Panicked)
	checkWhole(t, tab, 0)
}

// TestTablePeekInAnOverfullTable: a table given more keys than its cap
// (as Restore may) makes room for a new key only by dropping as many idle
// keys as it is over; Peek says so too, whatever the number of idle keys.
func TestTablePeekInAnOverfullTable(t *testing.T) {
	for idle := range 4 {
		tab := fixedWindows(1)
		for k := range 4 { // at 0: idle from 1s; the rest at 2s
			at := 2 * s
			if k < idle {
				at = 0
			}
			allow(t, tab, fmt.Sprint("k", k), at, 1)
		}
		tab.Bound(Limit{Max: 2}) // 4 held: 3 must go for a new key
		where := fmt.Sprintf("%d idle", idle)
		peeked, peekErr := peek(tab, "new", 2*s, 1)
		got, err := tryAllow(tab, "new", 2*s, 1)
		assert.Equal(t, got, peeked, where)
		assert.Equal(t, err, peekErr, where)
		assert.Equal(t, idle >= 3, err == nil, where)
		if err != nil {
			assert.Zero(t, tab.Counts(2*s).Expired, where+": a refused key lets no idle key go")
			assert.Equal(t, 4, tab.Len(), where)
		}
	}
}

// TestTableOverfullAfterAPanicNeedsNoMoreIdleKeysThanItIsOver: the rule
// panics on one key while the table looks for idle keys to make room; that
// key is dropped, and the table then needs one idle key fewer.
func TestTableOverfullAfterAPanicNeedsNoMoreIdleKeysThanItIsOver(t *testing.T) {
	tab := newPanicsOnMarked("ResetAfter")
	allow(t, tab, "bad", 0, 2) // its ResetAfter panics
	allow(t, tab, "i1", 0, 1)
	allow(t, tab, "i2", 0, 1)
	allow(t, tab, "busy", 2*s, 1)
	tab.Bound(Limit{Max: 2}) // 4 held: 3 must go, and bad is one of them
	_, err := tryAllow(tab, "new", 2*s, 1)
	require.NoError(t, err)
	assert.Equal(t, 2, tab.Len(), "busy and new")
	assert.Equal(t, uint64(1), tab.Counts(2*s).Panicked)
	checkWhole(t, tab, 2*s)
}

// TestTableAllowEachMarksGrantsWhoseKeyLostItsState: in a batch, a grant
// on a key that is later evicted, or whose rule later panics on it, is
// marked Gone: there is nothing left to give back for it.
func TestTableAllowEachMarksGrantsWhoseKeyLostItsState(t *testing.T) {
	tab := fixedWindows(3)
	tab.Bound(Limit{Max: 2, Evict: true})
	items := []Item{{Key: "a", N: 1}, {Key: "b", N: 1}, {Key: "c", N: 1}, {Key: "a", N: 1}, {Key: "b", N: 1}}
	tab.AllowEach(items, 0)
	gone := make([]bool, len(items))
	for k, it := range items {
		require.True(t, it.D.Allowed, "item %d", k)
		gone[k] = it.Gone
	}
	// c evicts a, a (afresh) evicts b, b (afresh) evicts c.
	assert.Equal(t, []bool{true, true, true, false, false}, gone)

	tab = newPanicsOnMarked("AllowN")
	items = []Item{{Key: "k", N: 1}, {Key: "j", N: 1}, {Key: "k", N: 3}, {Key: "k", N: 1}}
	tab.AllowEach(items, 0)
	assert.True(t, items[0].Gone, "k's first state was dropped at item 2")
	assert.False(t, items[1].Gone)
	assert.False(t, items[3].Gone, "k's present state")
}
