package algorithms

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit/algorithms/internal/wide"
	"github.com/stretchr/testify/require"
)

// Tests of Adopter: a step table per rule with exact numbers, then the
// properties every rule's Adopt keeps over random Params and schedules
// (adoptChecker), which FuzzAdopt searches further:
//
//	go test ./algorithms -run '^$' -fuzz FuzzAdopt -fuzztime 1m

// adoptSubject is a built-in rule as these tests use it.
type adoptSubject[S any] interface {
	Machine[S]
	Expiring[S]
	StateCodec[S]
	Adopter[S]
}

// adoptCase is one row of an adoption table: the grants made on a key
// under from, which must all be allowed; the key's adoption at adopt by
// the rule for to; then the steps played on it, as run plays them.
type adoptCase struct {
	name     string
	from     Params
	grants   []adoptRequest
	adopt    time.Duration
	to       Params
	wantZero bool // the adopted state is the zero state
	steps    []step
}

// adoptRequest is one request of a schedule: the clock moves on by dt, then n
// units are asked for, n capped at the rule's capacity.
type adoptRequest struct {
	dt time.Duration
	n  int
}

// runAdopt plays each case on the rule newM makes. After each step it
// checks that the decision's waits are exact: a denied request is allowed
// at now + RetryAfter and not a nanosecond before, the state is the one
// ResetAfter says, and the key is untouched at now + ResetAfter and not a
// nanosecond before.
func runAdopt[S any, M adoptSubject[S]](t *testing.T, newM func(Params) (M, error), cases []adoptCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			from, err := newM(c.from)
			require.NoError(t, err)
			to, err := newM(c.to)
			require.NoError(t, err)
			var st S
			now := time.Duration(0)
			for i, g := range c.grants {
				now += g.dt
				d, err := ask(from, &st, now, g.n)
				require.NoError(t, err)
				require.True(t, d.Allowed, "grant %d: AllowN(t+%v, %d) = %+v", i, now, g.n, d)
			}
			to.Adopt(&st, from, c.adopt)
			if c.wantZero {
				var zero S
				require.Equal(t, zero, st, "Adopt(t+%v) leaves the zero state", c.adopt)
			}
			for i, want := range c.steps {
				peeked, _ := peek(to, &st, want.at, want.n)
				got, err := ask(to, &st, want.at, want.n)
				require.NoError(t, err, "step %d", i)
				if peeked != got {
					t.Errorf("step %d: PeekN(t+%v, %d) = %+v but AllowN = %+v", i, want.at, want.n, peeked, got)
				}
				if got != want.want {
					t.Errorf("step %d: AllowN(t+%v, %d) = %+v, want %+v", i, want.at, want.n, got, want.want)
					continue
				}
				checkAdoptedWaits(t, to, &st, want.at, want.n, got)
			}
		})
	}
}

// checkAdoptedWaits checks the waits of d, the decision of n at now that
// left st.
func checkAdoptedWaits[S any, M adoptSubject[S]](t *testing.T, m M, st *S, now time.Duration, n int, d Decision) {
	t.Helper()
	if !d.Allowed {
		if later, _ := peek(m, st, now+d.RetryAfter, n); !later.Allowed {
			t.Errorf("AllowN(t+%v, %d): not allowed at RetryAfter %v", now, n, d.RetryAfter)
		}
		if early, _ := peek(m, st, now+d.RetryAfter-ns, n); early.Allowed {
			t.Errorf("AllowN(t+%v, %d): allowed 1ns before RetryAfter %v", now, n, d.RetryAfter)
		}
		if got := m.ResetAfter(st, now); got != d.ResetAfter {
			t.Errorf("AllowN(t+%v, %d) denied with ResetAfter %v, but ResetAfter(t+%v) = %v", now, n, d.ResetAfter, now, got)
		}
	}
	if !untouchedFrom(m, st, now+d.ResetAfter) {
		t.Errorf("after AllowN(t+%v, %d): not untouched at ResetAfter %v", now, n, d.ResetAfter)
	}
	if d.ResetAfter > 0 && untouchedFrom(m, st, now+d.ResetAfter-ns) {
		t.Errorf("after AllowN(t+%v, %d): untouched 1ns before ResetAfter %v", now, n, d.ResetAfter)
	}
}

// untouchedFrom reports whether st decides at at as a key never seen: the
// whole capacity, and a single unit.
func untouchedFrom[S any](m Machine[S], st *S, at time.Duration) bool {
	var fresh S
	for _, n := range []int{m.Capacity(), 1} {
		a, _ := peek(m, st, at, n)
		b, _ := peek(m, &fresh, at, n)
		if a != b {
			return false
		}
	}
	return true
}

