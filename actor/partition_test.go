package actor_test

import (
	"context"
	"errors"
	"math"
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
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type call struct {
	key string
	now time.Duration
	n   int
}

// probeTable is a fixed window of 2 per second that records what the
// partition asks of it, and can hold one request on a key until the test
// lets it go: the first AllowN on a key in gates waits for a send on that
// key's channel. Only the partition goroutine touches it while it runs; the
// test reads the records after Done.
type probeTable struct {
	*keytable.Keys
	gates   map[string]chan struct{} // the partition's view: deleted once used
	held    map[string]chan struct{} // the test's view: never changed after newProbe
	calls   []call
	refunds []call
}

func newProbe(t *testing.T, gated ...string) *probeTable {
	t.Helper()
	w, err := algorithms.NewFixedWindow(algorithms.Params{Limit: 2, Window: time.Second})
	require.NoError(t, err)
	pt := &probeTable{
		Keys:  keytable.NewRule(w).NewTable(),
		gates: map[string]chan struct{}{},
		held:  map[string]chan struct{}{},
	}
	for _, key := range gated {
		pt.gates[key] = make(chan struct{})
		pt.held[key] = pt.gates[key]
	}
	return pt
}

// AllowN records and gates each request.
func (pt *probeTable) AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	pt.calls = append(pt.calls, call{key, now, n})
	if gate, ok := pt.gates[key]; ok {
		delete(pt.gates, key)
		<-gate
	}
	return pt.Keys.AllowN(key, now, n, d)
}

// AllowEach decides a batch item by item, so that batches are recorded
// and gated too.
func (pt *probeTable) AllowEach(items []keytable.Item, now time.Duration) {
	for i := range items {
		if it := &items[i]; !it.Skip {
			it.Err = pt.AllowN(it.Key, now, it.N, &it.D)
		}
	}
}

// GiveBack notes the grants given back (in refunds).
func (pt *probeTable) GiveBack(key string, now time.Duration, n int) error {
	pt.refunds = append(pt.refunds, call{key, now, n})
	return pt.Keys.GiveBack(key, now, n)
}

// outcome is what a call returned, sent back from the goroutine that made it.
type outcome struct {
	d   algorithms.Decision
	err error
}

// async makes the call in a goroutine of its own.
func async(ctx context.Context, p *actor.Partition, key string, n int) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		d, err := p.AllowN(ctx, key, n)
		out <- outcome{d, err}
	}()
	return out
}

// start starts a partition of table on clk.
func start(table actor.Table, clk clock.Clock, mailboxSize int) *actor.Partition {
	return actor.Start(table, clk, clk.Now(), mailboxSize, 0)
}

func stop(p *actor.Partition) {
	p.Stop()
	<-p.Done()
}

func TestRoundTripOnTheFakeClock(t *testing.T) {
	clk := clock.NewFake(epoch)
	pt := newProbe(t)
	p := start(pt, clk, 4)
	ctx := context.Background()

	steps := []struct {
		advance time.Duration
		want    algorithms.Decision
	}{
		{0, algorithms.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Second}},
		{300 * time.Millisecond, algorithms.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 700 * time.Millisecond}},
		{0, algorithms.Decision{Limit: 2, RetryAfter: 700 * time.Millisecond, ResetAfter: 700 * time.Millisecond}},
		// The clock steps back an hour: no time passes for the partition.
		{-time.Hour, algorithms.Decision{Limit: 2, RetryAfter: 700 * time.Millisecond, ResetAfter: 700 * time.Millisecond}},
		// Time counts on from the new reading: nobody is locked out.
		{700 * time.Millisecond, algorithms.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Second}},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		got, err := p.AllowN(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, st.want, got, "step %d: AllowN after Advance(%v)", i, st.advance)
	}

	stop(p)
	ms := time.Millisecond
	assert.Equal(t, []call{{"k", 0, 1}, {"k", 300 * ms, 1}, {"k", 300 * ms, 1}, {"k", 300 * ms, 1}, {"k", 1000 * ms, 1}}, pt.calls)
}

