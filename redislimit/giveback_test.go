package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/redislimit"
)

// givingBack is a Store that tells, on landed, each time a call that
// gave back a grant has returned (StoreGiveBack; or StoreRefund, which
// is how a grant was given back before StoreGiveBack named it).
type givingBack struct {
	chanlimit.Store
	landed chan struct{}
}

func (s givingBack) Decide(ctx context.Context, ops []chanlimit.StoreOp) {
	s.Store.Decide(ctx, ops)
	for _, op := range ops {
		if op.Kind == chanlimit.StoreGiveBack || op.Kind == chanlimit.StoreRefund {
			s.landed <- struct{}{}
		}
	}
}

// leaverSetup is two routers on one Redis and one frozen fake clock, with a
// token bucket of 5 at 10 a second: a, whose connections go through a
// proxy, and b, whose do not. a's grants given back are told on landed.
type leaverSetup struct {
	a, b   *chanlimit.Router
	px     *proxy
	landed chan struct{}
	clk    *clock.Fake
}

func newLeaverSetup(t *testing.T) leaverSetup {
	t.Helper()
	addr := env(t, "REDIS_ADDR")
	pre := prefix(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	policies := []chanlimit.Policy{{Name: "p", Limit: 10, Window: time.Second, Burst: 5}}
	px := newProxy(t, addr)
	slow := redis.NewClient(&redis.Options{Addr: px.addr()})
	t.Cleanup(func() { slow.Close() })
	sa, err := redislimit.NewStore(slow, redislimit.Options{Prefix: pre})
	require.NoError(t, err)
	landed := make(chan struct{}, 8)
	a, err := chanlimit.New(chanlimit.Config{Policies: policies, Clock: clk, Store: givingBack{sa, landed}, Partitions: 1})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	sb, err := redislimit.NewStore(single(t), redislimit.Options{Prefix: pre})
	require.NoError(t, err)
	b, err := chanlimit.New(chanlimit.Config{Policies: policies, Clock: clk, Store: sb, Partitions: 1})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	_, err = a.Peek(context.Background(), "warm", 1) // a's connection open, and its code loaded
	require.NoError(t, err)
	return leaverSetup{a: a, b: b, px: px, landed: landed, clk: clk}
}

// leave has a call AllowN(k, 5) whose caller leaves once Redis has
// decided it, its answer held on the way back.
func (s leaverSetup) leave(t *testing.T) {
	t.Helper()
	s.px.replies.hold()
	s.px.drain()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := s.a.AllowN(ctx, "k", 5); errc <- err }()
	<-s.px.replied // Redis decided it: its answer is held
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
}

// giveBack lets a's answer through, and waits until the grant it gives
// back has landed.
func (s leaverSetup) giveBack(t *testing.T) {
	t.Helper()
	s.px.replies.open()
	select {
	case <-s.landed:
	case <-time.After(10 * time.Second): // the wall clock bounds a wait on Redis, not the limiter
		t.Fatal("the grant of the caller who left was never given back")
	}
}

// TestGiveBackHoldsUntilItLands: a caller who left while Redis decided its
// request had its units taken: they are held (another router sees none)
// until its give-back lands, and then they are back.
func TestGiveBackHoldsUntilItLands(t *testing.T) {
	s := newLeaverSetup(t)
	ctx := context.Background()
	s.leave(t)
	d, err := s.b.Peek(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "held until the give-back lands: %+v", d)
	s.giveBack(t)
	d, err = s.b.AllowN(ctx, "k", 5)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "given back: %+v", d)
}

// TestGiveBackNeverCrossesAReset: a caller who left while Redis decided its
// request; meanwhile the key is Reset and its 5 units taken again. The
// give-back that lands then finds another state than the one its grant
// came from, and gives nothing: the key never grants more than 5 at once.
// Before, the give-back was a plain refund, and the key granted 10 at one
// instant.
func TestGiveBackNeverCrossesAReset(t *testing.T) {
	s := newLeaverSetup(t)
	ctx := context.Background()
	s.leave(t)
	require.NoError(t, s.b.Reset(ctx, "k"))
	d, err := s.b.AllowN(ctx, "k", 5)
	require.NoError(t, err)
	require.True(t, d.Allowed, "the key, Reset, grants its 5: %+v", d)
	s.giveBack(t)
	d, err = s.b.AllowN(ctx, "k", 5)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "5 more at the same instant: the give-back crossed the Reset: %+v", d)
}