// bucketAdoptions are the same for token_bucket and gcra, which decide
// alike.
var bucketAdoptions = []adoptCase{
	{
		// 3 tokens of 10 per second are 3 of 20 per second; 4 need 1/20s
		// more.
		name:   "FasterRefillMoreBurst",
		from:   Params{Limit: 10, Window: s},
		grants: []adoptRequest{{0, 7}},
		adopt:  0,
		to:     Params{Limit: 20, Window: s, Burst: 20},
		steps: []step{
			{at: 0, n: 4, want: Decision{Limit: 20, Remaining: 3, RetryAfter: 50 * ms, ResetAfter: 850 * ms}},
			{at: 50*ms - ns, n: 4, want: Decision{Limit: 20, Remaining: 3, RetryAfter: ns, ResetAfter: 800*ms + ns}},
			{at: 50 * ms, n: 4, want: Decision{Allowed: true, Limit: 20, Remaining: 0, ResetAfter: s}},
		},
	},
	{
		// 3 tokens, capped at Burst 2.
		name:   "BurstCaps",
		from:   Params{Limit: 10, Window: s},
		grants: []adoptRequest{{0, 7}},
		adopt:  0,
		to:     Params{Limit: 10, Window: s, Burst: 2},
		steps: []step{
			{at: 0, n: 2, want: Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 200 * ms}},
			{at: 0, n: 1, want: Decision{Limit: 10, Remaining: 0, RetryAfter: 100 * ms, ResetAfter: 200 * ms}},
		},
	},
	{
		// 150ms after an empty bucket of 10 per second, 1.5 tokens: at 1
		// per second, half a token from 2.
		name:   "FractionalTokens",
		from:   Params{Limit: 10, Window: s},
		grants: []adoptRequest{{0, 10}},
		adopt:  150 * ms,
		to:     Params{Limit: 1, Window: s, Burst: 2},
		steps: []step{
			{at: 150 * ms, n: 2, want: Decision{Limit: 1, Remaining: 1, RetryAfter: 500 * ms, ResetAfter: 500 * ms}},
			{at: 650*ms - ns, n: 2, want: Decision{Limit: 1, Remaining: 1, RetryAfter: ns, ResetAfter: ns}},
			{at: 650 * ms, n: 2, want: Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 2 * s}},
		},
	},
	{
		// 3 tokens kept in a bucket of 10 that refills at 1 per second.
		name:   "SlowerRefill",
		from:   Params{Limit: 10, Window: s},
		grants: []adoptRequest{{0, 7}},
		adopt:  0,
		to:     Params{Limit: 1, Window: s, Burst: 10},
		steps: []step{
			{at: 0, n: 4, want: Decision{Limit: 1, Remaining: 3, RetryAfter: s, ResetAfter: 7 * s}},
			{at: s, n: 4, want: Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 10 * s}},
		},
	},
	{
		// A full bucket stays full: untouched.
		name:   "FullStaysFull",
		from:   Params{Limit: 10, Window: s},
		grants: []adoptRequest{{0, 10}},
		adopt:  2 * s,
		to:     Params{Limit: 3, Window: s},
		steps: []step{
			{at: 2 * s, n: 3, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
		},
	},
	{
		// A third of a token of 1 per 3ns is 2/3 of a unit of 1 per 2ns:
		// rounded down to none.
		name:   "RoundsDown",
		from:   Params{Limit: 1, Window: 3 * ns},
		grants: []adoptRequest{{0, 1}},
		adopt:  ns,
		to:     Params{Limit: 1, Window: 2 * ns},
		steps: []step{
			{at: ns, n: 1, want: Decision{Limit: 1, Remaining: 0, RetryAfter: 2 * ns, ResetAfter: 2 * ns}},
		},
	},
}

func TestAdoptTokenBucket(t *testing.T) { runAdopt(t, NewTokenBucket, bucketAdoptions) }

func TestAdoptGCRA(t *testing.T) { runAdopt(t, NewGCRA, bucketAdoptions) }

// TestAdoptTokenBucketNowBehind: a now before the bucket's last touch is
// read as that instant, which the state keeps.
func TestAdoptTokenBucketNowBehind(t *testing.T) {
	runAdopt(t, NewTokenBucket, []adoptCase{{
		// At 100ms the bucket holds 1 token, half a token's wait from 2 at
		// 20 per second.
		name:   "ReadAtTheLastTouch",
		from:   Params{Limit: 10, Window: s},
		grants: []adoptRequest{{0, 5}, {100 * ms, 5}},
		adopt:  50 * ms,
		to:     Params{Limit: 20, Window: s, Burst: 20},
		steps: []step{
			{at: 100 * ms, n: 2, want: Decision{Limit: 20, Remaining: 1, RetryAfter: 50 * ms, ResetAfter: 950 * ms}},
		},
	}})
}

// TestAdoptLeakyBucket: the queue keeps its room, as a bucket its tokens,
// and an admitted request waits for what the new queue holds ahead of it.
func TestAdoptLeakyBucket(t *testing.T) {
	runAdopt(t, NewLeakyBucket, []adoptCase{
		{
			// 7 units queued at 10 a second drain at 700ms; at 20 a
			// second that is 14 units of a queue of 20.
			name:   "FasterDrain",
			from:   Params{Limit: 10, Window: s},
			grants: []adoptRequest{{0, 7}},
			adopt:  0,
			to:     Params{Limit: 20, Window: s, Burst: 20},
			steps: []step{
				{at: 0, n: 4, want: Decision{Allowed: true, Limit: 20, Remaining: 2, ResetAfter: 900 * ms, Delay: 700 * ms}},
				{at: 0, n: 3, want: Decision{Limit: 20, Remaining: 2, RetryAfter: 50 * ms, ResetAfter: 900 * ms}},
			},
		},
		{
			// 3 units queued of 10; a queue of 20 holds the same 3.
			name:   "KeepsQueue",
			from:   Params{Limit: 10, Window: s},
			grants: []adoptRequest{{0, 3}},
			adopt:  0,
			to:     Params{Limit: 10, Window: s, Burst: 20},
			steps: []step{
				{at: 0, n: 1, want: Decision{Allowed: true, Limit: 10, Remaining: 16, ResetAfter: 400 * ms, Delay: 300 * ms}},
			},
		},
		{
			// 7 queued, capped at a queue of 2: full for 200ms.
			name:   "BurstCaps",
			from:   Params{Limit: 10, Window: s},
			grants: []adoptRequest{{0, 7}},
			adopt:  0,
			to:     Params{Limit: 10, Window: s, Burst: 2},
			steps: []step{
				{at: 0, n: 2, want: Decision{Limit: 10, Remaining: 0, RetryAfter: 200 * ms, ResetAfter: 200 * ms}},
				{at: 200 * ms, n: 2, want: Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 200 * ms}},
			},
		},
	})
}

