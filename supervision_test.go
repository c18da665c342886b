package chanlimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/clocktest"
)

// Test doubles for supervision: rules and clocks that panic on cue.

// panicsOnTwoOrThree is a fixed window that panics on a request for 2
// units, with an error and after half-writing the state, and on one for
// 3, with a string. Peek panics on 2 as well.
type panicsOnTwoOrThree struct{ *algorithms.FixedWindow }

var errTwo = errors.New("two")

func (m panicsOnTwoOrThree) AllowN(s *algorithms.FixedWindowState, now time.Duration, n int, d *chanlimit.Decision) {
	switch n {
	case 2:
		*s = algorithms.FixedWindowState{} // half-written, then
		panic(errTwo)
	case 3:
		panic("three")
	}
	m.FixedWindow.AllowN(s, now, n, d)
}

func (m panicsOnTwoOrThree) PeekN(s *algorithms.FixedWindowState, now time.Duration, n int, d *chanlimit.Decision) {
	if n == 2 {
		panic(errTwo)
	}
	m.FixedWindow.PeekN(s, now, n, d)
}

// register registers a rule of fixed windows that newMachine wraps, under
// a name of its own each run, and returns the name.
func register[S any, M algorithms.Machine[S]](t *testing.T, newMachine func(*algorithms.FixedWindow) M) string {
	t.Helper()
	name := fmt.Sprint("test_", t.Name(), "_", registrations.Add(1))
	require.NoError(t, chanlimit.Register[S](name, func(p algorithms.Params) (M, error) {
		fw, err := algorithms.NewFixedWindow(p)
		if err != nil {
			var zero M
			return zero, err
		}
		return newMachine(fw), nil
	}))
	return name
}

func TestAPanickingAlgorithmFailsOnlyItsRequest(t *testing.T) {
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) panicsOnTwoOrThree {
		return panicsOnTwoOrThree{fw}
	})
	r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Partitions: 1})
	require.True(t, allowN(t, r, "k", 1).Allowed)
	require.True(t, allowN(t, r, "other", 1).Allowed)

	d, err := r.AllowN(bg, "k", 2)
	assert.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	assert.ErrorIs(t, err, errTwo, "the panic's error is wrapped")
	assert.Equal(t, chanlimit.Decision{}, d)
	_, err = r.AllowN(bg, "k", 3)
	assert.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	assert.ErrorContains(t, err, "three")
	_, err = r.Peek(bg, "third", 2)
	assert.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	require.True(t, allowN(t, r, "brand new", 1).Allowed, "a Peek that panicked on an unseen key harms no new key")

	assert.Equal(t, 3, allowN(t, r, "k", 1).Remaining+1, "k's state was dropped: it starts afresh")
	assert.Equal(t, 3, allowN(t, r, "third", 1).Remaining+1, "the partition goes on")
	assert.Equal(t, 1, allowN(t, r, "other", 1).Remaining, "other keys keep their state")
	_, err = r.Peek(bg, "other", 2)
	assert.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	assert.Equal(t, 2, allowN(t, r, "other", 1).Remaining, "a Peek that panics drops its key too")

	out := make([]chanlimit.Decision, 3)
	err = r.AllowBatch(bg, []chanlimit.Request{{Key: "b", N: 1}, {Key: "b", N: 2}, {Key: "b", N: 1}}, out)
	assert.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	assert.ErrorContains(t, err, "request 1")
	assert.True(t, out[0].Allowed)
	assert.Equal(t, chanlimit.Decision{}, out[1])
	assert.True(t, out[2].Allowed, "the rest of the batch is decided")
	assert.Equal(t, 2, out[2].Remaining, "b was dropped at request 1")

	st := stats(t, r)
	assert.Equal(t, uint64(5), st.Panicked)
	assert.Zero(t, st.Refused, "a panic is counted once, as a panic")
}

// panicsInResetAfter is a fixed window whose ResetAfter panics for a key
// once allowed a request for 2 units: the partition asks it outside any
// request of that key, while expiring keys, counting idle ones and making
// room for a new key.
type panicsInResetAfter struct{ *algorithms.FixedWindow }

type markedState struct {
	fw     algorithms.FixedWindowState
	marked bool
}

func (m panicsInResetAfter) AllowN(s *markedState, now time.Duration, n int, d *chanlimit.Decision) {
	m.FixedWindow.AllowN(&s.fw, now, n, d)
	s.marked = s.marked || (d.Allowed && n == 2)
}

func (m panicsInResetAfter) PeekN(s *markedState, now time.Duration, n int, d *chanlimit.Decision) {
	m.FixedWindow.PeekN(&s.fw, now, n, d)
}

func (m panicsInResetAfter) Refund(s *markedState, now time.Duration, n int) {
	m.FixedWindow.Refund(&s.fw, now, n)
}

func (m panicsInResetAfter) ResetAfter(s *markedState, now time.Duration) time.Duration {
	if s.marked {
		panic("asked when it is idle")
	}
	return m.FixedWindow.ResetAfter(&s.fw, now)
}

// TestAPanickingResetAfterDropsItsKey: when the rule panics while the
// partition asks when a key is untouched, outside any request of that
// key, the key is dropped and the panic counted, and whatever asked goes
// on: a new key takes the room, Stats counts, keys expire.
func TestAPanickingResetAfterDropsItsKey(t *testing.T) {
	name := register[markedState](t, func(fw *algorithms.FixedWindow) panicsInResetAfter { return panicsInResetAfter{fw} })
	r, clk := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Partitions: 1, MaxKeys: 2})

	// Making room: the key to be replaced panics.
	require.True(t, allowN(t, r, "bad", 2).Allowed)
	require.True(t, allowN(t, r, "good", 1).Allowed)
	clk.Advance(1500 * time.Millisecond) // both idle, within their grace
	assert.True(t, allowN(t, r, "new", 1).Allowed, "bad panicked and was dropped: room for the new key")

	// Counting idle keys.
	require.True(t, allowN(t, r, "bad", 2).Allowed) // takes good's place
	clk.Advance(1500 * time.Millisecond)
	st := stats(t, r)
	assert.Equal(t, 1, st.Keys+st.Idle, "bad is gone, new is left")

	// Expiring, after a request.
	require.True(t, allowN(t, r, "bad", 2).Allowed)
	clk.Advance(5 * time.Second)
	require.True(t, allowN(t, r, "good", 1).Allowed, "expiring bad comes after this answer")
	st = stats(t, r)
	assert.Equal(t, 1, st.Keys, "only good is held")
	assert.Equal(t, uint64(3), st.Panicked, "making room, counting, expiring")
	assert.True(t, allowN(t, r, "bad", 1).Allowed, "bad starts afresh")
}