// TestRequestTimeNeverGoesBack: a request sent at 50 ms reaches Redis after
// another router refunded the key at 100 ms. It is decided at 100 ms, the
// later of its own time and the key's last write, and tells its waits
// from its own time; the key's time does not go back to 50 ms. Before, it
// was decided at 50 ms, and the 50 ms between counted as refill again
// after the refund: a Peek at 100 ms waited 50 ms for a unit, not 100.
func TestRequestTimeNeverGoesBack(t *testing.T) {
	s := newLeaverSetup(t)
	ctx := context.Background()
	d, err := s.b.AllowN(ctx, "k", 5)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	s.clk.Advance(50 * time.Millisecond)
	s.px.requests.hold()
	s.px.drain()
	got := make(chan chanlimit.Decision, 1)
	go func() {
		d, err := s.a.AllowN(ctx, "k", 5)
		assert.NoError(t, err)
		got <- d
	}()
	<-s.px.asked // sent at 50 ms, held on its way
	s.clk.Advance(50 * time.Millisecond)
	require.NoError(t, s.b.Refund(ctx, "k", 5))
	s.px.requests.open()
	d = <-got
	assert.True(t, d.Allowed, "%+v", d)
	assert.Equal(t, 0, d.Remaining)
	assert.Equal(t, 550*time.Millisecond, d.ResetAfter, "untouched 500 ms after 100 ms, told from 50 ms")
	d, err = s.b.Peek(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, d.RetryAfter, "a unit refills 100 ms after the grant at 100 ms: %+v", d)
}

// TestAnEmptiedKeyKeepsItsTime: a refund that leaves a key untouched, in
// a call that first changes another key, keeps the key's last write, so
// that a request sent before it that reaches Redis after it is decided at
// that write, not at its own time. Before, the emptied key was deleted
// with its last write, and the request was decided 250 ms in the past:
// the linearizability checker found it through Redis (a sliding window
// log took units stamped before a refund the history had already seen).
func TestAnEmptiedKeyKeepsItsTime(t *testing.T) {
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			s, err := redislimit.NewStore(clientOf(t, name), redislimit.Options{Prefix: prefix(t) + "{slot}:"})
			require.NoError(t, err)
			ctx := context.Background()
			p := []chanlimit.Policy{{Name: "p", Algorithm: "sliding_window_log", Limit: 5, Window: 500 * time.Millisecond}}
			at := func(ms int) time.Time { return time.Unix(1_800_000_000, 0).Add(time.Duration(ms) * time.Millisecond) }
			decide := func(ops ...chanlimit.StoreOp) {
				t.Helper()
				s.Decide(ctx, ops)
				for _, op := range ops {
					require.NoError(t, op.Err, "%v on %s", op.Kind, op.Key)
				}
			}
			decide(chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: "a", N: 2, Policies: p, Now: at(100)},
				chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p, Now: at(100)})
			decide(chanlimit.StoreOp{Kind: chanlimit.StoreRefund, Key: "a", N: 1, Policies: p, Now: at(300)}, // the call's first key written: its record
				chanlimit.StoreOp{Kind: chanlimit.StoreRefund, Key: "k", N: 1, Policies: p, Now: at(300)}) // k untouched again

			late := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p, Now: at(50)}}
			decide(late...)
			d := late[0].Decision
			assert.True(t, d.Allowed)
			assert.Equal(t, 4, d.Remaining)
			assert.Equal(t, 750*time.Millisecond, d.ResetAfter, "decided at 300 ms, the key's last write, and told from 50 ms: %+v", d)
		})
	}
}