// TestAdoptFixedWindow: a window open at 0 for 1s with 3 units in it.
func TestAdoptFixedWindow(t *testing.T) {
	from := Params{Limit: 5, Window: s}
	grants := []adoptRequest{{0, 3}}
	runAdopt(t, NewFixedWindow, []adoptCase{
		{
			name: "ShorterWindow", from: from, grants: grants, adopt: 200 * ms,
			to: Params{Limit: 5, Window: 500 * ms},
			steps: []step{
				{at: 200 * ms, n: 2, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 300 * ms}},
				{at: 200 * ms, n: 1, want: Decision{Limit: 5, Remaining: 0, RetryAfter: 300 * ms, ResetAfter: 300 * ms}},
				{at: 500 * ms, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 500 * ms}},
			},
		},
		{
			name: "LowerLimitCapsCount", from: from, grants: grants, adopt: 200 * ms,
			to: Params{Limit: 2, Window: s},
			steps: []step{
				{at: 200 * ms, n: 1, want: Decision{Limit: 2, Remaining: 0, RetryAfter: 800 * ms, ResetAfter: 800 * ms}},
				{at: s, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
			},
		},
		{
			name: "LongerWindow", from: from, grants: grants, adopt: 200 * ms,
			to: Params{Limit: 5, Window: 2 * s},
			steps: []step{
				{at: 200 * ms, n: 3, want: Decision{Limit: 5, Remaining: 2, RetryAfter: 1800 * ms, ResetAfter: 1800 * ms}},
				{at: 200 * ms, n: 2, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 1800 * ms}},
			},
		},
		{
			name: "EndedUnderNewWindow", from: from, grants: grants, adopt: 700 * ms,
			to: Params{Limit: 5, Window: 500 * ms}, wantZero: true,
			steps: []step{
				{at: 700 * ms, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 500 * ms}},
			},
		},
		{
			// from's window has ended, though the new Window would still
			// hold it.
			name: "EndedUnderOldWindow", from: from, grants: grants, adopt: s,
			to: Params{Limit: 5, Window: 2 * s}, wantZero: true,
			steps: []step{
				{at: s, n: 5, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 2 * s}},
			},
		},
		{
			name: "NowBehindStart", from: from, grants: []adoptRequest{{s, 3}}, adopt: 0,
			to: Params{Limit: 4, Window: s},
			steps: []step{
				{at: s, n: 2, want: Decision{Limit: 4, Remaining: 1, RetryAfter: s, ResetAfter: s}},
			},
		},
	})
}

// TestAdoptSlidingWindowLog: 1 unit at 0, 2 at 300ms and 2 at 600ms, 5 per
// second.
func TestAdoptSlidingWindowLog(t *testing.T) {
	from := Params{Limit: 5, Window: s}
	grants := []adoptRequest{{0, 1}, {300 * ms, 2}, {300 * ms, 2}}
	runAdopt(t, NewSlidingWindowLog, []adoptCase{
		{
			// At 1.2s the entry at 0 has left; of the 4 units left, the
			// oldest goes: 1 at 300ms, 2 at 600ms.
			name: "CappedFromTheOldest", from: from, grants: grants, adopt: 1200 * ms,
			to: Params{Limit: 3, Window: s},
			steps: []step{
				{at: 1200 * ms, n: 1, want: Decision{Limit: 3, Remaining: 0, RetryAfter: 100 * ms, ResetAfter: 400 * ms}},
				{at: 1300 * ms, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: s}},
			},
		},
		{
			// The entry at 0 stays gone, though 2s would hold it.
			name: "LongerWindow", from: from, grants: grants, adopt: 1200 * ms,
			to: Params{Limit: 3, Window: 2 * s},
			steps: []step{
				{at: 1200 * ms, n: 1, want: Decision{Limit: 3, Remaining: 0, RetryAfter: 1100 * ms, ResetAfter: 1400 * ms}},
				{at: 2300 * ms, n: 1, want: Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 2 * s}},
			},
		},
		{
			// Only the entry at 600ms is inside 500ms at 1s.
			name: "ShorterWindow", from: from, grants: grants, adopt: s,
			to: Params{Limit: 10, Window: 500 * ms},
			steps: []step{
				{at: s, n: 9, want: Decision{Limit: 10, Remaining: 8, RetryAfter: 100 * ms, ResetAfter: 100 * ms}},
				{at: 1100 * ms, n: 10, want: Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 500 * ms}},
			},
		},
		{
			// Of 4 units, the 2 at 300ms go whole.
			name: "WholeEntryDropped", from: from, grants: grants, adopt: s,
			to: Params{Limit: 2, Window: s},
			steps: []step{
				{at: s, n: 1, want: Decision{Limit: 2, Remaining: 0, RetryAfter: 600 * ms, ResetAfter: 600 * ms}},
			},
		},
		{
			// Every entry has left: an empty log (which keeps its small
			// array, as prune does).
			name: "AllLeft", from: from, grants: grants, adopt: 1600 * ms,
			to: Params{Limit: 2, Window: s},
			steps: []step{
				{at: 1600 * ms, n: 2, want: Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: s}},
			},
		},
	})
}