// TestResetNeverRunsTheAlgorithm: Reset drops a key without asking its
// rule anything, so a rule that panics at every question cannot make it
// fail.
func TestResetNeverRunsTheAlgorithm(t *testing.T) {
	name := register[markedState](t, func(fw *algorithms.FixedWindow) panicsInResetAfter { return panicsInResetAfter{fw} })
	r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second})
	require.True(t, allowN(t, r, "k", 2).Allowed)
	require.NoError(t, r.Reset(bg, "k"))
	st := stats(t, r)
	assert.Zero(t, st.Keys+st.Idle)
	assert.Zero(t, st.Panicked)
}

// blocksOnTwo is a fixed window whose AllowN, for 2 units, waits for a
// receive from gate and then panics.
type blocksOnTwo struct {
	*algorithms.FixedWindow
	gate chan struct{}
}

func (m blocksOnTwo) AllowN(s *algorithms.FixedWindowState, now time.Duration, n int, d *chanlimit.Decision) {
	if n == 2 {
		<-m.gate
		panic("let go, then panicked")
	}
	m.FixedWindow.AllowN(s, now, n, d)
}

// TestAPanicWhoseCallerLeftIsCounted: the caller gives up while the rule
// decides its request; the rule then panics, and drops the key: nobody
// hears of it but Stats.
func TestAPanicWhoseCallerLeftIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) blocksOnTwo { return blocksOnTwo{fw, gate} })
		r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Partitions: 1})
		require.True(t, allowN(t, r, "k", 1).Allowed)

		ctx, cancel := context.WithCancel(bg)
		failed := make(chan error, 1)
		go func() {
			_, err := r.AllowN(ctx, "k", 2)
			failed <- err
		}()
		synctest.Wait() // the partition is inside the rule
		cancel()
		assert.ErrorIs(t, <-failed, context.Canceled)
		gate <- struct{}{}

		st := stats(t, r)
		assert.Equal(t, uint64(1), st.Panicked)
		assert.Zero(t, st.Keys+st.Idle, "k was dropped")
		assert.Equal(t, uint64(1), st.Allowed, "the answer nobody heard counts nowhere else")
	})
}

// TestCloseWaitsForTheAlgorithm: Close returns once every partition has
// exited, and a partition exits only when the request it serves returns;
// as its documentation says, an algorithm that never returns would keep
// Close from returning.
func TestCloseWaitsForTheAlgorithm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) blocksOnTwo { return blocksOnTwo{fw, gate} })
		r, err := chanlimit.New(chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Partitions: 1, Clock: clock.NewFake(epoch)})
		require.NoError(t, err)

		failed := make(chan error, 1)
		go func() {
			_, err := r.AllowN(bg, "k", 2)
			failed <- err
		}()
		synctest.Wait()
		closed := make(chan struct{})
		go func() {
			assert.NoError(t, r.Close())
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while the algorithm was still deciding")
		default:
		}
		gate <- struct{}{}
		<-closed
		assert.ErrorIs(t, <-failed, chanlimit.ErrAlgorithmPanic, "the request it served was answered")
	})
}

// TestAllowBatchReturnsTheFirstRefusalInRequestOrder: with requests
// refused in two partitions, the error is the first refused request's in
// reqs, whichever partition holds it.
func TestAllowBatchReturnsTheFirstRefusalInRequestOrder(t *testing.T) {
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) panicsOnTwoOrThree {
		return panicsOnTwoOrThree{fw}
	})
	r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Partitions: 2})
	// One key in each partition, the second partition's first in reqs.
	var first, second string
	for i := 0; first == "" || second == ""; i++ {
		key := fmt.Sprint("key-", i)
		switch partitionOf(t, r, key) {
		case 0:
			second = cmpOr(second, key)
		case 1:
			first = cmpOr(first, key)
		}
	}
	reqs := []chanlimit.Request{{Key: first, N: 3}, {Key: second, N: 2}, {Key: first, N: 1}}
	out := make([]chanlimit.Decision, len(reqs))
	err := r.AllowBatch(bg, reqs, out)
	require.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	assert.ErrorContains(t, err, "request 0")
	assert.ErrorContains(t, err, "three")
	assert.True(t, out[2].Allowed)
}

// partitionOf returns the index of the partition that holds key, found by
// allowing key and resetting it.
func partitionOf(t *testing.T, r *chanlimit.Router, key string) int {
	t.Helper()
	require.True(t, allowN(t, r, key, 1).Allowed)
	defer func() { require.NoError(t, r.Reset(bg, key)) }()
	for i, p := range stats(t, r).Partitions {
		if p.Keys > 0 {
			return i
		}
	}
	t.Fatalf("%s is held nowhere", key)
	return -1
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestPeekAnswersWhatAllowNWouldWhenMaxKeysIsReached: a new key that
// AllowN would refuse for want of room, Peek refuses too; one that AllowN
// would let in, Peek allows.
func TestPeekAnswersWhatAllowNWouldWhenMaxKeysIsReached(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, MaxKeys: 2, Partitions: 1})
	require.True(t, allowN(t, r, "a", 1).Allowed)
	require.True(t, allowN(t, r, "b", 1).Allowed)

	peeked, peekErr := r.Peek(bg, "new", 1)
	got, err := r.AllowN(bg, "new", 1)
	require.ErrorIs(t, err, chanlimit.ErrTooManyKeys)
	require.ErrorIs(t, peekErr, chanlimit.ErrTooManyKeys)
	assert.Equal(t, got, peeked)

	clk.Advance(time.Second) // a and b are idle: room
	peeked, err = r.Peek(bg, "new", 1)
	require.NoError(t, err)
	assert.True(t, peeked.Allowed)
	assert.Equal(t, 2, stats(t, r).Idle, "Peek let no key go")
	assert.Equal(t, peeked, allowN(t, r, "new", 1))
}

