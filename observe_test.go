package chanlimit_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/pipeline"
)

// recorder is a Config.Observe that keeps every Event, in the order it
// was told of them.
type recorder struct {
	mu     sync.Mutex
	events []chanlimit.Event
}

func (rec *recorder) observe(_ context.Context, e chanlimit.Event) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.events = append(rec.events, e)
}

// take returns the events so far, and forgets them.
func (rec *recorder) take() []chanlimit.Event {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	events := rec.events
	rec.events = nil
	return events
}

// observed returns a router of 2 a second per key on a fake clock, with
// its Observe recording into rec.
func observed(t *testing.T, rec *recorder) (*chanlimit.Router, interface{ Advance(time.Duration) }) {
	t.Helper()
	r, clk := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second, Partitions: 2, Observe: rec.observe})
	return r, clk
}

// TestObserveTellsOfEachAnswerOnce: each call that answers a request is
// observed once, with the call's own answer, and the calls that answer
// none (Peek, Reset, a caller that left) are not, step by step.
func TestObserveTellsOfEachAnswerOnce(t *testing.T) {
	rec := &recorder{}
	r, _ := observed(t, rec)
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	allowed := chanlimit.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * time.Millisecond, Policy: "default"}
	steps := []struct {
		give string
		call func()
		want []chanlimit.Event
	}{
		{"AllowN", func() { _, _ = r.AllowN(bg, "a", 1) }, []chanlimit.Event{{Kind: chanlimit.EventAllow, Key: "a", N: 1, Decision: allowed}}},
		{"Allow", func() { r.Allow("b") }, []chanlimit.Event{{Kind: chanlimit.EventAllow, Key: "b", N: 1, Decision: allowed}}},
		{"a denial", func() { _, _ = r.AllowN(bg, "a", 2) }, []chanlimit.Event{{Kind: chanlimit.EventAllow, Key: "a", N: 2,
			Decision: chanlimit.Decision{Limit: 2, Remaining: 1, RetryAfter: 500 * time.Millisecond, ResetAfter: 500 * time.Millisecond, Policy: "default"}}}},
		{"AllowQuota", func() { _, _ = r.AllowQuota(bg, "c", 1, nil) }, []chanlimit.Event{{Kind: chanlimit.EventAllow, Key: "c", N: 1, Decision: allowed}}},
		{"Refund", func() { _ = r.Refund(bg, "c", 1) }, []chanlimit.Event{{Kind: chanlimit.EventRefund, Key: "c", N: 1}}},
		{"a bad n", func() { _, _ = r.AllowN(bg, "a", 0) }, []chanlimit.Event{{Kind: chanlimit.EventAllow, Key: "a", N: 0, Err: errAny}}},
		{"more than the capacity", func() { _, _ = r.AllowN(bg, "a", 3) }, []chanlimit.Event{{Kind: chanlimit.EventAllow, Key: "a", N: 3, Err: errAny}}},
		{"a bad n, refunded", func() { _ = r.Refund(bg, "a", -1) }, []chanlimit.Event{{Kind: chanlimit.EventRefund, Key: "a", N: -1, Err: errAny}}},
		{"Peek", func() { _, _ = r.Peek(bg, "a", 1) }, nil},
		{"PeekQuota", func() { _, _ = r.PeekQuota(bg, "a", 1, nil) }, nil},
		{"Reset", func() { _ = r.Reset(bg, "d") }, nil},
		{"a caller that left", func() { _, _ = r.AllowN(cancelled, "a", 1) }, nil},
		{"a waiter that left", func() { _, _ = r.WaitN(cancelled, "a", 1) }, nil},
		{"a refund whose caller left", func() { _ = r.Refund(cancelled, "a", 1) }, nil},
		{"AllowBatch", func() {
			_ = r.AllowBatch(bg, []chanlimit.Request{{Key: "e", N: 1}, {Key: "f", N: 3}}, make([]chanlimit.Decision, 2))
		}, []chanlimit.Event{{Kind: chanlimit.EventAllow, Key: "e", N: 1, Decision: allowed}, {Kind: chanlimit.EventAllow, Key: "f", N: 3, Err: errAny}}},
		{"AllowEach, passing by an item with an error", func() {
			_ = r.AllowEach(bg, []chanlimit.Request{{Key: "g", N: 1}, {Key: "h", N: 1}, {Key: "i", N: -1}}, make([]chanlimit.Decision, 3), []error{nil, errors.New("passed by"), nil})
		}, []chanlimit.Event{{Kind: chanlimit.EventAllow, Key: "g", N: 1, Decision: allowed}, {Kind: chanlimit.EventAllow, Key: "i", N: -1, Err: errAny}}},
		{"TryWaitEach", func() {
			_ = r.TryWaitEach(bg, []chanlimit.Request{{Key: "j", N: 2}, {Key: "j", N: 1}}, make([]chanlimit.Decision, 2), make([]error, 2))
		}, []chanlimit.Event{
			{Kind: chanlimit.EventAllow, Key: "j", N: 2, Decision: chanlimit.Decision{Allowed: true, Limit: 2, ResetAfter: time.Second, Policy: "default"}},
			{Kind: chanlimit.EventAllow, Key: "j", N: 1, Decision: chanlimit.Decision{Limit: 2, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second, Policy: "default"}}}},
	}
	for _, st := range steps {
		st.call()
		got := rec.take()
		sortEvents(got)
		require.Len(t, got, len(st.want), "%s: %+v", st.give, got)
		for i, want := range st.want {
			if want.Err == errAny {
				assert.Error(t, got[i].Err, st.give)
				got[i].Err = errAny
			}
			assert.Equal(t, want, got[i], st.give)
		}
	}
}

