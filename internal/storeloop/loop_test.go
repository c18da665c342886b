package storeloop

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/keytable"
	"github.com/chanlimit/chanlimit/internal/storetable"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store is a store in memory (storetable.Decider): each set of policies
// keeps its keys in keytable's tables, on the ops' own time. While held,
// each call waits for release before it decides.
type store struct {
	mu     sync.Mutex
	keys   map[*keytable.Set]*keytable.Keys
	origin time.Time
	calls  [][]storetable.Kind // the kinds of each call's ops, as it came
	opKeys [][]string          // and their keys

	held    bool
	release chan struct{} // a held call takes one to go on
	down    bool          // every op fails with errDown
}

var errDown = errors.New("store: down")

func (s *store) Decide(ctx context.Context, ops []storetable.Op) {
	s.mu.Lock()
	kinds, keys := make([]storetable.Kind, len(ops)), make([]string, len(ops))
	for i := range ops {
		kinds[i], keys[i] = ops[i].Kind, ops[i].Key
	}
	s.calls, s.opKeys = append(s.calls, kinds), append(s.opKeys, keys)
	held := s.held
	s.mu.Unlock()
	if held {
		<-s.release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range ops {
		op := &ops[i]
		if s.down {
			op.Err = errDown
			continue
		}
		k := s.keys[op.Set]
		if k == nil {
			k = keytable.NewKeys(op.Set)
			s.keys[op.Set] = k
		}
		now := op.Now.Sub(s.origin)
		switch op.Kind {
		case storetable.Allow:
			op.Err = k.AllowN(op.Key, now, op.N, &op.Decision)
		case storetable.Peek:
			op.Err = k.PeekN(op.Key, now, op.N, &op.Decision)
		case storetable.Turn:
			op.Err = k.AllowTurn(op.Key, now, op.N, &op.Decision)
		case storetable.Refund:
			op.Err = k.Refund(op.Key, now, op.N)
		case storetable.GiveBack:
			op.Err = k.GiveBack(op.Key, now, op.N)
		case storetable.Reset:
			k.Reset(op.Key)
		}
	}
}

// callsOf returns the kinds of the calls made so far.
func (s *store) callsOf() [][]storetable.Kind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]storetable.Kind(nil), s.calls...)
}

// keysOf returns the keys of the ops of call i.
func (s *store) keysOf(i int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opKeys[i]
}

// setUp returns a partition on a store in memory, with a limit of limit a
// second, on a fake clock, and the store, held; its loop is not started.
func setUp(t *testing.T, limit, mailbox int, mode storetable.Mode) (*actor.Partition, *loop, *store) {
	t.Helper()
	clk := clock.NewFake(time.Unix(0, 0))
	return setUpOn(t, clk, clk.Now(), limit, mailbox, mode)
}

// setUpOn is setUp on clk, which reads origin now.
func setUpOn(t *testing.T, clk clock.Clock, origin time.Time, limit, mailbox int, mode storetable.Mode) (*actor.Partition, *loop, *store) {
	t.Helper()
	fw, err := algorithms.NewFixedWindow(algorithms.Params{Limit: limit, Window: time.Second})
	require.NoError(t, err)
	set := keytable.NewSet([]keytable.Policy{{Name: "p", Algorithm: "fixed_window", Params: algorithms.Params{Limit: limit, Window: time.Second}, Rule: keytable.NewRule(fw)}})
	st := &store{keys: map[*keytable.Set]*keytable.Keys{}, origin: origin, held: true, release: make(chan struct{})}
	table := storetable.New(st, mode, keytable.NewKeys(set), true, origin)
	p, l := newLoop(table, clk, origin, mailbox, 0)
	l.trips = newTrips(testTrips)
	return p, l, st
}

// testTrips is the most round trips out of a partition in the tests of
// the mechanisms that take turns once trips have no room: fewer than
// MaxTrips, so that a test fills them with a few requests.
// TestMaxTripsOutAlone holds MaxTrips itself.
const testTrips = 2

// stop stops p and waits for its loop to exit, letting the store's calls
// go.
func stop(p *actor.Partition, st *store) {
	st.mu.Lock()
	st.held = false
	st.mu.Unlock()
	go p.Stop()
	for {
		select {
		case <-p.Done():
			return
		case st.release <- struct{}{}:
		}
	}
}