// TestRestoreOnAClockPastTheYear2262 (and before 1678, where Unix
// nanoseconds do not reach either): a router restored with no time passed
// answers as the original would, for every algorithm.
func TestRestoreOnAClockPastTheYear2262(t *testing.T) {
	for _, start := range []time.Time{
		time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
	} {
		for _, algorithm := range registered {
			t.Run(fmt.Sprint(start.Year(), "/", algorithm), func(t *testing.T) {
				clk := clock.NewFake(start)
				cfg := chanlimit.Config{Algorithm: algorithm, Limit: 3, Window: time.Minute, Clock: clk}
				a, err := chanlimit.New(cfg)
				require.NoError(t, err)
				defer a.Close()
				for range 3 {
					a.Allow("k")
				}
				clk.Advance(time.Second)
				var buf bytes.Buffer
				require.NoError(t, a.Snapshot(bg, &buf))
				b, err := chanlimit.New(cfg)
				require.NoError(t, err)
				defer b.Close()
				require.NoError(t, b.Restore(bg, &buf))
				want, err := a.Peek(bg, "k", 1)
				require.NoError(t, err)
				require.False(t, want.Allowed)
				got, err := b.Peek(bg, "k", 1)
				require.NoError(t, err)
				assert.Equal(t, want, got)
			})
		}
	}
}

// TestAClockThatPanicsFailsRequestsNotTheProcess: while the clock panics,
// the requests that need the time fail with ErrClockPanic wrapping its
// value, a batch's one by one; Reset and Stats need none and go on at the
// latest reading that worked; Snapshot and Restore, which read the time of
// day, fail whole. Once it reads again, every partition goes on where it
// was, and Close returns.
func TestAClockThatPanicsFailsRequestsNotTheProcess(t *testing.T) {
	clk := clocktest.NewRigged(epoch)
	r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Partitions: 2, Clock: clk})
	require.NoError(t, err)
	require.True(t, allowN(t, r, "k", 1).Allowed)
	require.True(t, allowN(t, r, "gone", 1).Allowed)
	var snap bytes.Buffer
	require.NoError(t, r.Snapshot(bg, &snap))

	clk.Rig(func() { panic("the clock is broken") })
	_, err = r.AllowN(bg, "k", 1)
	require.ErrorIs(t, err, chanlimit.ErrClockPanic)
	assert.ErrorContains(t, err, "the clock is broken")
	_, err = r.Peek(bg, "k", 1)
	require.ErrorIs(t, err, chanlimit.ErrClockPanic)
	out := make([]chanlimit.Decision, 2)
	err = r.AllowBatch(bg, []chanlimit.Request{{Key: "a", N: 1}, {Key: "b", N: 1}}, out)
	require.ErrorIs(t, err, chanlimit.ErrClockPanic)
	assert.ErrorContains(t, err, "request 0")
	require.NoError(t, r.Reset(bg, "gone"))
	assert.ErrorIs(t, r.Snapshot(bg, &bytes.Buffer{}), chanlimit.ErrClockPanic, "it reads the time of day")
	assert.ErrorIs(t, r.Restore(bg, bytes.NewReader(snap.Bytes())), chanlimit.ErrClockPanic)
	st := stats(t, r)
	assert.Equal(t, 1, st.Keys, "k; gone was reset, and the Restore loaded nothing")
	assert.Equal(t, uint64(2), st.Allowed)
	assert.GreaterOrEqual(t, st.Panicked, uint64(5), "each reading that panicked")

	clk.Rig(nil)
	require.NoError(t, r.Restore(bg, bytes.NewReader(snap.Bytes())))
	assert.Equal(t, 2, stats(t, r).Keys, "the snapshot's k and gone")
	d := allowN(t, r, "k", 1)
	assert.True(t, d.Allowed)
	assert.Zero(t, d.Remaining, "k's first unit is still taken")
	assert.NoError(t, r.Close())
}

// TestNewLeavesNoGoroutineWhenItFails: a clock that panics at any of its
// readings, or a rule that panics once made, never makes New panic or
// leak: New reads the clock once, before it starts any partition, and
// returns ErrInvalidConfig if that reading panics.
func TestNewLeavesNoGoroutineWhenItFails(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for from := int64(1); from <= 3; from++ {
		clk := clocktest.NewRigged(epoch)
		var calls atomic.Int64
		clk.Rig(func() { // the readings numbered from on panic, counting from 1
			if n := calls.Add(1); n >= from {
				panic(fmt.Sprint("reading ", n))
			}
		})
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second, Partitions: 4, Clock: clk})
		if from == 1 {
			require.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
			require.ErrorIs(t, err, chanlimit.ErrClockPanic)
			assert.ErrorContains(t, err, "reading 1")
			assert.Nil(t, r)
			continue
		}
		require.NoError(t, err, "New reads the clock once")
		for reading := int64(2); reading <= from; reading++ { // a reading per request
			_, err = r.AllowN(bg, "k", 1)
			if reading < from {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, chanlimit.ErrClockPanic)
			}
		}
		require.NoError(t, r.Close())
	}
	_, err := chanlimit.New(chanlimit.Config{Algorithm: "test_typed_nil", Limit: 1, Window: time.Second, Partitions: 4})
	require.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
}

// exitsOnTwo is a fixed window whose AllowN, for 2 units, calls
// runtime.Goexit, as t.FailNow or a failed require in a rule would:
// every time, or with once set, only while once holds true, and once.
type exitsOnTwo struct {
	*algorithms.FixedWindow
	once *atomic.Bool
}