// errAny stands for any error in an Event a test expects.
var errAny = errors.New("any error")

// sortEvents puts events in the order of their keys, then of their n: a
// batch's partitions answer in any order.
func sortEvents(events []chanlimit.Event) {
	slices.SortStableFunc(events, func(a, b chanlimit.Event) int {
		if a.Key != b.Key {
			if a.Key < b.Key {
				return -1
			}
			return 1
		}
		return 0
	})
}

// TestObserveTellsOfWaitsAndHowLongTheyWaited: WaitN, WaitQuota and a
// StartWait's Ticket are observed once each, with their outcome and the
// time waited on the router's clock: the Ticket's by the time its answer
// is read, not when it comes; a wait refused at once because its deadline
// would pass is observed, with its denial and error; a waiter that leaves
// its line, or a Ticket that Leave takes out, is not.
func TestObserveTellsOfWaitsAndHowLongTheyWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r, clk := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second, Observe: rec.observe})
		exhaust(t, r, "k", 2)
		rec.take()

		short, cancelShort := context.WithTimeout(bg, 100*time.Millisecond)
		defer cancelShort()
		_, err := r.WaitN(short, "k", 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		got := rec.take()
		require.Len(t, got, 1)
		assert.Equal(t, chanlimit.EventWait, got[0].Kind)
		assert.ErrorIs(t, got[0].Err, context.DeadlineExceeded)
		assert.Equal(t, 500*time.Millisecond, got[0].Decision.RetryAfter, "the denial the call returned")

		first := goWait(bg, r, "k", 1)
		leaving, leave := context.WithCancel(bg)
		left := goWait(leaving, r, "k", 1)
		ready := make(chan *chanlimit.Ticket, 1)
		tk, err := r.StartWait(bg, "k", 1, ready)
		require.NoError(t, err)
		q := &chanlimit.Quota{}
		quota := make(chan error, 1)
		go func() {
			_, err := r.WaitQuota(bg, "k", 1, q)
			quota <- err
		}()
		synctest.Wait()
		leave()
		synctest.Wait()
		w, ok := answer(left)
		require.True(t, ok)
		require.ErrorIs(t, w.err, context.Canceled)
		assert.Empty(t, rec.take(), "nothing answered yet; the waiter that left is not observed")

		advance(clk, time.Second) // a window of 2: the first waiter and the Ticket
		w, ok = answer(first)
		require.True(t, ok)
		require.NoError(t, w.err)
		got = rec.take()
		require.Len(t, got, 1, "the Ticket is observed when its answer is read, not before")
		assert.Equal(t, chanlimit.Event{Kind: chanlimit.EventWait, Key: "k", N: 1, Decision: w.d, Waited: time.Second}, got[0])

		clk.Advance(300 * time.Millisecond) // the Ticket's answer is read later than it came
		<-ready
		d, err := tk.Answer()
		require.NoError(t, err)
		_, _ = tk.Answer()
		got = rec.take()
		require.Len(t, got, 1, "read twice, observed once")
		assert.Equal(t, chanlimit.Event{Kind: chanlimit.EventWait, Key: "k", N: 1, Decision: d, Waited: 1300 * time.Millisecond}, got[0])

		advance(clk, 700*time.Millisecond)
		require.NoError(t, <-quota)
		got = rec.take()
		require.Len(t, got, 1)
		assert.Equal(t, chanlimit.EventWait, got[0].Kind)
		assert.Equal(t, 2*time.Second, got[0].Waited)

		// A Ticket that leaves its line before it is answered.
		tk, err = r.StartWait(bg, "k", 2, ready)
		require.NoError(t, err)
		synctest.Wait()
		tk.Leave(nil)
		<-ready
		_, err = tk.Answer()
		require.ErrorIs(t, err, context.Canceled)
		assert.Empty(t, rec.take())
	})
}