// TestAdoptSlidingWindowLogEntries checks the log itself: ordered, capped
// from the oldest, without what the new Window no longer holds, and on a
// new array once most of it is dropped.
func TestAdoptSlidingWindowLogEntries(t *testing.T) {
	tests := []struct {
		name string
		give Params
		want []logEntry
	}{
		{"CappedFromTheOldest", Params{Limit: 5, Window: s}, []logEntry{{47 * ms, 1}, {48 * ms, 2}, {49 * ms, 2}}},
		{"ShorterWindow", Params{Limit: 100, Window: 3 * ms}, []logEntry{{47 * ms, 2}, {48 * ms, 2}, {49 * ms, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, err := NewSlidingWindowLog(Params{Limit: 100, Window: s})
			require.NoError(t, err)
			to, err := NewSlidingWindowLog(tt.give)
			require.NoError(t, err)
			var st SlidingWindowLogState
			for i := range 50 {
				d, _ := ask(from, &st, time.Duration(i)*ms, 2)
				require.True(t, d.Allowed)
			}
			end := func(e []logEntry) *logEntry { return &e[:cap(e)][cap(e)-1] }
			old := end(st.entries)
			to.Adopt(&st, from, 49*ms)
			require.Equal(t, tt.want, st.entries)
			require.Equal(t, 5+tt.give.Limit/100, st.total)
			require.NotSame(t, old, end(st.entries), "a log of 3 does not keep an array of 50")
		})
	}
}

// TestAdoptSlidingWindowCounter: 6 units in the window from 0, then 7 at
// 1.5s, 10 per second.
func TestAdoptSlidingWindowCounter(t *testing.T) {
	from := Params{Limit: 10, Window: s}
	grants := []adoptRequest{{0, 6}, {1500 * ms, 7}}
	runAdopt(t, NewSlidingWindowCounter, []adoptCase{
		{
			// prev 6 and cur 7 capped at 4: at 1.5s the previous window
			// weighs 1, and cur fills the window; at 2s cur weighs 3.
			name: "CountsCapped", from: from, grants: grants, adopt: 1500 * ms,
			to: Params{Limit: 4, Window: s},
			steps: []step{
				{at: 1500 * ms, n: 1, want: Decision{Limit: 4, Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
				{at: 2 * s, n: 1, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * s}},
			},
		},
		{
			// The window from 1s now lasts 2s: at 1.5s prev weighs 4.
			name: "LongerWindow", from: from, grants: grants, adopt: 1500 * ms,
			to: Params{Limit: 10, Window: 2 * s},
			steps: []step{
				{at: 1500 * ms, n: 1, want: Decision{Limit: 10, Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 3500 * ms}},
				{at: 2 * s, n: 1, want: Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 3 * s}},
			},
		},
		{
			// The window from 1s ended at 1.5s under 500ms: cur, capped
			// at 5, is the previous window of the one from 1.5s.
			name: "ShorterWindowRolls", from: from, grants: grants, adopt: 1500 * ms,
			to: Params{Limit: 5, Window: 500 * ms},
			steps: []step{
				{at: 1500 * ms, n: 2, want: Decision{Limit: 5, Remaining: 1, RetryAfter: 100 * ms, ResetAfter: 500 * ms}},
				{at: 1600 * ms, n: 2, want: Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 900 * ms}},
			},
		},
		{
			name: "BothWindowsOver", from: from, grants: grants, adopt: 3 * s,
			to: Params{Limit: 4, Window: s}, wantZero: true,
			steps: []step{
				{at: 3 * s, n: 4, want: Decision{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * s}},
			},
		},
		{
			// The window from 1s is 900ms old at 1.9s: two windows of
			// 400ms.
			name: "OverUnderNewWindow", from: from, grants: grants, adopt: 1900 * ms,
			to: Params{Limit: 10, Window: 400 * ms}, wantZero: true,
			steps: []step{
				{at: 1900 * ms, n: 10, want: Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 800 * ms}},
			},
		},
	})
}

// foreignMachine is a Machine of another concrete type than the one it
// wraps.
type foreignMachine[S any] struct{ Machine[S] }

// TestAdoptForeignMachine: a state kept by a Machine of another type,
// gcra's for leaky_bucket (which share a state) included, is not read:
// the key starts untouched.
func TestAdoptForeignMachine(t *testing.T) {
	p := Params{Limit: 3, Window: s}
	g, err := NewGCRA(p)
	require.NoError(t, err)
	l, err := NewLeakyBucket(p)
	require.NoError(t, err)
	var st GCRAState
	_, _ = ask(g, &st, 0, 3)
	require.NotZero(t, st)

	for name, adopt := range map[string]func(*GCRAState){
		"GCRAToLeakyBucket": func(st *GCRAState) { l.Adopt(st, g, 0) },
		"LeakyBucketToGCRA": func(st *GCRAState) { g.Adopt(st, l, 0) },
		"WrappedGCRA":       func(st *GCRAState) { g.Adopt(st, foreignMachine[GCRAState]{g}, 0) },
		"NilGCRA":           func(st *GCRAState) { g.Adopt(st, (*GCRA)(nil), 0) },
		"NilMachine":        func(st *GCRAState) { g.Adopt(st, nil, 0) },
		"NilLeakyBucket":    func(st *GCRAState) { l.Adopt(st, (*LeakyBucket)(nil), 0) },
	} {
		t.Run(name, func(t *testing.T) {
			c := st
			adopt(&c)
			require.Zero(t, c)
		})
	}
	c := st
	g.Adopt(&c, g, 0)
	require.Equal(t, st, c, "gcra reads its own state")
}