func (m exitsOnTwo) AllowN(s *algorithms.FixedWindowState, now time.Duration, n int, d *chanlimit.Decision) {
	if n == 2 && (m.once == nil || m.once.CompareAndSwap(true, false)) {
		runtime.Goexit()
	}
	m.FixedWindow.AllowN(s, now, n, d)
}

// TestARuleThatCallsGoexitFailsOnlyItsRequest: nothing stops a Goexit, so
// the partition answers the request as if the rule had panicked, drops the
// key, counts it, and serves on in a goroutine of its own.
func TestARuleThatCallsGoexitFailsOnlyItsRequest(t *testing.T) {
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) exitsOnTwo { return exitsOnTwo{FixedWindow: fw} })
	r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Partitions: 1})
	require.True(t, allowN(t, r, "k", 1).Allowed)
	_, err := r.AllowN(bg, "k", 2)
	require.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	assert.Equal(t, 2, allowN(t, r, "k", 1).Remaining, "k was dropped: it starts afresh")
	assert.Equal(t, uint64(1), stats(t, r).Panicked)
}

func TestAClockThatCallsGoexitFailsOnlyItsRequest(t *testing.T) {
	clk := clocktest.NewRigged(epoch)
	r, err := chanlimit.New(chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 1, Clock: clk})
	require.NoError(t, err)
	clk.Rig(runtime.Goexit)
	_, err = r.AllowN(bg, "k", 1)
	require.ErrorIs(t, err, chanlimit.ErrClockPanic)
	clk.Rig(nil)
	assert.True(t, allowN(t, r, "k", 1).Allowed)
	st := stats(t, r)
	assert.Equal(t, uint64(1), st.Panicked)
	assert.Zero(t, st.Refused, "counted as a panic, not as a refusal")

	clk.Rig(runtime.Goexit) // at the reading that comes with the stop message too
	require.NoError(t, r.Close())
}

// touchy is an error whose Is panics: the router must never ask it.
type touchy struct{}

func (touchy) Error() string { return "touchy" }
func (touchy) Is(error) bool { panic("Is asked") }

// TestPanicValuesAreNeverAsked: a panic's value, or a constructor's
// error, is the misbehaving code's too; chanlimit wraps it and never calls
// its methods, so one whose Is panics crashes nothing.
func TestPanicValuesAreNeverAsked(t *testing.T) {
	clk := clocktest.NewRigged(epoch)
	r, err := chanlimit.New(chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 1, Clock: clk})
	require.NoError(t, err)
	defer r.Close()
	clk.Rig(func() { panic(touchy{}) })
	_, err = r.AllowN(bg, "k", 1)
	assert.ErrorIs(t, err, chanlimit.ErrClockPanic)
	clk.Rig(nil)
	assert.Equal(t, uint64(1), stats(t, r).Panicked)

	type state = algorithms.TokenBucketState
	panics := fmt.Sprint("test_panics_touchy_", registrations.Add(1))
	require.NoError(t, chanlimit.Register(panics, func(algorithms.Params) (algorithms.Machine[state], error) { panic(touchy{}) }))
	_, err = chanlimit.New(chanlimit.Config{Algorithm: panics, Limit: 1, Window: time.Second})
	assert.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
	refuses := fmt.Sprint("test_refuses_touchy_", registrations.Add(1))
	require.NoError(t, chanlimit.Register(refuses, func(algorithms.Params) (algorithms.Machine[state], error) { return nil, touchy{} }))
	_, err = chanlimit.New(chanlimit.Config{Algorithm: refuses, Limit: 1, Window: time.Second})
	assert.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
	assert.ErrorContains(t, err, "touchy")
}

// TestAClockPanicOfNilIsAPanic: with GODEBUG=panicnil=1, recover says nil
// for panic(nil); the partition meets it as a panic all the same, so a
// frozen clock grants no more than capacity.
func TestAClockPanicOfNilIsAPanic(t *testing.T) {
	t.Setenv("GODEBUG", "panicnil=1")
	clk := clocktest.NewRigged(epoch)
	r, err := chanlimit.New(chanlimit.Config{Limit: 10, Window: time.Hour, Partitions: 1, Clock: clk})
	require.NoError(t, err)
	defer r.Close()
	clk.Advance(time.Hour)
	granted := 0
	for i := range 5 {
		if i == 2 {
			clk.Rig(func() { panic(nil) })
		} else {
			clk.Rig(nil)
		}
		d, err := r.AllowN(bg, "k", 10)
		if i == 2 {
			assert.ErrorIs(t, err, chanlimit.ErrClockPanic)
		}
		if err == nil && d.Allowed {
			granted += 10
		}
	}
	assert.Equal(t, 10, granted, "the frozen clock's capacity, once")
}

// parseStatePanics is a fixed window whose ParseState panics.
type parseStatePanics struct{ *algorithms.FixedWindow }

func (parseStatePanics) ParseState([]byte, *algorithms.FixedWindowState, time.Duration, time.Duration) error {
	panic("cannot parse")
}

// TestRestoreCountsThePanicsOfItsLoading: a rule that panics while Restore
// loads a snapshot fails the Restore, which loads nothing, and the panic
// counts in Stats.Panicked.
func TestRestoreCountsThePanicsOfItsLoading(t *testing.T) {
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) parseStatePanics { return parseStatePanics{fw} })
	cfg := chanlimit.Config{Algorithm: name, Limit: 2, Window: time.Minute}
	a, _ := newRouter(t, cfg)
	b, _ := newRouter(t, cfg)
	allowN(t, a, "k", 1)
	var buf bytes.Buffer
	require.NoError(t, a.Snapshot(bg, &buf))
	err := b.Restore(bg, &buf)
	require.ErrorIs(t, err, chanlimit.ErrBadSnapshot)
	require.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	st := stats(t, b)
	assert.Equal(t, uint64(1), st.Panicked)
	assert.Zero(t, st.Keys)
}