// TestAnObservePanicFailsNothing: an Observe that panics leaves every
// call its answer, and counts in Stats.ObservePanics.
func TestAnObservePanicFailsNothing(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second, Observe: func(context.Context, chanlimit.Event) { panic("observer") }})
	d, err := r.AllowN(bg, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	require.NoError(t, r.AllowBatch(bg, []chanlimit.Request{{Key: "k", N: 1}, {Key: "l", N: 1}}, make([]chanlimit.Decision, 2)))
	require.NoError(t, r.Refund(bg, "k", 1))
	st := stats(t, r)
	assert.Equal(t, uint64(4), st.ObservePanics)
	assert.Equal(t, uint64(3), st.Allowed, "the answers stand")
}

// TestObservePipelineItems: each item of a Police stage is observed as a
// decision, each item of a Throttle stage as one wait, whether it was
// granted at once or waited in line.
func TestObservePipelineItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Observe: rec.observe})
		in := make(chan string, 4)
		for _, k := range []string{"a", "a", "b"} {
			in <- k
		}
		close(in)
		for range pipeline.Police(bg, r, in, func(s string) string { return s }, pipeline.Options[string]{}) {
		}
		got := rec.take()
		sortEvents(got)
		require.Len(t, got, 3)
		for i, want := range []bool{true, false, true} {
			assert.Equal(t, chanlimit.EventAllow, got[i].Kind)
			assert.Equal(t, want, got[i].Decision.Allowed, "%+v", got[i])
		}

		in = make(chan string, 4)
		for _, k := range []string{"c", "c", "d"} {
			in <- k
		}
		close(in)
		out := pipeline.Throttle(bg, r, in, func(s string) string { return s }, pipeline.Options[string]{})
		for range 2 {
			res := <-out
			require.NoError(t, res.Err)
		}
		synctest.Wait()
		advance(clk, time.Second)
		res := <-out
		require.NoError(t, res.Err)
		_, open := <-out
		require.False(t, open)
		got = rec.take()
		sortEvents(got)
		require.Len(t, got, 3, "one event an item: %+v", got)
		for i, waited := range []time.Duration{0, time.Second, 0} {
			assert.Equal(t, chanlimit.EventWait, got[i].Kind, "%+v", got[i])
			assert.True(t, got[i].Decision.Allowed, "%+v", got[i])
			assert.Equal(t, waited, got[i].Waited, "%+v", got[i])
		}
	})
}