// Properties over random Params and schedules.

// adoption is one random case: the requests played on a key under from,
// the clock's step to the adoption by the rule for to, and the requests
// played after it.
type adoption struct {
	from, to      Params
	before, after []adoptRequest
	dt            time.Duration
}

// adoptChecker checks the adoptions of one rule, made by newM.
type adoptChecker[S any, M adoptSubject[S]] struct {
	newM func(Params) (M, error)
}

// adopted is an adoption played up to the adoption: the rules, and the
// state from kept at at.
type adopted[S any, M adoptSubject[S]] struct {
	from, twin, to M // twin is made from from's Params
	st             *S
	at             time.Duration
}

// play makes the rules for a and plays a.before. If the constructors refuse
// a's Params, it returns an errRefused that wraps their error.
func (c adoptChecker[S, M]) play(a adoption) (adopted[S, M], error) {
	from, err1 := c.newM(a.from)
	twin, _ := c.newM(a.from)
	to, err2 := c.newM(a.to)
	if err := errors.Join(err1, err2); err != nil {
		return adopted[S, M]{}, fmt.Errorf("%w: %w", errRefused, err)
	}
	st, now := new(S), time.Duration(0)
	for _, r := range a.before {
		now = saturatingAdd(now, r.dt)
		var d Decision
		from.AllowN(st, now, min(r.n, from.Capacity()), &d)
	}
	return adopted[S, M]{from: from, twin: twin, to: to, st: st, at: saturatingAdd(now, a.dt)}, nil
}

// saturatingAdd returns now + dt, saturated at the end of the timeline.
func saturatingAdd(now, dt time.Duration) time.Duration {
	if dt > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + dt
}

// cloneState returns a copy of st that shares nothing with it.
func cloneState[S any](st *S) *S {
	c := *st
	if l, ok := any(&c).(*SlidingWindowLogState); ok {
		l.entries = slices.Clone(l.entries)
	}
	return &c
}

// equalParams checks that adopting from a Machine made from equal Params
// changes no decision: the state and its adopted copy decide every request
// after, and say every ResetAfter, alike.
func (c adoptChecker[S, M]) equalParams(a adoption) error {
	p, err := c.play(a)
	if err != nil {
		return err
	}
	kept, moved := cloneState(p.st), cloneState(p.st)
	p.twin.Adopt(moved, p.from, p.at)
	return decideAlike(p.from, kept, "kept", p.twin, moved, "adopted", p.at, a.after, nil)
}

// expiringMachine is a Machine that can tell when a state is untouched,
// as every built-in one can.
type expiringMachine[S any] interface {
	Machine[S]
	Expiring[S]
}

// decideAlike plays reqs, from at on, on the state x of mx and the state y
// of my, and returns an error naming them (as xs and ys) at the first
// ResetAfter, PeekN or AllowN on which they differ, or on which check,
// if not nil, fails after y's AllowN.
func decideAlike[S any](mx expiringMachine[S], x *S, xs string, my expiringMachine[S], y *S, ys string, at time.Duration,
	reqs []adoptRequest, check func(d Decision, now time.Duration) error) error {
	now := at
	for i, r := range reqs {
		now = saturatingAdd(now, r.dt)
		n := min(r.n, mx.Capacity(), my.Capacity())
		if a, b := mx.ResetAfter(x, now), my.ResetAfter(y, now); a != b {
			return fmt.Errorf("request %d: ResetAfter(t+%v) = %v %s, %v %s", i, now, a, xs, b, ys)
		}
		var a, b Decision
		mx.PeekN(x, now, n, &a)
		my.PeekN(y, now, n, &b)
		if a != b {
			return fmt.Errorf("request %d: PeekN(t+%v, %d) = %+v %s, %+v %s", i, now, n, a, xs, b, ys)
		}
		mx.AllowN(x, now, n, &a)
		my.AllowN(y, now, n, &b)
		if a != b {
			return fmt.Errorf("request %d: AllowN(t+%v, %d) = %+v %s, %+v %s", i, now, n, a, xs, b, ys)
		}
		if check == nil {
			continue
		}
		if err := check(b, now); err != nil {
			return fmt.Errorf("request %d: AllowN(t+%v, %d) = %+v: %w", i, now, n, b, err)
		}
	}
	return nil
}

// roundTrip checks that the adopted state keeps the receiver's bounds, that
// AppendState then ParseState gives it back as a state that decides alike,
// and that every later decision is in range.
func (c adoptChecker[S, M]) roundTrip(a adoption) error {
	p, err := c.play(a)
	if err != nil {
		return err
	}
	st := cloneState(p.st)
	p.to.Adopt(st, p.from, p.at)
	if err := checkAdoptedBounds(p.to, st, p.at); err != nil {
		return fmt.Errorf("adopted %#v: %w", *st, err)
	}
	saved := p.to.AppendState(nil, st, p.at)
	loaded := new(S)
	if err := p.to.ParseState(saved, loaded, p.at, 0); err != nil {
		return fmt.Errorf("ParseState(%x) of adopted %#v: %w", saved, *st, err)
	}
	reqs := append([]adoptRequest{{0, 1}}, a.after...)
	return decideAlike(p.to, loaded, "loaded", p.to, st, "adopted", p.at, reqs, func(d Decision, now time.Duration) error {
		if err := checkInRange(d, p.to.Capacity()); err != nil {
			return err
		}
		if err := checkAdoptedBounds(p.to, st, now); err != nil {
			return fmt.Errorf("then %#v: %w", *st, err)
		}
		return nil
	})
}

