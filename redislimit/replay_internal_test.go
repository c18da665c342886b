package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// These tests send a call again as go-redis's retries do (the same
// command, arguments and all), on the single node .ci/redis starts.

func singleNode(t testing.TB) *redis.Client {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		t.Fatal("REDIS_ADDR is not set: run these tests through .ci/redis")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func newTestStore(t *testing.T, c redis.UniversalClient) *Store {
	t.Helper()
	s, err := NewStore(c, Options{Prefix: fmt.Sprintf("test:%s:%d:", t.Name(), rand.Uint64())})
	require.NoError(t, err)
	return s
}

// TestReplayOfALargeCall: 128 requests under 13 policies each, sent
// twice: the second answers as the first, taking nothing more. Before, a
// call answered more numbers than Lua moves at once, and its replay
// failed as a whole.
func TestReplayOfALargeCall(t *testing.T) {
	s := newTestStore(t, singleNode(t))
	var p []chanlimit.Policy
	for i := range 13 {
		p = append(p, chanlimit.Policy{Name: fmt.Sprint("p", i), Algorithm: "token_bucket", Limit: 100, Window: time.Minute})
	}
	ops := make([]chanlimit.StoreOp, MaxPerCall)
	for i := range ops {
		ops[i] = chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: fmt.Sprint("k", i%7), N: 1, Policies: p}
	}
	calls := s.calls(ops)
	require.Greater(t, len(calls), 1, "split: at most maxAnswers numbers a call")
	s.build(ops, calls)
	ctx := context.Background()
	s.send(ctx, calls, byScript)
	first := make([][]int64, len(calls))
	for k, c := range calls {
		vals, err := numbers(c.cmd)
		require.NoError(t, err)
		first[k] = vals
	}
	s.send(ctx, calls, byScript) // the client's retry of the same calls
	for k, c := range calls {
		vals, err := numbers(c.cmd)
		require.NoError(t, err, "the retry replays")
		assert.Equal(t, first[k], vals, "call %d: the first time's answers", k)
	}
	peek := []chanlimit.StoreOp{{Kind: chanlimit.StorePeek, Key: "k0", N: 1, Policies: p}}
	s.Decide(ctx, peek)
	require.NoError(t, peek[0].Err)
	assert.Equal(t, 100-19-1, peek[0].Decision.Remaining, "k0's 19 requests, taken once")
}

// TestRecordOutlivesItsAttempts: the key that holds a call's answers
// lives as long as the client may send the call again, though its state
// would expire sooner (fixed_window, 1 per 100 ms): a retry that comes
// late finds the answers, and a later request is decided as if the call
// had been sent once. Before, the key lived 1.1 s, and a retry after that
// was decided again, in the new window.
func TestRecordOutlivesItsAttempts(t *testing.T) {
	c := singleNode(t)
	s := newTestStore(t, c)
	ctx := context.Background()
	p := []chanlimit.Policy{{Name: "default", Algorithm: "fixed_window", Limit: 1, Window: 100 * time.Millisecond}}
	ops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: 1, Policies: p}}
	calls := s.calls(ops)
	s.build(ops, calls)
	s.send(ctx, calls, byScript)
	require.NoError(t, calls[0].cmd.Err())
	ttl, err := c.PTTL(ctx, s.Key("k")).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, s.replay-time.Second, "kept for the client's retries (%v)", s.replay)
	def := redis.NewClient(&redis.Options{})
	defer def.Close()
	o := def.Options()
	attempt := time.Duration(o.DialerRetries)*o.DialTimeout + o.WriteTimeout + o.ReadTimeout
	assert.Greater(t, replayWindow(def), time.Duration(o.MaxRetries+1)*attempt, "go-redis's defaults: every attempt's dials, write and read, and more")
	cl := redis.NewClusterClient(&redis.ClusterOptions{})
	defer cl.Close()
	co := cl.Options()
	assert.Greater(t, replayWindow(cl), time.Duration(co.MaxRedirects+1)*attempt, "a Cluster's: each redirect's attempt")
	assert.GreaterOrEqual(t, ReplayWindow, replayWindow(def), "a client the store cannot read is given as long as the defaults take")
}