func TestTimelineSaturates(t *testing.T) {
	clk := clock.NewFake(epoch)
	pt := newProbe(t)
	p := start(pt, clk, 0)
	for range 3 {
		clk.Advance(math.MaxInt64)
		_, err := p.AllowN(context.Background(), "k", 1)
		require.NoError(t, err)
	}
	stop(p)
	want := time.Duration(math.MaxInt64)
	assert.Equal(t, []call{{"k", want, 1}, {"k", want, 1}, {"k", want, 1}}, pt.calls, "the timeline stops at the largest Duration instead of wrapping")
}

// TestErrorsComeBack: the table's errors reach the caller: here a new key
// refused for want of room, and an n beyond the capacity of the key's
// policies.
func TestErrorsComeBack(t *testing.T) {
	pt := newProbe(t)
	pt.Bound(keytable.Limit{Max: 1})
	p := start(pt, clock.NewFake(epoch), 1)
	defer stop(p)
	ctx := context.Background()
	_, err := p.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	_, err = p.AllowN(ctx, "new", 1)
	assert.ErrorIs(t, err, actor.ErrTooManyKeys)
	_, err = p.AllowN(ctx, "k", 3)
	assert.ErrorIs(t, err, actor.ErrExceedsCapacity, "n beyond the capacity: the table checks it before the rule")
}

func TestContextDoneBeforeTheCall(t *testing.T) {
	pt := newProbe(t)
	p := start(pt, clock.NewFake(epoch), 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.AllowN(ctx, "k", 1)
	assert.ErrorIs(t, err, context.Canceled)
	stop(p)
	assert.Empty(t, pt.calls)
}

// TestGiveUpWhileQueued: a caller whose context ends while its request waits
// in the mailbox returns at once, and the request is never applied.
func TestGiveUpWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pt := newProbe(t, "slow")
		p := start(pt, clock.NewFake(epoch), 4)
		bg := context.Background()

		slow := async(bg, p, "slow", 1)
		synctest.Wait() // the partition is held inside the slow request
		ctx, cancel := context.WithCancel(bg)
		queued := async(ctx, p, "k", 2)
		synctest.Wait()
		require.Equal(t, 1, p.Queued(), "the request waits in the mailbox")

		cancel()
		assert.ErrorIs(t, (<-queued).err, context.Canceled)

		release(pt, "slow")
		assert.True(t, (<-slow).d.Allowed)
		d, err := p.AllowN(bg, "k", 2)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "the abandoned request took nothing from k")

		stop(p)
		assert.Equal(t, []string{"slow", "k"}, keys(pt.calls), "the abandoned request never reached the table")
		assert.Empty(t, pt.refunds)
	})
}

// TestGiveUpWhileDeciding: a caller whose context ends while the partition
// decides its request returns ctx's error, and the grant is taken back.
func TestGiveUpWhileDeciding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pt := newProbe(t, "k")
		p := start(pt, clock.NewFake(epoch), 4)
		bg := context.Background()

		ctx, cancel := context.WithCancel(bg)
		deciding := async(ctx, p, "k", 2)
		synctest.Wait() // the partition is inside AllowN for k
		cancel()
		assert.ErrorIs(t, (<-deciding).err, context.Canceled)
		release(pt, "k")

		d, err := p.AllowN(bg, "k", 2)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "the undelivered grant of 2 was given back")

		// The abandoned reply channel holds the caller's mark; were it
		// reused, a later call would read that mark as its answer.
		for i := range 100 {
			d, err := p.AllowN(bg, "other", 1)
			require.NoError(t, err)
			require.Equal(t, i < 2, d.Allowed, "call %d", i)
			require.Equal(t, 2, d.Limit, "call %d got an answer that is not a decision", i)
		}

		stop(p)
		assert.Equal(t, []call{{"k", 0, 2}}, pt.refunds)
	})
}

