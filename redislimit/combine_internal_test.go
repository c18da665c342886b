package redislimit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// pipelines counts the client's pipelines and the keys each carried, and
// holds the next one, before it goes, once the test arms hold.
type pipelines struct {
	mu   sync.Mutex
	keys [][]string
	hold chan struct{} // nil: nothing held; else the next pipeline waits for it to close
	held chan struct{} // a pipeline is held
}

func (h *pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var keys []string
		for _, cmd := range cmds {
			if args := cmd.Args(); len(args) > 3 && (cmd.Name() == "fcall" || cmd.Name() == "evalsha" || cmd.Name() == "eval") {
				n, _ := strconv.Atoi(fmt.Sprint(args[2]))
				for _, k := range args[3 : 3+n] {
					keys = append(keys, fmt.Sprint(k))
				}
			}
		}
		h.mu.Lock()
		h.keys = append(h.keys, keys)
		hold := h.hold
		h.hold = nil // one pipeline held at each arming
		h.mu.Unlock()
		if hold != nil {
			h.held <- struct{}{}
			<-hold
		}
		return next(ctx, cmds)
	}
}

// sent returns the keys of each pipeline sent so far.
func (h *pipelines) sent() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]string(nil), h.keys...)
}

// waitingNow returns how many Decides wait for a round trip.
func (s *Store) waitingNow() int {
	s.combiner.mu.Lock()
	defer s.combiner.mu.Unlock()
	return len(s.combiner.waiting)
}

// waitQueued returns once n Decides wait for a round trip.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for range 1_000_000 {
		if s.waitingNow() == n {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("%d Decides waiting, not %d", s.waitingNow(), n)
}

func combineStore(t *testing.T, roundTrips int) (*Store, *pipelines) {
	t.Helper()
	c := singleNode(t)
	h := &pipelines{}
	c.AddHook(h)
	s, err := NewStore(c, Options{Prefix: fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano()), RoundTrips: roundTrips})
	require.NoError(t, err)
	warm := allowOf("warm") // the library loaded: each Decide a pipeline from here on
	s.Decide(context.Background(), warm)
	require.NoError(t, warm[0].Err)
	h.mu.Lock()
	h.keys = nil
	h.mu.Unlock()
	return s, h
}

var combinePolicies = []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 10, Window: time.Minute}}

func allowOf(keys ...string) []chanlimit.StoreOp {
	ops := make([]chanlimit.StoreOp, len(keys))
	for i, k := range keys {
		ops[i] = chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: k, N: 1, Policies: combinePolicies}
	}
	return ops
}

// TestWaitingDecidesGoTogether: Decides that come while every round trip
// is out wait, and go together in one round trip, each answered as if it
// had gone alone. Without the store's round trips shared, five Decides
// at once were five round trips.
func TestWaitingDecidesGoTogether(t *testing.T) {
	s, h := combineStore(t, 1)
	<-s.combiner.lanes.free // the one round trip is out
	ctx := context.Background()
	var wg sync.WaitGroup
	ops := make([][]chanlimit.StoreOp, 5)
	for i := range ops {
		ops[i] = allowOf(fmt.Sprint("a", i), fmt.Sprint("b", i))
		wg.Go(func() { s.Decide(ctx, ops[i]) })
	}
	waitQueued(t, s, len(ops))
	s.combiner.lanes.free <- struct{}{} // back
	wg.Wait()
	for i := range ops {
		for _, op := range ops[i] {
			require.NoError(t, op.Err)
			assert.True(t, op.Decision.Allowed)
			assert.Equal(t, 9, op.Decision.Remaining, op.Key)
		}
	}
	sent := h.sent()
	require.Len(t, sent, 1, "one round trip")
	assert.Len(t, sent[0], 10, "every Decide's keys")

	// The same keys again, one at a time: each decided once before.
	for i := range ops {
		again := allowOf(fmt.Sprint("a", i))
		s.Decide(ctx, again)
		require.NoError(t, again[0].Err)
		assert.Equal(t, 8, again[0].Decision.Remaining)
	}
	assert.Len(t, h.sent(), 1+len(ops), "alone, while a round trip has room")
}