// TestResetSentAgainDropsNothingTakenSince: a Reset whose answer was
// lost, and that the client sends again after another call took units
// on its key, drops nothing the second time: a retry is one request,
// decided once. Before, a call of resets alone left no record, and its
// retry dropped the key again, units taken since and all: 5 more of a
// Burst of 5 were allowed at once.
func TestResetSentAgainDropsNothingTakenSince(t *testing.T) {
	s := newTestStore(t, singleNode(t))
	ctx := context.Background()
	p := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 5, Window: time.Minute}}
	take := func(n int) chanlimit.StoreOp {
		op := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "k", N: n, Policies: p}}
		s.Decide(ctx, op)
		require.NoError(t, op[0].Err)
		return op[0]
	}
	require.True(t, take(5).Decision.Allowed)

	reset := []chanlimit.StoreOp{{Kind: chanlimit.StoreReset, Key: "k", Policies: p}}
	calls := s.calls(reset)
	s.build(reset, calls)
	s.send(ctx, calls, byScript)
	require.NoError(t, calls[0].cmd.Err())
	require.True(t, take(5).Decision.Allowed, "the bucket was Reset")

	s.send(ctx, calls, byScript) // the client's retry of the Reset
	require.NoError(t, calls[0].cmd.Err())
	d := take(1).Decision
	assert.False(t, d.Allowed, "the 5 taken after the Reset stay taken: %+v", d)
}

// missingOnce answers the second call of the first pipeline as a Cluster
// node whose scripts (NOSCRIPT) or functions (Function not found) were
// flushed would.
type missingOnce struct{ done bool }

type missingErr string

func (e missingErr) Error() string { return string(e) }
func (missingErr) RedisError()     {}

func (h *missingOnce) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *missingOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *missingOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.done && len(cmds) == 2 {
			switch cmds[1].Name() {
			case "evalsha":
				h.done = true
				cmds[1].SetErr(missingErr("NOSCRIPT No matching script. Please use EVAL."))
			case "fcall":
				h.done = true
				cmds[1].SetErr(missingErr("ERR Function not found"))
			}
		}
		return err
	}
}

// TestMissingLandsEveryCall: a pipeline whose second call finds no
// script (NOSCRIPT), or no function, lands every call once sent again, so
// the store's calls out go back to none, and its records on a key are
// let go. Before, the call answered before it was lost: the lowest call
// out stuck there, and a hot key's value grew with every call.
func TestMissingLandsEveryCall(t *testing.T) {
	for _, scripts := range []bool{true, false} {
		t.Run(fmt.Sprint("scripts=", scripts), func(t *testing.T) {
			c := singleNode(t)
			require.NoError(t, decideScript.Load(context.Background(), c).Err())
			h := &missingOnce{}
			c.AddHook(h)
			s := newTestStore(t, c)
			s.scripts.Store(scripts)
			p := []chanlimit.Policy{{Name: "default", Algorithm: "token_bucket", Limit: 100, Window: time.Minute}}
			ops := make([]chanlimit.StoreOp, MaxPerCall+1) // two calls on one node
			for i := range ops {
				ops[i] = chanlimit.StoreOp{Kind: chanlimit.StoreAllow, Key: fmt.Sprint("k", i), N: 1, Policies: p}
			}
			ctx := context.Background()
			s.Decide(ctx, ops)
			require.True(t, h.done, "a call was answered as missing")
			for i := range ops {
				require.NoError(t, ops[i].Err)
				require.Equal(t, 99, ops[i].Decision.Remaining, "decided once")
			}
			s.flights.mu.Lock()
			out := len(s.flights.out)
			s.flights.mu.Unlock()
			assert.Zero(t, out, "no call left out")
			var sizes []int
			for range 20 {
				op := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: "hot", N: 1, Policies: p}}
				s.Decide(ctx, op)
				require.NoError(t, op[0].Err)
				blob, err := c.Get(ctx, s.Key("hot")).Bytes()
				require.NoError(t, err)
				sizes = append(sizes, len(blob))
			}
			assert.LessOrEqual(t, sizes[19], sizes[1]+2, "one record at a time (a call's number grows a digit): the value does not grow")
		})
	}
}

// TestDecideNothing: Decide with no ops asks Redis nothing, and returns.
func TestDecideNothing(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s, err := NewStore(c, Options{})
	require.NoError(t, err)
	require.NotPanics(t, func() { s.Decide(context.Background(), nil) })
}