// TestMailboxFullHonoursContext: a caller blocked on a full mailbox returns
// when its context ends, and its request is never applied.
func TestMailboxFullHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pt := newProbe(t, "slow")
		p := start(pt, clock.NewFake(epoch), 1)
		bg := context.Background()

		slow := async(bg, p, "slow", 1)
		synctest.Wait()
		queued := async(bg, p, "b", 1)
		synctest.Wait()
		require.Equal(t, 1, p.Queued(), "the mailbox is full")

		ctx, cancel := context.WithTimeout(bg, time.Minute) // synctest's clock: no real wait
		_, err := p.AllowN(ctx, "c", 1)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)

		release(pt, "slow")
		assert.True(t, (<-slow).d.Allowed)
		assert.True(t, (<-queued).d.Allowed)
		stop(p)
		assert.Equal(t, []string{"slow", "b"}, keys(pt.calls))
	})
}

// TestStopAnswersWhatIsQueued: requests in the mailbox when Stop comes are
// answered with decisions; calls after Stop get actor.ErrClosed.
func TestStopAnswersWhatIsQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pt := newProbe(t, "slow")
		p := start(pt, clock.NewFake(epoch), 4)
		bg := context.Background()

		slow := async(bg, p, "slow", 1)
		synctest.Wait()
		var queued []<-chan outcome
		for _, key := range []string{"a", "b"} {
			queued = append(queued, async(bg, p, key, 1))
			synctest.Wait() // in the mailbox, in this order
		}
		require.Equal(t, 2, p.Queued())

		p.Stop()
		p.Stop() // idempotent
		_, err := p.AllowN(bg, "c", 1)
		assert.ErrorIs(t, err, actor.ErrClosed)

		release(pt, "slow")
		for _, o := range append(queued, slow) {
			got := <-o
			require.NoError(t, got.err)
			assert.True(t, got.d.Allowed)
		}
		<-p.Done()
		_, err = p.AllowN(bg, "c", 1)
		assert.ErrorIs(t, err, actor.ErrClosed)
		assert.Equal(t, []string{"slow", "a", "b"}, keys(pt.calls))
	})
}

// TestStopRacingCallers: hundreds of callers hammer a partition while it
// stops; every call returns, with a decision or actor.ErrClosed.
func TestStopRacingCallers(t *testing.T) {
	p := start(newProbe(t), clock.NewFake(epoch), 8)
	var (
		wg      sync.WaitGroup
		started sync.WaitGroup
	)
	failures := make(chan error, 300)
	for i := range 300 {
		started.Add(1)
		wg.Go(func() {
			first := true
			for {
				_, err := p.AllowN(context.Background(), string(rune('a'+i%26)), 1)
				if first {
					started.Done()
					first = false
				}
				if err != nil {
					failures <- err
					return
				}
			}
		})
	}
	started.Wait() // every caller has been answered at least once
	stop(p)
	wg.Wait()
	close(failures)
	for err := range failures {
		if !errors.Is(err, actor.ErrClosed) {
			t.Errorf("a call racing Stop returned %v, want actor.ErrClosed", err)
		}
	}
}

// release lets the held request on key go on. The gate's channel is read
// only by the partition goroutine; the test keeps its own reference.
func release(pt *probeTable, key string) { pt.held[key] <- struct{}{} }

func keys(calls []call) []string {
	var ks []string
	for _, c := range calls {
		ks = append(ks, c.key)
	}
	return ks
}

func TestPeekAndReset(t *testing.T) {
	pt := newProbe(t)
	p := start(pt, clock.NewFake(epoch), 2)
	ctx := context.Background()

	d, err := p.PeekN(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, algorithms.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Second}, d, "an unseen key is full")
	d, err = p.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed, "the Peek took nothing")

	d, err = p.PeekN(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, algorithms.Decision{Limit: 2, RetryAfter: time.Second, ResetAfter: time.Second}, d)

	require.NoError(t, p.Reset(ctx, "k"))
	require.NoError(t, p.Reset(ctx, "never-seen"), "resetting an unseen key is fine")
	d, err = p.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "k was dropped")

	stop(p)
	assert.ErrorIs(t, p.Reset(ctx, "k"), actor.ErrClosed)
	_, err = p.PeekN(ctx, "k", 1)
	assert.ErrorIs(t, err, actor.ErrClosed)
	assert.Equal(t, 1, pt.Len(), "only k is held")
}