// TestAGrantWhoseCallerLeftGoesBack: the store granted a request whose
// caller had left when the answer came: the grant goes back to it
// (GiveBack), and the caller's next request finds the units there.
func TestAGrantWhoseCallerLeftGoesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, l, st := setUp(t, 1, 8, storetable.FailClosed)
		go l.run()
		defer stop(p, st)
		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan error, 1)
		go func() { _, err := p.AllowN(ctx, "k", 1); left <- err }()
		synctest.Wait()
		cancel()
		assert.ErrorIs(t, <-left, context.Canceled, "the caller leaves at once")
		st.release <- struct{}{} // the grant lands; its caller has left
		synctest.Wait()
		st.release <- struct{}{} // the give-back
		synctest.Wait()
		assert.Equal(t, [][]storetable.Kind{{storetable.Allow}, {storetable.GiveBack}}, st.callsOf())

		got := make(chan algorithms.Decision, 1)
		go func() { d, _ := p.AllowN(context.Background(), "k", 1); got <- d }()
		synctest.Wait()
		st.release <- struct{}{}
		assert.True(t, (<-got).Allowed, "the unit went back")
	})
}

// TestStopWaitsForTheTripsOut: a partition that stops lands its trips
// and answers their callers before it exits, and leaves no worker behind
// (goleak).
func TestStopWaitsForTheTripsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, l, st := setUp(t, 10, 8, storetable.FailClosed)
		go l.run()
		answer := make(chan error, 1)
		go func() { _, err := p.AllowN(context.Background(), "k", 1); answer <- err }()
		synctest.Wait()
		go p.Stop()
		synctest.Wait()
		select {
		case <-p.Done():
			t.Fatal("exited with a trip out")
		default:
		}
		st.release <- struct{}{}
		<-p.Done()
		assert.NoError(t, <-answer, "answered by the trip, not with ErrClosed")
	})
}

// TestStopInABurstSurvivesAGoexit: a function run by Do that calls
// runtime.Goexit in a burst whose stop message comes after it leaves the
// next goroutine stopping: it answers the function with an error, serves
// the rest of the burst, drains and exits.
func TestStopInABurstSurvivesAGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, l, st := setUp(t, 10, 8, storetable.FailClosed)
		st.held = false
		items := []actor.Item{{Key: "k", N: 1}}
		batch, err := p.SendBatch(context.Background(), &items)
		require.NoError(t, err)
		exited := make(chan error, 1)
		go func() {
			exited <- p.Do(context.Background(), func(*actor.State) error { runtime.Goexit(); return nil })
		}()
		synctest.Wait()
		require.Equal(t, 2, p.Queued())
		p.Stop() // its message comes third
		go l.run()
		synctest.Wait()
		select {
		case <-p.Done():
		default:
			t.Fatal("the partition did not exit")
		}
		require.NoError(t, batch.Wait(context.Background()))
		assert.True(t, items[0].D.Allowed)
		assert.ErrorIs(t, <-exited, actor.ErrAlgorithmPanic)
	})
}

// TestFailLocalDecidesOnTheLocalKeys: a request the store could not
// answer is decided on the partition's local keys under FailLocal, and a
// grant of theirs whose caller left goes back to them, never to the
// store, which never took it.
func TestFailLocalDecidesOnTheLocalKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, l, st := setUp(t, 1, 8, storetable.FailLocal)
		st.down = true
		go l.run()
		defer stop(p, st)
		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan error, 1)
		go func() { _, err := p.AllowN(ctx, "k", 1); left <- err }()
		synctest.Wait()
		cancel()
		<-left
		st.release <- struct{}{} // fails: the local keys grant it; its caller has left
		synctest.Wait()
		got := make(chan algorithms.Decision, 1)
		go func() { d, _ := p.AllowN(context.Background(), "k", 1); got <- d }()
		synctest.Wait()
		st.release <- struct{}{}
		assert.True(t, (<-got).Allowed, "the local grant went back to the local keys")
		assert.Equal(t, [][]storetable.Kind{{storetable.Allow}, {storetable.Allow}}, st.callsOf(), "nothing given back to the store")
	})
}