// slowReadClock is a Fake on which a minute passes while Now is read, once
// armed: a stand-in for the time a snapshot of many keys takes. (Since,
// the partition's reading, is the Fake's own.)
type slowReadClock struct {
	*clock.Fake
	armed atomic.Bool
}

func (c *slowReadClock) Now() time.Time {
	if c.armed.Swap(false) {
		c.Fake.Advance(time.Minute)
	}
	return c.Fake.Now()
}

// TestSnapshotRecordsTheReadingItsStatesAreSavedAt: each partition's part
// carries the clock reading its states were saved at, not a later one, so
// the time a snapshot takes is not lost and a restored router is no
// stricter than the original.
func TestSnapshotRecordsTheReadingItsStatesAreSavedAt(t *testing.T) {
	clk := &slowReadClock{Fake: clock.NewFake(epoch)}
	cfg := chanlimit.Config{Limit: 10, Window: 10 * time.Second, Clock: clk, Partitions: 1}
	a, err := chanlimit.New(cfg)
	require.NoError(t, err)
	defer a.Close()
	allowN(t, a, "k", 10)
	var buf bytes.Buffer
	clk.armed.Store(true)
	require.NoError(t, a.Snapshot(bg, &buf))
	clk.armed.Store(false)
	clk.Advance(time.Minute) // as if reading the clock had taken a minute
	want, got := peekRestored(t, a, cfg, &buf, "k", 10)
	assert.Equal(t, want, got)
	assert.True(t, got.Allowed)
}

// peekRestored restores snap into a new router of cfg, and returns what
// the original and the restored router answer to Peek(key, n).
func peekRestored(t *testing.T, original *chanlimit.Router, cfg chanlimit.Config, snap io.Reader, key string, n int) (want, got chanlimit.Decision) {
	t.Helper()
	b, err := chanlimit.New(cfg)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Restore(bg, snap))
	want, err = original.Peek(bg, key, n)
	require.NoError(t, err)
	got, err = b.Peek(bg, key, n)
	require.NoError(t, err)
	return want, got
}

// exitsInRefund is a fixed window whose AllowN waits for gate on a request
// for 3 units (if gate is not nil) and runs runtime.Goexit on one for 2,
// and whose Refund of 1 unit runs runtime.Goexit.
type exitsInRefund struct {
	*algorithms.FixedWindow
	gate chan struct{}
}

func (m exitsInRefund) AllowN(s *algorithms.FixedWindowState, now time.Duration, n int, d *chanlimit.Decision) {
	switch {
	case n == 2:
		runtime.Goexit()
	case n == 3 && m.gate != nil:
		<-m.gate
	}
	m.FixedWindow.AllowN(s, now, n, d)
}

func (m exitsInRefund) Refund(s *algorithms.FixedWindowState, now time.Duration, n int) {
	if n == 1 {
		runtime.Goexit()
	}
	m.FixedWindow.Refund(s, now, n)
}

// TestAGoexitWhileABatchIsGivenBackGoesOn: the rule ends the goroutine
// deciding a batch, then again giving back the batch's first grant: each
// goroutine that carries on goes on from where the last stopped, the batch
// is answered, and the partition serves on and closes.
func TestAGoexitWhileABatchIsGivenBackGoesOn(t *testing.T) {
	name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) exitsInRefund { return exitsInRefund{fw, nil} })
	r, err := chanlimit.New(chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second, Partitions: 1, Clock: clock.NewFake(epoch)})
	require.NoError(t, err)
	out := make([]chanlimit.Decision, 2)
	err = r.AllowBatch(bg, []chanlimit.Request{{Key: "a", N: 1}, {Key: "b", N: 2}}, out)
	require.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	assert.True(t, allowN(t, r, "other", 1).Allowed, "the partition goes on")
	assert.Equal(t, 2, allowN(t, r, "a", 1).Remaining, "a was dropped when its refund ended the goroutine: it starts afresh")
	require.NoError(t, r.Close())
}

// TestAGoexitWhileAnUndeliveredBatchIsGivenBackRefundsOnce: the caller gave
// up while its batch was decided, and the rule ends the goroutine while the
// partition gives the grants back, latest first: the grants already given
// back are not given back again by the goroutine that carries on.
func TestAGoexitWhileAnUndeliveredBatchIsGivenBackRefundsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		name := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) exitsInRefund { return exitsInRefund{fw, gate} })
		r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 5, Window: time.Second, Partitions: 1})
		require.True(t, allowN(t, r, "b", 1).Allowed)
		require.True(t, allowN(t, r, "b", 1).Allowed, "b: 2 of 5 used")

		ctx, cancel := context.WithCancel(bg)
		failed := make(chan error, 1)
		go func() {
			failed <- r.AllowBatch(ctx, []chanlimit.Request{{Key: "a", N: 1}, {Key: "b", N: 3}}, make([]chanlimit.Decision, 2))
		}()
		synctest.Wait() // inside the rule, at b's item
		cancel()
		assert.ErrorIs(t, <-failed, context.Canceled)
		close(gate) // b's 3 are granted, then given back; a's refund ends the goroutine

		d := allowN(t, r, "b", 4)
		assert.False(t, d.Allowed, "b has 3 of 5 left: its 3 were given back once, not twice")
		assert.Equal(t, 3, d.Remaining)
	})
}

// sinceExitsAt is a Fake whose reading for a burst (Since) runs
// runtime.Goexit at its call numbered at, once armed.
type sinceExitsAt struct {
	*clock.Fake
	armed atomic.Bool
	calls atomic.Int64
	at    int64
}

func (c *sinceExitsAt) Since(t time.Time) time.Duration {
	if c.armed.Load() && c.calls.Add(1) == c.at {
		runtime.Goexit()
	}
	return c.Fake.Since(t)
}