// TestCarriedDecidesKeepTheirGrants: a Decide carried in another's
// round trip is answered with its grants, as one sent alone is, so that
// a grant given back after a Reset gives nothing back. Before, carried
// Decides (the leader's too) came back with Grant 0, which names no
// state, and a give-back of one crossed a Reset: 10 units went back to a
// bucket of 10 that had just granted them again.
func TestCarriedDecidesKeepTheirGrants(t *testing.T) {
	s, _ := combineStore(t, 1)
	<-s.combiner.lanes.free // the one round trip is out
	ctx := context.Background()
	var wg sync.WaitGroup
	ops := make([][]chanlimit.StoreOp, 3)
	for i := range ops {
		ops[i] = allowOf(fmt.Sprint("k", i))
		ops[i][0].N = 10
		wg.Go(func() { s.Decide(ctx, ops[i]) })
	}
	waitQueued(t, s, len(ops))
	s.combiner.lanes.free <- struct{}{} // back: the three go together
	wg.Wait()
	for i := range ops {
		op := ops[i][0]
		require.NoError(t, op.Err)
		require.True(t, op.Decision.Allowed)
		assert.NotZero(t, op.Grant, "%s: the grant names the state it came from", op.Key)
	}

	k := ops[0][0]
	again := []chanlimit.StoreOp{{Kind: chanlimit.StoreReset, Key: k.Key, Policies: combinePolicies}, {Kind: chanlimit.StoreAllow, Key: k.Key, N: 10, Policies: combinePolicies}}
	s.Decide(ctx, again[:1])
	s.Decide(ctx, again[1:])
	require.NoError(t, again[1].Err)
	require.True(t, again[1].Decision.Allowed, "Reset: the 10 again")
	back := []chanlimit.StoreOp{{Kind: chanlimit.StoreGiveBack, Key: k.Key, N: 10, Policies: combinePolicies, Grant: k.Grant}}
	s.Decide(ctx, back)
	require.NoError(t, back[0].Err)
	peek := []chanlimit.StoreOp{{Kind: chanlimit.StorePeek, Key: k.Key, N: 1, Policies: combinePolicies}}
	s.Decide(ctx, peek)
	require.NoError(t, peek[0].Err)
	assert.False(t, peek[0].Decision.Allowed, "the grant from before the Reset gives nothing back after it")
}

// TestAWaitingDecideLeaves: a Decide whose ctx ends while it waits for a
// round trip returns at once, its ops failed with ctx's error, and is not
// sent.
func TestAWaitingDecideLeaves(t *testing.T) {
	s, h := combineStore(t, 1)
	<-s.combiner.lanes.free
	ctx, cancel := context.WithCancel(context.Background())
	ops := allowOf("k")
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Decide(ctx, ops)
	}()
	waitQueued(t, s, 1)
	cancel()
	<-done
	require.ErrorIs(t, ops[0].Err, context.Canceled)
	assert.Zero(t, s.waitingNow())
	s.combiner.lanes.free <- struct{}{}
	later := allowOf("k")
	s.Decide(context.Background(), later)
	require.NoError(t, later[0].Err)
	assert.Equal(t, 9, later[0].Decision.Remaining, "the Decide that left took nothing")
	assert.Len(t, h.sent(), 1)
}