// foreign checks that a from of another type, or a nil one, leaves the
// zero state.
func (c adoptChecker[S, M]) foreign(a adoption) error {
	p, err := c.play(a)
	if err != nil {
		return err
	}
	var none M
	for _, from := range []Machine[S]{foreignMachine[S]{p.from}, none, nil} {
		st := cloneState(p.st)
		p.to.Adopt(st, from, p.at)
		if !reflect.DeepEqual(*st, *new(S)) {
			return fmt.Errorf("adopted from %T: %#v, want the zero state", from, *st)
		}
	}
	return nil
}

// carried checks that the adopted state holds no more than from's did at
// the adoption: a bucket exactly min(free × perToken / from's perToken,
// full) free units, in math/big; a window no more units.
func (c adoptChecker[S, M]) carried(a adoption) error {
	p, err := c.play(a)
	if err != nil {
		return err
	}
	st := cloneState(p.st)
	p.to.Adopt(st, p.from, p.at)
	switch from := any(p.from).(type) {
	case *LeakyBucket:
		// The queue drains when it did (to the nanosecond), or is capped
		// at a full queue of the new Burst.
		to := any(p.to).(*LeakyBucket)
		x, y := any(p.st).(*GCRAState), any(st).(*GCRAState)
		was, is := from.ResetAfter(x, p.at), to.ResetAfter(y, p.at)
		if want := min(was, to.gcra.refillTime(to.gcra.full)); is != want {
			return fmt.Errorf("a queue draining in %v adopted into one draining in %v, want %v", was, is, want)
		}
	case *TokenBucket, *GCRA:
		fb, used := bucketOf(from, p.st, p.at)
		tb, adoptedUsed := bucketOf(p.to, st, p.at)
		free := bigUnits(fb.full)
		free.Sub(free, bigUnits(used))
		if free.Sign() < 0 {
			free.SetInt64(0)
		}
		want := new(big.Int).Mul(free, new(big.Int).SetUint64(tb.perToken))
		want.Quo(want, new(big.Int).SetUint64(fb.perToken))
		if full := bigUnits(tb.full); want.Cmp(full) > 0 {
			want = full
		}
		got := bigUnits(tb.full)
		got.Sub(got, bigUnits(adoptedUsed))
		if got.Cmp(want) != 0 {
			return fmt.Errorf("%v free units of %v, adopted into %v of %v, want %v", free, bigUnits(fb.full), got, bigUnits(tb.full), want)
		}
		// In whole tokens, as Remaining counts them: min(from's, Burst).
		fromTokens, toTokens := tokensAt(p.from, p.st, p.at), tokensAt(p.to, st, p.at)
		if toTokens != min(fromTokens, tb.burst) {
			return fmt.Errorf("%d tokens adopted into %d, want min(%d, Burst %d)", fromTokens, toTokens, fromTokens, tb.burst)
		}
	case *FixedWindow:
		x, y := any(p.st).(*FixedWindowState), any(st).(*FixedWindowState)
		if y.count > x.count {
			return fmt.Errorf("count %d adopted into %d", x.count, y.count)
		}
	case *SlidingWindowLog:
		x, y := any(p.st).(*SlidingWindowLogState), any(st).(*SlidingWindowLogState)
		if y.total > x.total {
			return fmt.Errorf("%d units logged, adopted into %d", x.total, y.total)
		}
	case *SlidingWindowCounter:
		x, y := any(p.st).(*SlidingWindowCounterState), any(st).(*SlidingWindowCounterState)
		units := func(s *SlidingWindowCounterState) uint64 { return uint64(s.prev) + uint64(s.cur) } // up to 2 × MaxInt
		if units(y) > units(x) {
			return fmt.Errorf("%d units counted, adopted into %d", units(x), units(y))
		}
	}
	return nil
}