// TestRestoreIsWholeWhenTheClockEndsAGoroutine: whichever reading of the
// clock ends a partition's goroutine while Restore runs, Restore loads
// everything or nothing: the message that came with that reading is served
// on the reading before, as when the clock panics.
func TestRestoreIsWholeWhenTheClockEndsAGoroutine(t *testing.T) {
	cfg := chanlimit.Config{Algorithm: "fixed_window", Limit: 1, Window: time.Minute, Partitions: 2}
	src, _ := newRouter(t, cfg)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	for _, k := range keys {
		allowN(t, src, k, 1)
	}
	var snap bytes.Buffer
	require.NoError(t, src.Snapshot(bg, &snap))
	for at := int64(1); at <= 4; at++ {
		clk := &sinceExitsAt{Fake: clock.NewFake(epoch), at: at}
		cfg.Clock = clk
		r, err := chanlimit.New(cfg)
		require.NoError(t, err)
		clk.armed.Store(true)
		err = r.Restore(bg, bytes.NewReader(snap.Bytes()))
		clk.armed.Store(false)
		st := stats(t, r)
		if err == nil {
			assert.Equal(t, len(keys), st.Keys, "reading %d: all loaded", at)
		} else {
			assert.Zero(t, st.Keys, "reading %d: %v, and nothing loaded", at, err)
		}
		require.NoError(t, r.Close())
	}
}

// selfish is an error whose Unwrap returns itself: errors.Is on it loops
// forever.
type selfish struct{}

func (e *selfish) Error() string { return "selfish" }
func (e *selfish) Unwrap() error { return e }

// boom is an error whose Error panics with itself, so that formatting its
// panic panics too.
type boom struct{}

func (boom) Error() string { panic(boom{}) }

// TestErrorsOfCodeTheRouterDoesNotOwnAreReadOnce: errors and panic values
// that loop in Unwrap, or panic when formatted, are wrapped with their
// message read once, under supervision; the router neither hangs nor
// panics.
func TestErrorsOfCodeTheRouterDoesNotOwnAreReadOnce(t *testing.T) {
	type state = algorithms.FixedWindowState
	looping := fmt.Sprint("test_selfish_", registrations.Add(1))
	require.NoError(t, chanlimit.Register(looping, func(algorithms.Params) (algorithms.Machine[state], error) { return nil, &selfish{} }))
	_, err := chanlimit.New(chanlimit.Config{Algorithm: looping, Limit: 1, Window: time.Second})
	assert.ErrorContains(t, err, "selfish")

	exploding := fmt.Sprint("test_boom_", registrations.Add(1))
	require.NoError(t, chanlimit.Register(exploding, func(algorithms.Params) (algorithms.Machine[state], error) { return nil, boom{} }))
	_, err = chanlimit.New(chanlimit.Config{Algorithm: exploding, Limit: 1, Window: time.Second})
	assert.ErrorContains(t, err, "whose Error or String method panicked")

	name := register[state](t, func(fw *algorithms.FixedWindow) panicsWith { return panicsWith{fw} })
	r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second})
	err = r.AllowBatch(bg, []chanlimit.Request{{Key: "k", N: 2}}, make([]chanlimit.Decision, 1))
	assert.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
	assert.ErrorContains(t, err, "request 0")
}

// panicsWith is a fixed window that panics with boom{} on a request for 2
// units.
type panicsWith struct{ *algorithms.FixedWindow }

func (m panicsWith) AllowN(s *algorithms.FixedWindowState, now time.Duration, n int, d *chanlimit.Decision) {
	if n == 2 {
		panic(boom{})
	}
	m.FixedWindow.AllowN(s, now, n, d)
}

// steppedClock models clock.Real on a host whose wall clock is stepped:
// Since is monotonic (the elapsed time since the router read its start),
// Now is the wall clock, which offset puts ahead or behind.
type steppedClock struct {
	base   time.Time
	mono   time.Duration
	offset time.Duration
}

func (c *steppedClock) Now() time.Time                     { return c.base.Add(c.mono + c.offset) }
func (c *steppedClock) Since(time.Time) time.Duration      { return c.mono }
func (c *steppedClock) NewTimer(time.Duration) clock.Timer { panic("no timers here") }

// TestSnapshotAfterAWallClockStepGrantsNoMore: the host's clock was an hour
// slow and is set right; a snapshot taken after that restores into a
// router on the right time as what it is: nothing is forgiven.
func TestSnapshotAfterAWallClockStepGrantsNoMore(t *testing.T) {
	clkA := &steppedClock{base: epoch, offset: -time.Hour}
	a, err := chanlimit.New(chanlimit.Config{Limit: 10, Window: time.Hour, Partitions: 1, Clock: clkA})
	require.NoError(t, err)
	defer a.Close()
	require.True(t, allowN(t, a, "k", 10).Allowed)
	clkA.offset, clkA.mono = 0, time.Second // set right; a second passes
	var buf bytes.Buffer
	require.NoError(t, a.Snapshot(bg, &buf))

	cfg := chanlimit.Config{Limit: 10, Window: time.Hour, Partitions: 1, Clock: clock.NewFake(epoch.Add(time.Second))}
	want, got := peekRestored(t, a, cfg, &buf, "k", 10)
	require.False(t, want.Allowed)
	assert.False(t, got.Allowed, "the restored router grants what the original would not")
}

// sinceFailsOnce is a Fake whose next reading for a burst (Since) panics,
// or runs runtime.Goexit, once armed.
type sinceFailsOnce struct {
	*clock.Fake
	armed atomic.Bool
	exit  bool
}

func (c *sinceFailsOnce) Since(t time.Time) time.Duration {
	if c.armed.Swap(false) {
		if c.exit {
			runtime.Goexit()
		}
		panic("since")
	}
	return c.Fake.Since(t)
}