// TestACarriedDecideStays: a Decide carried by another's round trip,
// whose ctx ends while that trip is out, stays for the trip's answers, as
// it would for its own round trip (which the client does not cut short at
// ctx's end): Redis decides its ops, and a router gives back the grants of
// callers that left only from answers. Which of the two leads is the
// scheduler's pick (the leader's ops go first), the one that waited first
// the likelier, so the two wait first in turn; each round checks what
// either does, until rounds have seen both. Before, a carried Decide left
// at once with ctx's error, and the unit Redis granted it was lost.
func TestACarriedDecideStays(t *testing.T) {
	s, h := combineStore(t, 1)
	carried, led := 0, 0
	for round := 0; round < 200 && (carried == 0 || led == 0); round++ {
		hold := make(chan struct{})
		h.mu.Lock()
		h.hold, h.held = hold, make(chan struct{})
		h.mu.Unlock()
		<-s.combiner.lanes.free
		ctx, cancel := context.WithCancel(context.Background())
		mine, theirs := allowOf(fmt.Sprint("mine", round)), allowOf(fmt.Sprint("theirs", round))
		var wg sync.WaitGroup
		returned := make(chan struct{})
		decideMine := func() {
			go func() {
				defer close(returned)
				s.Decide(ctx, mine)
			}()
		}
		decideTheirs := func() { wg.Go(func() { s.Decide(context.Background(), theirs) }) }
		first, second := decideMine, decideTheirs // the first to wait for the round trip is the likelier to lead:
		if round%2 == 1 {                         // each first in turn, so that the rounds see both lead
			first, second = second, first
		}
		first()
		waitQueued(t, s, 1)
		second()
		waitQueued(t, s, 2)
		s.combiner.lanes.free <- struct{}{}
		<-h.held
		sent := h.sent()
		trip := sent[len(sent)-1]
		require.Len(t, trip, 2, "one round trip carries both: neither has a deadline")
		if trip[0] == s.Key(theirs[0].Key) {
			carried++
		} else {
			led++
		}
		cancel()
		for range 1000 { // time for a Decide that would leave to do so
			runtime.Gosched()
		}
		select {
		case <-returned:
			t.Fatal("the Decide returned while its round trip was out")
		default:
		}
		close(hold)
		<-returned
		wg.Wait()
		require.NoError(t, mine[0].Err)
		assert.True(t, mine[0].Decision.Allowed, "its answer, as Redis decided it")
		require.NoError(t, theirs[0].Err)
		assert.True(t, theirs[0].Decision.Allowed)
	}
	assert.Positive(t, carried, "rounds in which the canceled Decide was carried")
	assert.Positive(t, led, "rounds in which it led")
}

// TestADecideCanceledAsItIsTaken: a Decide whose ctx ends just as a round
// trip takes it along, and whose caller reuses its ops once it returns (as
// the router does, clearing them), either left before it was taken, with
// ctx's error and nothing of it sent, or is answered: the trip decides
// what it held when taken. An earlier cut read a carried Decide's ops
// unlocked, after one that left could have been cleared: under -race a
// data race, and at times a trip of cleared ops, which panicked in build.
func TestADecideCanceledAsItIsTaken(t *testing.T) {
	s, h := combineStore(t, 1)
	for round := range 300 {
		<-s.combiner.lanes.free
		ctx, cancel := context.WithCancel(context.Background())
		mine, theirs := allowOf(fmt.Sprint("mine", round)), allowOf(fmt.Sprint("theirs", round))
		var got chanlimit.StoreOp
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			s.Decide(ctx, mine)
			got = mine[0]
			clear(mine) // the caller's, again
		}()
		var wg sync.WaitGroup
		wg.Go(func() { s.Decide(context.Background(), theirs) })
		waitQueued(t, s, 2)
		go cancel()
		s.combiner.lanes.free <- struct{}{}
		<-returned
		wg.Wait()
		require.NoError(t, theirs[0].Err)
		assert.True(t, theirs[0].Decision.Allowed)
		sentMine := false
		for _, trip := range h.sent() {
			sentMine = sentMine || slices.Contains(trip, s.Key(fmt.Sprint("mine", round)))
		}
		if got.Err != nil {
			require.ErrorIs(t, got.Err, context.Canceled)
			assert.False(t, sentMine, "a Decide that left was not sent")
		} else {
			assert.True(t, got.Decision.Allowed)
			assert.True(t, sentMine)
		}
	}
}