// tokensAt returns the whole tokens a bucket holds at now, as PeekN counts
// them.
func tokensAt[S any](m Machine[S], st *S, now time.Duration) int {
	var d Decision
	m.PeekN(st, now, 1, &d)
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

// bucketOf returns the bucket of m, one of the bucket rules, and the units
// st misses at now.
func bucketOf(m, st any, now time.Duration) (*bucket, wide.Uint128) {
	switch m := m.(type) {
	case *TokenBucket:
		used, _ := m.usedAt(st.(*TokenBucketState), now)
		return &m.bucket, used
	case *GCRA:
		return &m.bucket, m.usedAt(st.(*GCRAState), uint64(max(now, 0)))
	case *LeakyBucket:
		return &m.gcra.bucket, m.gcra.usedAt(st.(*GCRAState), uint64(max(now, 0)))
	}
	panic(fmt.Sprintf("%T is not a bucket", m))
}

func bigUnits(x wide.Uint128) *big.Int {
	hi, lo := x.Parts()
	b := new(big.Int).SetUint64(hi)
	b.Lsh(b, 64)
	return b.Or(b, new(big.Int).SetUint64(lo))
}

// checkAdoptedBounds returns what st, a state of m at now, breaks of the bounds
// m's arithmetic and codec rely on.
func checkAdoptedBounds(m, st any, now time.Duration) error {
	switch m := m.(type) {
	case *TokenBucket:
		if s := st.(*TokenBucketState); m.full.Less(s.used) {
			return errors.New("more units used than the bucket holds")
		}
	case *GCRA, *LeakyBucket:
		b, used := bucketOf(m, st, now)
		if b.full.Less(used) {
			return errors.New("more units used than the bucket holds")
		}
		if s := st.(*GCRAState); s.frac >= b.perNs {
			return fmt.Errorf("frac %d of a nanosecond of %d", s.frac, b.perNs)
		}
	case *FixedWindow:
		if s := st.(*FixedWindowState); s.count < 0 || s.count > m.limit {
			return fmt.Errorf("count %d outside [0, %d]", s.count, m.limit)
		}
	case *SlidingWindowLog:
		s := st.(*SlidingWindowLogState)
		total := 0
		for i, e := range s.entries {
			switch {
			case e.n < 1:
				return fmt.Errorf("entry %d holds %d units", i, e.n)
			case i > 0 && e.at <= s.entries[i-1].at:
				return fmt.Errorf("entry %d out of order", i)
			case e.at > now:
				return fmt.Errorf("entry %d after now", i)
			}
			total += e.n
		}
		if total != s.total || total > m.limit {
			return fmt.Errorf("entries hold %d units, total %d, Limit %d", total, s.total, m.limit)
		}
	case *SlidingWindowCounter:
		s := st.(*SlidingWindowCounterState)
		if s.prev < 0 || s.prev > m.limit || s.cur < 0 || s.cur > m.limit {
			return fmt.Errorf("counts %d, %d outside [0, %d]", s.prev, s.cur, m.limit)
		}
		if (s.prev > 0 || s.cur > 0) && s.start > now {
			return fmt.Errorf("window starts at %v, after now %v", s.start, now)
		}
	}
	return nil
}

// checkInRange returns what d breaks of a Decision's ranges.
func checkInRange(d Decision, capacity int) error {
	switch {
	case d.Remaining < 0 || d.Remaining > capacity:
		return fmt.Errorf("Remaining outside [0, %d]", capacity)
	case d.Allowed != (d.RetryAfter == 0):
		return errors.New("RetryAfter is not 0 exactly when allowed")
	case d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0:
		return errors.New("a negative wait")
	}
	return nil
}

// adoptRule is a built-in rule and the properties its adoptions keep.
type adoptRule struct {
	name  string
	burst bool // takes a Burst

	// Each property checks one adoption. It returns an error that is
	// errRefused if the rule refuses the adoption's Params.
	properties []adoptProperty
}

type adoptProperty struct {
	name  string
	check func(adoption) error
}

// errRefused is matched by the error of a property whose adoption's Params
// the rule refused; it wraps the constructor's error.
var errRefused = errors.New("params refused")

func newAdoptRule[S any, M adoptSubject[S]](name string, burst bool, newM func(Params) (M, error)) adoptRule {
	c := adoptChecker[S, M]{newM}
	return adoptRule{name: name, burst: burst, properties: []adoptProperty{
		{"EqualParamsChangeNoDecision", c.equalParams},
		{"RoundTrip", c.roundTrip},
		{"ForeignGivesZero", c.foreign},
		{"CarriesNoMore", c.carried},
	}}
}

var adoptRules = []adoptRule{
	newAdoptRule(tokenBucket, true, NewTokenBucket),
	newAdoptRule(gcra, true, NewGCRA),
	newAdoptRule(leakyBucket, true, NewLeakyBucket),
	newAdoptRule(fixedWindow, false, NewFixedWindow),
	newAdoptRule(slidingWindowLog, false, NewSlidingWindowLog),
	newAdoptRule(slidingWindowCounter, false, NewSlidingWindowCounter),
}

// randomAdoptParams returns Params for a rule, from the edges (a Window of
// 1ns, a century, a Limit of the largest int) and from the everyday.
func randomAdoptParams(rng *rand.Rand, burst bool) Params {
	limits := []int{1, 2, 3, 7, 10, 1000, 1e9, math.MaxInt64}
	windows := []time.Duration{1, 7, time.Microsecond, ms, s, 10 * s, 1000 * time.Hour, 100 * 365 * 24 * time.Hour}
	p := Params{Limit: limits[rng.IntN(len(limits))], Window: windows[rng.IntN(len(windows))]}
	if rng.IntN(2) == 0 {
		p = Params{Limit: 1 + rng.IntN(20), Window: 1 + time.Duration(rng.Int64N(int64(3*s)))}
	}
	if burst && rng.IntN(2) == 0 {
		p.Burst = []int{1, 2, 1 + rng.IntN(50), p.Limit}[rng.IntN(4)]
	}
	return p
}

// nearbyParams returns Params a little off p: a Limit, Window and Burst
// each halved, kept, a little up or doubled, so that a state holds about
// as much as the new Params allow.
func nearbyParams(rng *rand.Rand, p Params) Params {
	near := func(x int64) int64 {
		switch rng.IntN(4) {
		case 0:
			return max(x/2, 1)
		case 1:
			return x
		case 2:
			return x + 1 + rng.Int64N(3)
		}
		return x * 2
	}
	q := Params{Limit: int(near(int64(p.Limit))), Window: time.Duration(near(int64(p.Window)))}
	if p.Burst > 0 {
		q.Burst = int(near(int64(p.Burst)))
	}
	return q
}

// decodeAdoption turns bytes into an adoption from one Params to another.
// The first byte says how many requests come before the adoption, the
// second the clock's step to it; then two bytes a request, the first
// picking the clock's step, the second the n.
func decodeAdoption(from, to Params, data []byte) adoption {
	a := adoption{from: from, to: to}
	if len(data) < 2 {
		return a
	}
	k := int(data[0] % 32)
	a.dt = decodeStep(from, to, data[1])
	for i := 2; i+1 < len(data) && i < 2+2*64; i += 2 {
		r := adoptRequest{dt: decodeStep(from, to, data[i]), n: decodeN(data[i+1])}
		if len(a.before) < k {
			a.before = append(a.before, r)
		} else {
			a.after = append(a.after, r)
		}
	}
	return a
}

// decodeStep returns a clock step: none, 1ns, a token or about a Window of
// either Params, a small part of a Window, or years.
func decodeStep(from, to Params, b byte) time.Duration {
	p := from
	if b&16 != 0 {
		p = to
	}
	w, m := max(p.Window, 1), time.Duration(b>>5)
	switch b % 16 {
	case 0, 1, 2:
		return 0
	case 3:
		return 1
	case 4:
		return max(w/time.Duration(max(p.Limit, 1)), 1)
	case 5:
		return w - 1
	case 6:
		return w
	case 7:
		return w + 1
	case 8:
		return m * 365 * 24 * time.Hour
	}
	return w / 32 * m
}

// decodeN returns an n, which the rule caps at its capacity: 1, the
// capacity, a few, or many.
func decodeN(b byte) int {
	switch b % 4 {
	case 1:
		return math.MaxInt
	case 2:
		return 1 + int(b>>2)
	case 3:
		return 1 + int(b>>2)*1e6
	}
	return 1
}

// TestAdoptProperties checks every property on random adoptions of every
// rule: to Params of its own half the time, and always to random ones.
func TestAdoptProperties(t *testing.T) {
	for _, r := range adoptRules {
		for _, prop := range r.properties {
			t.Run(r.name+"/"+prop.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, uint64(len(r.name))))
				for i := 0; i < 300; {
					from := randomAdoptParams(rng, r.burst)
					to := randomAdoptParams(rng, r.burst)
					switch rng.IntN(4) {
					case 0:
						to = from
					case 1:
						to = nearbyParams(rng, from)
					}
					data := make([]byte, 2+2*rng.IntN(40))
					for j := range data {
						data[j] = byte(rng.Uint32())
					}
					err := prop.check(decodeAdoption(from, to, data))
					if errors.Is(err, errRefused) {
						continue
					}
					i++
					if err != nil {
						t.Fatalf("adoption from %+v to %+v, data %x: %v", from, to, data, err)
					}
				}
			})
		}
	}
}