// TestBatchDecidesInOrder: a batch is decided in order, on one reading of
// the clock, each answer written into its item.
func TestBatchDecidesInOrder(t *testing.T) {
	clk := clock.NewFake(epoch)
	pt := newProbe(t)
	p := start(pt, clk, 1)
	defer stop(p)
	ctx := context.Background()

	clk.Advance(time.Second)
	items := []keytable.Item{{Key: "a", N: 1}, {Key: "b", N: 2}, {Key: "a", N: 1}, {Key: "a", N: 1}}
	pending, err := p.SendBatch(ctx, &items)
	require.NoError(t, err)
	require.NoError(t, pending.Wait(ctx))
	allowed := []bool{}
	for _, it := range items {
		allowed = append(allowed, it.D.Allowed)
	}
	assert.Equal(t, []bool{true, true, true, false}, allowed, "a: 2 per second, in the order asked")
	assert.Equal(t, time.Second, items[3].D.RetryAfter)
}

// TestBatchGivenUpIsTakenBack: a batch whose caller gives up while it is
// decided takes nothing: every grant is given back.
func TestBatchGivenUpIsTakenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pt := newProbe(t, "slow")
		p := start(pt, clock.NewFake(epoch), 1)
		bg := context.Background()

		ctx, cancel := context.WithCancel(bg)
		items := []keytable.Item{{Key: "a", N: 2}, {Key: "slow", N: 1}, {Key: "b", N: 1}}
		pending, err := p.SendBatch(ctx, &items)
		require.NoError(t, err)
		synctest.Wait() // the partition is held inside the batch, at "slow"
		cancel()
		require.ErrorIs(t, pending.Wait(ctx), context.Canceled)
		release(pt, "slow")

		for _, key := range []string{"a", "slow", "b"} {
			d, err := p.AllowN(bg, key, 2)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "%s got its units back", key)
		}
		stop(p)
		assert.Equal(t, []call{{"b", 0, 1}, {"slow", 0, 1}, {"a", 0, 2}}, pt.refunds, "latest first")
	})
}

// TestDoRunsBetweenRequests: a function sent with Do runs on the
// partition's goroutine in mailbox order, after the requests sent before
// it and before those sent after, and sees the partition's now and counts.
func TestDoRunsBetweenRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(epoch)
		pt := newProbe(t, "slow")
		p := start(pt, clk, 4)
		defer stop(p)
		bg := context.Background()

		slow := async(bg, p, "slow", 1)
		synctest.Wait()
		before := async(bg, p, "a", 1)
		synctest.Wait()
		var (
			held  int
			calls int
			seen  actor.State
		)
		did := make(chan error, 1)
		go func() {
			did <- p.Do(bg, func(s *actor.State) error {
				held, calls, seen = s.Table.(interface{ Len() int }).Len(), len(pt.calls), *s
				return errors.New("the function's own error")
			})
		}()
		synctest.Wait()
		after := async(bg, p, "b", 1)
		synctest.Wait()
		clk.Advance(time.Second) // read by the burst that follows the slow request
		release(pt, "slow")

		assert.EqualError(t, <-did, "the function's own error")
		for _, o := range []<-chan outcome{slow, before, after} {
			require.NoError(t, (<-o).err)
		}
		assert.Equal(t, 2, held, "slow and a, not yet b")
		assert.Equal(t, 2, calls)
		assert.Equal(t, time.Second, seen.Now)
		assert.Equal(t, actor.Counts{Allowed: 2}, seen.Counts, "the answers to slow and a were delivered")
	})
}

// TestDoGivenUpWhileQueuedNeverRuns: a function whose caller gave up
// before its turn is skipped, like any request.
func TestDoGivenUpWhileQueuedNeverRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pt := newProbe(t, "slow")
		p := start(pt, clock.NewFake(epoch), 4)
		defer stop(p)
		bg := context.Background()

		slow := async(bg, p, "slow", 1)
		synctest.Wait()
		ctx, cancel := context.WithCancel(bg)
		ran := false
		did := make(chan error, 1)
		go func() { did <- p.Do(ctx, func(*actor.State) error { ran = true; return nil }) }()
		synctest.Wait()
		cancel()
		assert.ErrorIs(t, <-did, context.Canceled)
		release(pt, "slow")
		require.NoError(t, (<-slow).err)
		require.NoError(t, p.Do(bg, func(*actor.State) error { return nil }), "the partition goes on")
		assert.False(t, ran)
	})
}