// TestRestoreRefusesANowFromBeforeAFailedReading: when the reading of the
// clock that comes with Restore's question to a partition fails, the
// partition's now is an older one; loaded at it, the keys would age by the
// same time twice. Restore fails then, and loads nothing.
func TestRestoreRefusesANowFromBeforeAFailedReading(t *testing.T) {
	for _, exit := range []bool{false, true} {
		cfg := chanlimit.Config{Limit: 10, Window: 2 * time.Hour, Partitions: 1}
		a, clkA := newRouter(t, cfg)
		require.True(t, allowN(t, a, "k", 10).Allowed)
		var snap bytes.Buffer
		require.NoError(t, a.Snapshot(bg, &snap))
		clk := &sinceFailsOnce{Fake: clock.NewFake(epoch), exit: exit}
		cfg.Clock = clk
		b, err := chanlimit.New(cfg)
		require.NoError(t, err)
		clkA.Advance(time.Hour)
		clk.Advance(time.Hour)
		clk.armed.Store(true)
		err = b.Restore(bg, bytes.NewReader(snap.Bytes()))
		require.ErrorIs(t, err, chanlimit.ErrClockPanic, "exit %v", exit)
		assert.Zero(t, stats(t, b).Keys, "nothing loaded")
		require.NoError(t, b.Restore(bg, bytes.NewReader(snap.Bytes())))
		want, err := a.Peek(bg, "k", 10)
		require.NoError(t, err)
		got, err := b.Peek(bg, "k", 10)
		require.NoError(t, err)
		assert.Equal(t, want, got, "exit %v", exit)
		require.NoError(t, b.Close())
	}
}

// stepsBackAfterSince is a Fake whose time of day steps back two hours
// right after a reading for a burst, once armed.
type stepsBackAfterSince struct {
	*clock.Fake
	armed atomic.Bool
}

func (c *stepsBackAfterSince) Since(t time.Time) time.Duration {
	d := c.Fake.Since(t)
	if c.armed.Swap(false) {
		c.Fake.Advance(-2 * time.Hour)
	}
	return d
}

// TestSnapshotIsNeverStampedBeforeItsStates: the clock's time of day steps
// back between the partition's reading and the snapshot's stamp; the stamp
// is still not before the states' instant, so the restore forgives
// nothing.
func TestSnapshotIsNeverStampedBeforeItsStates(t *testing.T) {
	clk := &stepsBackAfterSince{Fake: clock.NewFake(epoch)}
	cfg := chanlimit.Config{Limit: 10, Window: 2 * time.Hour, Partitions: 1, Clock: clk}
	a, err := chanlimit.New(cfg)
	require.NoError(t, err)
	defer a.Close()
	require.True(t, allowN(t, a, "k", 10).Allowed)
	clk.armed.Store(true)
	var snap bytes.Buffer
	require.NoError(t, a.Snapshot(bg, &snap))
	clk.Advance(2 * time.Hour) // set right again
	cfg.Clock = clock.NewFake(epoch)
	want, got := peekRestored(t, a, cfg, &snap, "k", 10)
	require.False(t, want.Allowed)
	assert.Equal(t, want, got)
}

// TestSnapshotWhileTheWallClockIsSlowGrantsNoMore: the host's time of day
// is an hour slow when the snapshot is taken, and set right before the
// restore: the restore counts the time that passed, not the hour.
func TestSnapshotWhileTheWallClockIsSlowGrantsNoMore(t *testing.T) {
	clkA := &steppedClock{base: epoch}
	a, err := chanlimit.New(chanlimit.Config{Limit: 10, Window: time.Hour, Partitions: 1, Clock: clkA})
	require.NoError(t, err)
	defer a.Close()
	require.True(t, allowN(t, a, "k", 10).Allowed)
	clkA.offset = -time.Hour
	var buf bytes.Buffer
	require.NoError(t, a.Snapshot(bg, &buf))
	clkA.offset, clkA.mono = 0, time.Second
	cfg := chanlimit.Config{Limit: 10, Window: time.Hour, Partitions: 1, Clock: clock.NewFake(epoch.Add(time.Second))}
	want, got := peekRestored(t, a, cfg, &buf, "k", 10)
	require.False(t, want.Allowed)
	assert.False(t, got.Allowed, "the restored router grants what the original would not")
}

// unclamped is a rule of Limit units that never come back (no window
// ends), whose Refund trusts its contract: it takes back exactly n. Its
// AllowN panics on a request for 2 units, and waits for gate on one for 3.
type unclamped struct {
	limit int
	gate  chan struct{}
}

type usedState struct{ used int }

func (c unclamped) Capacity() int { return c.limit }

func (c unclamped) AllowN(s *usedState, now time.Duration, n int, d *chanlimit.Decision) {
	switch n {
	case 2:
		panic("two")
	case 3:
		<-c.gate
	}
	c.PeekN(s, now, n, d)
	if d.Allowed {
		s.used += n
	}
}

func (c unclamped) PeekN(s *usedState, now time.Duration, n int, d *chanlimit.Decision) {
	ok := s.used+n <= c.limit
	*d = chanlimit.Decision{Allowed: ok, Limit: c.limit, Remaining: c.limit - s.used, ResetAfter: time.Hour}
	if ok {
		d.Remaining -= n
	} else {
		d.RetryAfter = time.Hour
	}
}

func (c unclamped) Refund(s *usedState, now time.Duration, n int) { s.used -= n }

// TestAGrantOfAKeysFormerStateIsNeverGivenBack: in one batch, k is granted
// a unit, then its rule panics and k's state is dropped, then k starts
// afresh with another unit; the caller leaves. Only the grant of k's
// present state is given back: the first went with the state it was made
// on, and giving it back would grant more than capacity.
func TestAGrantOfAKeysFormerStateIsNeverGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		name := fmt.Sprint("test_unclamped_", registrations.Add(1))
		require.NoError(t, chanlimit.Register[usedState](name, func(p algorithms.Params) (unclamped, error) { return unclamped{p.Limit, gate}, nil }))
		r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 5, Window: time.Second, Partitions: 1})
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() {
			reqs := []chanlimit.Request{{Key: "k", N: 1}, {Key: "k", N: 2}, {Key: "k", N: 1}, {Key: "g", N: 3}}
			done <- r.AllowBatch(ctx, reqs, make([]chanlimit.Decision, len(reqs)))
		}()
		synctest.Wait() // at g, inside the rule
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
		close(gate)
		granted := 0
		for allowN(t, r, "k", 1).Allowed {
			granted++
		}
		assert.Equal(t, 5, granted, "k's present state grants its capacity, no more")
	})
}