// FuzzAdopt plays arbitrary requests under arbitrary Params on any rule,
// adopts the key into other arbitrary Params, and checks every property.
func FuzzAdopt(f *testing.F) {
	seeds := []struct {
		rule     uint8
		from, to Params
		data     []byte
	}{
		{0, Params{Limit: 10, Window: s}, Params{Limit: 20, Window: s, Burst: 20}, []byte{2, 0, 0, 1, 5, 2, 3, 1, 5, 1}},
		{1, Params{Limit: 3, Window: s}, Params{Limit: 7, Window: 10 * s, Burst: 2}, []byte{3, 1, 0, 1, 5, 2, 6, 6, 0, 1, 3, 1}},
		{2, Params{Limit: 1, Window: 3}, Params{Limit: 999, Window: 2}, []byte{1, 1, 0, 1, 0, 1, 1, 1}},
		{3, Params{Limit: 5, Window: s}, Params{Limit: 2, Window: 500 * ms}, []byte{2, 6, 0, 2, 6, 2, 0, 1, 14, 1}},
		{4, Params{Limit: 5, Window: s}, Params{Limit: 3, Window: 2 * s}, []byte{3, 6, 0, 6, 6, 2, 6, 2, 0, 1, 5, 1}},
		{5, Params{Limit: 10, Window: s}, Params{Limit: 4, Window: 400 * ms}, []byte{2, 6, 0, 6, 6, 2, 0, 1, 12, 1}},
		{0, Params{Limit: math.MaxInt64, Window: 1}, Params{Limit: 1, Window: 1000 * time.Hour, Burst: 1}, []byte{2, 0, 0, 1, 0, 1, 0, 1}},
		{4, Params{Limit: math.MaxInt64, Window: 100 * 365 * 24 * time.Hour}, Params{Limit: 1, Window: 1}, []byte{4, 1, 0, 3, 1, 3, 1, 2, 7, 1, 0, 1}},
		{5, Params{Limit: 0, Window: s}, Params{Limit: 1, Window: s}, nil},
	}
	for _, s := range seeds {
		f.Add(s.rule, int64(s.from.Limit), int64(s.from.Window), int64(s.from.Burst), int64(s.to.Limit), int64(s.to.Window), int64(s.to.Burst), s.data)
	}
	f.Fuzz(func(t *testing.T, rule uint8, limit1, window1, burst1, limit2, window2, burst2 int64, data []byte) {
		r := adoptRules[int(rule)%len(adoptRules)]
		from := Params{Limit: int(limit1), Window: time.Duration(window1), Burst: int(burst1)}
		to := Params{Limit: int(limit2), Window: time.Duration(window2), Burst: int(burst2)}
		a := decodeAdoption(from, to, data)
		for _, prop := range r.properties {
			err := prop.check(a)
			if errors.Is(err, errRefused) {
				if !errors.Is(err, ErrInvalidParams) {
					t.Fatalf("%s: %+v or %+v refused with %v, want an ErrInvalidParams", r.name, from, to, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s %s: adoption from %+v to %+v: %v", r.name, prop.name, from, to, err)
			}
		}
	})
}