// goexitTable is a table that runs runtime.Goexit when it decides the key
// "exits", as a rule calling t.FailNow would.
type goexitTable struct{ *probeTable }

func (g goexitTable) AllowN(key string, now time.Duration, n int, d *algorithms.Decision) error {
	if key == "exits" {
		runtime.Goexit()
	}
	return g.probeTable.AllowN(key, now, n, d)
}

func (g goexitTable) AllowEach(items []keytable.Item, now time.Duration) {
	for i := range items {
		if it := &items[i]; !it.Skip {
			it.Err = g.AllowN(it.Key, now, it.N, &it.D)
		}
	}
}

// TestAGoexitInTheTableAnswersAndCarriesOn: code the partition calls ends
// its goroutine with runtime.Goexit; the request in flight is answered with
// actor.ErrAlgorithmPanic, a batch gives back what it was granted, and another
// goroutine serves the rest: every call returns, and Stop still works.
func TestAGoexitInTheTableAnswersAndCarriesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pt := newProbe(t, "slow")
		p := start(goexitTable{pt}, clock.NewFake(epoch), 4)
		bg := context.Background()

		_, err := p.AllowN(bg, "exits", 1)
		require.ErrorIs(t, err, actor.ErrAlgorithmPanic)
		assert.ErrorContains(t, err, "runtime.Goexit")
		d, err := p.AllowN(bg, "k", 1)
		require.NoError(t, err, "the partition goes on")
		assert.True(t, d.Allowed)

		items := []keytable.Item{{Key: "a", N: 2}, {Key: "exits", N: 1}, {Key: "b", N: 1}}
		pending, err := p.SendBatch(bg, &items)
		require.NoError(t, err)
		require.ErrorIs(t, pending.Wait(bg), actor.ErrAlgorithmPanic)
		d, err = p.AllowN(bg, "a", 2)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "the batch's grant to a was given back")

		// While it drains after Stop, too: the goroutine that carries on
		// drains, and exits.
		slow := async(bg, p, "slow", 1)
		synctest.Wait()
		exits := async(bg, p, "exits", 1)
		synctest.Wait()
		after := async(bg, p, "k", 1)
		synctest.Wait()
		require.Equal(t, 2, p.Queued())
		p.Stop()
		release(pt, "slow")
		<-p.Done()
		assert.NoError(t, (<-slow).err)
		assert.ErrorIs(t, (<-exits).err, actor.ErrAlgorithmPanic)
		assert.NoError(t, (<-after).err, "answered by the goroutine that carried on")
	})
}

// TestKeysExpireAfterTheirGrace: a key expires once it has been idle for
// its grace, not before; Counts count it idle meanwhile.
func TestKeysExpireAfterTheirGrace(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	w, err := algorithms.NewFixedWindow(algorithms.Params{Limit: 2, Window: time.Second})
	require.NoError(t, err)
	p := actor.Start(keytable.NewRule(w).NewTable(), clk, clk.Now(), 4, 0)
	defer func() { p.Stop(); <-p.Done() }()
	ctx := context.Background()
	counts := func() (held int, c keytable.Counts) {
		t.Helper()
		require.NoError(t, p.Do(ctx, func(s *actor.State) error {
			table := s.Table.(keytable.Table)
			held, c = table.Len(), table.Counts(s.Now)
			return nil
		}))
		return held, c
	}

	_, err = p.AllowN(ctx, "k", 1) // idle from 1s
	require.NoError(t, err)
	clk.Advance(time.Second + actor.Grace - 1)
	_, err = p.AllowN(ctx, "other", 1)
	require.NoError(t, err)
	held, c := counts()
	assert.Equal(t, 2, held)
	assert.Equal(t, 1, c.Idle, "k is idle, but within its grace")

	clk.Advance(1)
	_, err = p.AllowN(ctx, "other", 1)
	require.NoError(t, err)
	held, c = counts()
	assert.Equal(t, 1, held, "k has had its grace: expired")
	assert.Zero(t, c.Idle)
	assert.Equal(t, uint64(1), c.Expired)
}