// exitsInAdopt is a fixed window whose Adopt calls runtime.Goexit.
type exitsInAdopt struct{ *algorithms.FixedWindow }

func (m exitsInAdopt) Adopt(*algorithms.FixedWindowState, algorithms.Machine[algorithms.FixedWindowState], time.Duration) {
	runtime.Goexit()
}

// panicsInAdopt is a fixed window whose Adopt panics.
type panicsInAdopt struct{ *algorithms.FixedWindow }

func (m panicsInAdopt) Adopt(*algorithms.FixedWindowState, algorithms.Machine[algorithms.FixedWindowState], time.Duration) {
	panic("adopt")
}

// TestARuleThatFailsInAdoptLosesOnlyTheKeysState: a key whose state a rule
// fails to carry over (a panic, or a Goexit) starts untouched and the
// failure counts once; the change itself is made, but for a SetOverride
// whose rule ran Goexit, which fails and holds no place under
// MaxOverrides.
func TestARuleThatFailsInAdoptLosesOnlyTheKeysState(t *testing.T) {
	panics := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) panicsInAdopt { return panicsInAdopt{fw} })
	exits := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) exitsInAdopt { return exitsInAdopt{fw} })
	policy := func(algorithm string, limit int) chanlimit.Policy {
		return chanlimit.Policy{Name: "p", Algorithm: algorithm, Limit: limit, Window: time.Minute}
	}

	t.Run("SetOverride/panic", func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{policy(panics, 2)}, MaxOverrides: 1, Partitions: 1})
		require.True(t, allowN(t, r, "k", 2).Allowed)
		require.NoError(t, r.SetOverride(bg, "k", policy(panics, 3)))
		assert.Equal(t, 2, allowN(t, r, "k", 1).Remaining, "k started untouched under its override")
		st := stats(t, r)
		assert.Equal(t, uint64(1), st.Panicked)
		assert.Equal(t, 1, st.Overrides)
	})
	t.Run("SetOverride/Goexit", func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{policy(exits, 2)}, MaxOverrides: 1, Partitions: 1})
		require.True(t, allowN(t, r, "k", 2).Allowed)
		err := r.SetOverride(bg, "k", policy(exits, 3))
		require.ErrorIs(t, err, chanlimit.ErrAlgorithmPanic)
		st := stats(t, r)
		assert.Equal(t, uint64(1), st.Panicked, "counted once")
		assert.Zero(t, st.Overrides, "k has no override")
		assert.Equal(t, 1, allowN(t, r, "k", 1).Remaining, "k was dropped, as for a panic: untouched under the router's policy")
		require.NoError(t, r.SetOverride(bg, "other", policy(exits, 3)), "MaxOverrides has its place back")
	})
	t.Run("SetPolicies/Goexit", func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{policy(exits, 2)}, Partitions: 4})
		for k := range 8 {
			require.True(t, allowN(t, r, fmt.Sprint(k), 1).Allowed)
		}
		require.NoError(t, r.SetPolicies(bg, policy(exits, 3)), "as for a panic: the keys are dropped, the switch goes on")
		assert.Equal(t, 3, r.Policies()[0].Limit)
		for k := range 8 {
			d := allowN(t, r, fmt.Sprint(k), 1)
			assert.Equal(t, 3, d.Limit, "key %d is under the new policy", k)
			assert.Equal(t, 2, d.Remaining, "key %d was dropped: untouched", k)
		}
		assert.Equal(t, uint64(8), stats(t, r).Panicked, "each key's Goexit, once")
		require.NoError(t, r.Snapshot(bg, io.Discard), "every partition is under the router's policies")
	})
}

// deniesTwo is a fixed window whose AllowN denies every request for 2
// units, though its PeekN allows them as a fixed window does: a rule that
// breaks the Machine contract.
type deniesTwo struct{ *algorithms.FixedWindow }

func (m deniesTwo) AllowN(s *algorithms.FixedWindowState, now time.Duration, n int, d *chanlimit.Decision) {
	if n == 2 {
		*d = chanlimit.Decision{Limit: m.Capacity(), RetryAfter: time.Second, ResetAfter: time.Second}
		return
	}
	m.FixedWindow.AllowN(s, now, n, d)
}

// TestAPolicyWhoseAllowNDeniesWhatItsPeekAllowedTakesNothing: under two
// policies, a rule whose AllowN denies after its PeekN allowed makes the
// request a denial, and the policy that had taken its units gives them
// back: a denial takes from none, whichever policy the liar is.
func TestAPolicyWhoseAllowNDeniesWhatItsPeekAllowedTakesNothing(t *testing.T) {
	liar := register[algorithms.FixedWindowState](t, func(fw *algorithms.FixedWindow) deniesTwo { return deniesTwo{fw} })
	bucket := chanlimit.Policy{Name: "bucket", Limit: 4, Window: time.Hour}
	lies := chanlimit.Policy{Name: "liar", Algorithm: liar, Limit: 4, Window: time.Hour}
	for name, policies := range map[string][]chanlimit.Policy{"first": {lies, bucket}, "last": {bucket, lies}} {
		t.Run(name, func(t *testing.T) {
			r, _ := newRouter(t, chanlimit.Config{Policies: policies, Partitions: 1})
			require.True(t, allowN(t, r, "k", 1).Allowed) // k is held: 3 left in each
			d := allowN(t, r, "k", 2)
			assert.False(t, d.Allowed)
			assert.Equal(t, "liar", d.Policy)
			require.NoError(t, r.SetPolicies(bg, bucket))
			assert.Equal(t, 2, allowN(t, r, "k", 1).Remaining, "the bucket gave back what it took: 3 tokens before this one")
		})
	}
}