// TestTakeHonorsDeadlines: a leader takes the Decides waiting whose
// deadline is not later than its own (any, if it has none), in the order
// they came, up to maxCombined ops, and leaves the others waiting.
func TestTakeHonorsDeadlines(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	mk := func(deadline time.Time, ops int) *decide {
		return &decide{ctx: context.Background(), deadline: deadline, ops: make([]chanlimit.StoreOp, ops), queued: true}
	}
	for _, tc := range []struct {
		name      string
		leader    *decide
		waiting   []*decide
		taken     []int // indexes into waiting, in the batch's order after the leader
		remaining []int
	}{
		{"no deadline takes all", mk(time.Time{}, 1), []*decide{mk(at(1), 1), mk(time.Time{}, 1), mk(at(9), 1)}, []int{0, 1, 2}, nil},
		{"a deadline takes earlier and equal", mk(at(5), 1), []*decide{mk(at(6), 1), mk(at(5), 1), mk(time.Time{}, 1), mk(at(1), 1)}, []int{1, 3}, []int{0, 2}},
		{"up to maxCombined ops", mk(time.Time{}, MaxPerCall), []*decide{mk(time.Time{}, maxCombined-MaxPerCall), mk(time.Time{}, 1), mk(time.Time{}, 0)}, []int{0, 2}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := combiner{lanes: newLanes(1)}
			c.waiting = append([]*decide{tc.leader}, tc.waiting...)
			batch := c.take(tc.leader)
			want := []*decide{tc.leader}
			for _, i := range tc.taken {
				want = append(want, tc.waiting[i])
			}
			assert.Equal(t, want, batch)
			var rest []*decide
			for _, i := range tc.remaining {
				rest = append(rest, tc.waiting[i])
			}
			assert.ElementsMatch(t, rest, c.waiting, "left waiting")
			for k, d := range rest {
				assert.Same(t, d, c.waiting[k], "in their order")
			}
			for _, d := range batch {
				assert.False(t, d.queued)
			}
			for _, d := range c.waiting {
				assert.True(t, d.queued)
			}
			assert.Nil(t, c.take(tc.leader), "taken once")
		})
	}
}

// TestTakeLeavesADecideWhoseCtxEnded: a waiting Decide whose ctx has
// ended, but whose goroutine has not yet left (it is runnable, or waits
// for the mutex take holds), is not carried: it is left waiting, to leave
// with ctx's error, and nothing of it is sent. Before, take looked at its
// deadline alone, and carried it.
func TestTakeLeavesADecideWhoseCtxEnded(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancelExpired()
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{{"canceled", canceled}, {"deadline passed", expired}} {
		t.Run(tc.name, func(t *testing.T) {
			leader := &decide{ctx: context.Background(), ops: make([]chanlimit.StoreOp, 1), queued: true}
			gone := &decide{ctx: tc.ctx, ops: make([]chanlimit.StoreOp, 1), queued: true}
			gone.deadline, _ = tc.ctx.Deadline()
			c := combiner{lanes: newLanes(1)}
			c.waiting = []*decide{gone, leader}
			assert.Equal(t, []*decide{leader}, c.take(leader))
			assert.Equal(t, []*decide{gone}, c.waiting, "left waiting")
			assert.True(t, gone.queued)
		})
	}
}

// TestAnEndedDecideIsNotSent: the same through Redis: a Decide whose ctx
// ended before a round trip took it (here it has no goroutine, as one not
// yet scheduled) has nothing sent. Before, the leader's pipeline held its
// key, and Redis took a unit on it.
func TestAnEndedDecideIsNotSent(t *testing.T) {
	s, h := combineStore(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := &decide{ctx: ctx, ops: allowOf("gone"), queued: true, done: make(chan struct{}, 1)}
	c := &s.combiner
	c.mu.Lock()
	c.waiting = append(c.waiting, gone)
	c.mu.Unlock()
	leader := allowOf("leader")
	s.Decide(context.Background(), leader)
	require.NoError(t, leader[0].Err)
	assert.True(t, leader[0].Decision.Allowed)
	require.Len(t, h.sent(), 1)
	assert.Equal(t, []string{s.Key("leader")}, h.sent()[0], "the leader's key alone is sent")
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.True(t, gone.queued, "left waiting, to leave with ctx's error")
	c.waiting = slices.DeleteFunc(c.waiting, func(w *decide) bool { return w == gone })
}

// panicOnce is a client hook that panics in the first pipeline it sees
// once armed.
type panicOnce struct{ armed atomic.Bool }

func (h *panicOnce) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *panicOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *panicOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.CompareAndSwap(true, false) {
			panic("a hook's bug")
		}
		return next(ctx, cmds)
	}
}

// TestAPanickingTripFailsWhatItCarries: a round trip that panics (in a
// client's hook) panics in the Decide that made it, fails the Decide it
// carried with an error at once, and gives its lane back: the store's
// next Decide is decided. Before, the lane stayed taken for good, and the
// carried Decide, with no deadline, never returned.
func TestAPanickingTripFailsWhatItCarries(t *testing.T) {
	s, _ := combineStore(t, 1)
	h := &panicOnce{}
	s.client.AddHook(h)
	h.armed.Store(true)
	<-s.combiner.lanes.free
	a, b := allowOf("a"), allowOf("b")
	var panicked atomic.Int32
	decide := func(ops []chanlimit.StoreOp) {
		defer func() {
			if recover() != nil {
				panicked.Add(1)
			}
		}()
		s.Decide(context.Background(), ops)
	}
	var wg sync.WaitGroup
	wg.Go(func() { decide(a) })
	wg.Go(func() { decide(b) })
	waitQueued(t, s, 2)
	s.combiner.lanes.free <- struct{}{}
	wg.Wait()
	assert.EqualValues(t, 1, panicked.Load(), "the leader panics")
	carried := a
	if a[0].Err == nil && !a[0].Decision.Allowed { // a led, and panicked: nothing written
		carried = b
	}
	require.ErrorIs(t, carried[0].Err, errCarrierPanicked)

	next := allowOf("c")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound for a lane lost: the test fails rather than hangs
	defer cancel()
	s.Decide(ctx, next)
	require.NoError(t, next[0].Err, "the lane was given back")
	assert.True(t, next[0].Decision.Allowed)
}

// TestCombinedDecidesLoseNothing: many Decides at once through one round
// trip at a time, some without a deadline, some with a far one, some
// canceled at any moment: every Decide returns, each op either has its
// answer or, canceled before it was sent, ctx's error; and every unit
// Redis took on a key is one an answer granted, so that no grant is lost
// to a Decide that left.
func TestCombinedDecidesLoseNothing(t *testing.T) {
	s, _ := combineStore(t, 1)
	const keys, limit = 12, 100_000
	policies := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: limit, Window: time.Hour}} // nothing comes back meanwhile
	var granted [keys]atomic.Int64
	var canceled atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 60 {
				ops := make([]chanlimit.StoreOp, 1+(g+i)%3)
				for j := range ops {
					ops[j] = chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: fmt.Sprint("k", (g*7+i*3+j)%keys), N: 1 + j, Policies: policies}
				}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch (g + i) % 3 {
				case 1:
					ctx, cancel = context.WithTimeout(ctx, time.Hour)
				case 2:
					ctx, cancel = context.WithCancel(ctx)
					go func() {
						for range (g * i) % 50 {
							runtime.Gosched()
						}
						cancel()
					}()
				}
				s.Decide(ctx, ops)
				cancel()
				for _, op := range ops {
					switch {
					case op.Err == nil:
						require.True(t, op.Decision.Allowed, "the limit is far")
						var k int
						fmt.Sscanf(op.Key, "k%d", &k)
						granted[k].Add(int64(op.N))
					case errors.Is(op.Err, context.Canceled):
						canceled.Add(1)
					default:
						t.Errorf("%s: %v", op.Key, op.Err)
					}
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		peek := []chanlimit.StoreOp{{Kind: chanlimit.StorePeek, Key: fmt.Sprint("k", k), N: 1, Policies: policies}}
		s.Decide(context.Background(), peek)
		require.NoError(t, peek[0].Err)
		taken := int64(limit - peek[0].Decision.Remaining - 1) // what is left once the peek's unit is taken
		assert.Equal(t, granted[k].Load(), taken, "key %d: Redis took what the answers granted", k)
	}
	t.Logf("%d ops canceled before they were sent", canceled.Load())
}
