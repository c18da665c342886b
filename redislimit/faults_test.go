package redislimit_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/redislimit"
)

// stall makes srv sleep for d (DEBUG SLEEP), and returns once it sleeps:
// a PING on a client of its own goes unanswered. The returned channel is
// closed when it wakes.
func stall(t *testing.T, srv *server, d time.Duration) <-chan struct{} {
	t.Helper()
	ctx := context.Background()
	sleeper := redis.NewClient(&redis.Options{Addr: srv.addr(), ReadTimeout: -1, MaxRetries: -1})
	probe := redis.NewClient(&redis.Options{Addr: srv.addr(), ReadTimeout: 20 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { sleeper.Close(); probe.Close() })
	require.NoError(t, probe.Ping(ctx).Err())
	woke := make(chan struct{})
	go func() {
		defer close(woke)
		assert.NoError(t, sleeper.Do(ctx, "DEBUG", "SLEEP", d.Seconds()).Err())
	}()
	// Asleep once a PING times out: the wall clock here watches the
	// server, it moves no limiter's time.
	for range 1000 {
		if probe.Ping(ctx).Err() != nil {
			return woke
		}
	}
	t.Fatal("redis-server did not go to sleep")
	return nil
}

// TestRetryDecidesOnce: a Redis stall longer than the client's read
// timeout makes go-redis send the script's pipeline again (its default
// MaxRetries, 3); a stalled Redis runs every attempt once it wakes. Each
// request is still decided once: a request allowed took one unit, a
// request that failed at most one.
func TestRetryDecidesOnce(t *testing.T) {
	srv := newServer(t, "--enable-debug-command", "yes")
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), ReadTimeout: 150 * time.Millisecond}) // retries as go-redis does by default
	defer client.Close()
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t), Pause: -1})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 10, Window: time.Hour, Store: st, Partitions: 4})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for _, k := range keys {
		require.True(t, r.Allow(k)) // the script loaded, the connections open
	}

	woke := stall(t, srv, 800*time.Millisecond)
	ds, errs := make([]chanlimit.Decision, len(keys)), make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { ds[i], errs[i] = r.AllowN(ctx, k, 1) })
	}
	wg.Wait()
	<-woke

	answered := 0
	for i, k := range keys {
		d, err := r.Peek(ctx, k, 1)
		require.NoError(t, err)
		left := d.Remaining + 1 // a Peek of 1 says what an Allow of 1 would leave
		taken := 10 - left - 1  // beside the first Allow's
		if errs[i] == nil {
			answered++
			require.True(t, ds[i].Allowed, k)
			assert.Equal(t, 1, taken, "%s: an allowed request takes one unit, however often it was sent", k)
			assert.Equal(t, left, ds[i].Remaining, k)
		} else {
			require.ErrorIs(t, errs[i], redislimit.ErrStoreUnavailable, k)
			assert.LessOrEqual(t, taken, 1, "%s: a request that failed took at most one unit: %v", k, errs[i])
		}
	}
	t.Logf("%d of %d requests answered after the stall", answered, len(keys))
}

// corruptValues are values another client could leave at a key: not the
// script's layout (a byte 0xC2, then entries; msgpack, as scripts wrote
// before any release, is not read), or the layout broken, or a state's
// shape with numbers the script never writes.
var corruptValues = []string{
	"garbage",
	"\x92\xb4token_bucket|default\x95\x0a\xcf\x00\x00\x00\xd6\x93\xa4\x00\x00\x0a\x00\x00", // msgpack of a state, as scripts wrote before any release
	"\x93\x01\x02",                      // [1, 2]: no field names
	"\x92\xb4token_bucket|default\xa1x", // a state that is a string
	"\x92\xb4token_bucket|default\x95\x0a\xcb\x3f\xe0\x00\x00\x00\x00\x00\x00\x0a\xff\x00", // 0.5 and -1
	"\x92\xb4token_bucket|default\x92\x0a\x0a",                                             // too few numbers
	// The script's own layout (a byte 0xC2, then entries), broken:
	"\xc2\x14\x00token_bucket|def", // an entry cut short
	"\xc2" + redislimit.BinEntry("token_bucket|default", 10, 3600000000, 10, math.NaN(), 1),      // not a number
	"\xc2" + redislimit.BinEntry("token_bucket|default", 10, 3600000000, 10, -1, 1),              // below 0
	"\xc2" + redislimit.BinEntry("token_bucket|default", 10, 3600000000, 10, 0.5, 1),             // not whole
	"\xc2" + redislimit.BinEntry("token_bucket|default", 10, 3600000000),                         // too few numbers
	"\xc2" + redislimit.BinEntry("token_bucket|default", 2, 3600000000, 2, 0, 1) + "\x05\x00#ab", // a record cut short, after a state the fast path reads
	// A state the fast path reads, then a record whose expiry no script
	// writes: no clock reaches it (a TTL Redis refuses), not a number, not
	// whole.
	"\xc2" + redislimit.BinEntry("token_bucket|default", 2, 3600000000, 2, 0, 1) + redislimit.BinEntry("#zz:1", 1e300),
	"\xc2" + redislimit.BinEntry("token_bucket|default", 2, 3600000000, 2, 0, 1) + redislimit.BinEntry("#zz:1", math.NaN()),
	"\xc2" + redislimit.BinEntry("token_bucket|default", 2, 3600000000, 2, 0, 1) + redislimit.BinEntry("#zz:1", 1.5e12+0.5),
	"\xc2" + redislimit.BinEntry("token_bucket|default", 2, 3600000000, 2, 0, 1) + redislimit.BinEntry("#zz:1", 1e300, 1, 1),
	// A record of no numbers (no expiry), before one whose bytes would
	// read as a whole expiry.
	"\xc2" + redislimit.BinEntry("token_bucket|default", 2, 3600000000, 2, 0, 1) + redislimit.BinEntry("@", 1, 1, 0, 0, 0) +
		redislimit.BinEntry("#x") + redislimit.BinEntry("#abc0Cxy", 1e12, 3),
}

// TestCorruptKeyAlone: a key whose value another client wrote fails its
// own requests (refunds too), with ErrStoreUnavailable, and leaves the value as it is;
// the other keys of the same script call are decided and answered. Reset
// drops the value.
func TestCorruptKeyAlone(t *testing.T) {
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			client := clientOf(t, name)
			ctx := context.Background()
			for v, value := range corruptValues {
				st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t)})
				require.NoError(t, err)
				r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Hour, Store: st})
				require.NoError(t, err)
				defer r.Close()
				// One hash tag: one slot, one script call on the Cluster too.
				good1, bad, good2 := "{t}good1", "{t}bad", "{t}good2"
				require.NoError(t, client.Set(ctx, st.Key(bad), value, time.Hour).Err())

				out := make([]chanlimit.Decision, 3)
				err = r.AllowBatch(ctx, []chanlimit.Request{{Key: good1, N: 1}, {Key: bad, N: 1}, {Key: good2, N: 1}}, out)
				require.ErrorIs(t, err, redislimit.ErrStoreUnavailable, "value %d", v)
				assert.ErrorContains(t, err, st.Key(bad))
				for _, i := range []int{0, 2} {
					assert.True(t, out[i].Allowed, "value %d: item %d", v, i)
					assert.Equal(t, 1, out[i].Remaining, "value %d: item %d", v, i)
				}
				assert.False(t, out[1].Allowed)
				d, err := r.AllowN(ctx, good1, 1)
				require.NoError(t, err)
				assert.True(t, d.Allowed)
				assert.Zero(t, d.Remaining, "value %d: good1's unit was taken once", v)
				_, err = r.AllowN(ctx, bad, 1)
				require.ErrorIs(t, err, redislimit.ErrStoreUnavailable)
				require.ErrorIs(t, r.Refund(ctx, bad, 1), redislimit.ErrStoreUnavailable, "value %d: a refund it cannot make fails", v)
				require.NoError(t, r.Refund(ctx, good2, 1), "value %d", v)
				got, err := client.Get(ctx, st.Key(bad)).Result()
				require.NoError(t, err)
				assert.Equal(t, value, got, "value %d: left as it was", v)

				require.NoError(t, r.Reset(ctx, bad))
				d, err = r.AllowN(ctx, bad, 1)
				require.NoError(t, err, "value %d", v)
				assert.True(t, d.Allowed)
				assert.Equal(t, 1, d.Remaining)
			}
		})
	}
}

// TestUnknownPoliciesKept: during a rolling deploy, instance A has added
// an hourly cap of 5 and B has not yet; with requests alternating between
// them, B keeps A's hourly state, so A grants 5 of its 20. The cap's state
// lasts as long as it would on A alone: its TTL is the hour's.
func TestUnknownPoliciesKept(t *testing.T) {
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			client := clientOf(t, name)
			ctx := context.Background()
			pre := prefix(t)
			burst := chanlimit.Policy{Name: "burst", Algorithm: "token_bucket", Limit: 1000, Window: time.Second}
			hourly := chanlimit.Policy{Name: "hourly", Algorithm: "fixed_window", Limit: 5, Window: time.Hour}
			newRouter := func(policies ...chanlimit.Policy) *chanlimit.Router {
				st, err := redislimit.NewStore(client, redislimit.Options{Prefix: pre})
				require.NoError(t, err)
				r, err := chanlimit.New(chanlimit.Config{Policies: policies, Store: st})
				require.NoError(t, err)
				t.Cleanup(func() { r.Close() })
				return r
			}
			a, b := newRouter(burst, hourly), newRouter(burst)
			grantedA, grantedB := 0, 0
			for range 20 {
				if a.Allow("k") {
					grantedA++
				}
				if b.Allow("k") {
					grantedB++
				}
			}
			assert.Equal(t, 5, grantedA, "A's hourly cap holds though B writes the key")
			assert.Equal(t, 20, grantedB, "B knows no cap")
			ttl, err := client.PTTL(ctx, pre+"k").Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, 59*time.Minute, "B keeps the key as long as A's hourly state lasts")
		})
	}
}

// TestCheckBoundsEveryAlgorithm: Check refuses every policy whose
// arithmetic Lua's doubles could not keep exact (integers above 2^53),
// whatever its algorithm: a count of 2^53+1 would round to 2^53.
func TestCheckBoundsEveryAlgorithm(t *testing.T) {
	st, err := redislimit.NewStore(single(t), redislimit.Options{})
	require.NoError(t, err)
	for _, alg := range []string{"token_bucket", "gcra", "leaky_bucket", "sliding_window_log", "sliding_window_counter", "fixed_window"} {
		for _, limit := range []int{1<<53 + 10, math.MaxInt64} {
			p := chanlimit.Policy{Algorithm: alg, Limit: limit, Window: time.Hour}
			_, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{p}, Store: st})
			require.ErrorIs(t, err, chanlimit.ErrInvalidConfig, "%s at Limit %d", alg, limit)
			assert.ErrorContains(t, err, "too large")
		}
	}
	// The largest Limit fixed_window takes is decided exactly.
	client := single(t)
	st, err = redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{{Algorithm: "fixed_window", Limit: 1 << 50, Window: time.Hour}}, Store: st})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	d, err := r.AllowN(ctx, "k", 1<<50-1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, 1, d.Remaining)
	d, err = r.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, 1, d.Remaining)
}

// TestFlushUnderLoad: every master of the Cluster flushes its scripts
// (a store calling scripts), or its functions (a store calling the
// library), over and over while 16 goroutines take a quota (AllowN and
// WaitN): no request fails, and exactly the quota is granted.
func TestFlushUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scripts bool
		flush   func(ctx context.Context, c *redis.Client) error
	}{
		{"SCRIPT FLUSH", true, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }},
		{"FUNCTION FLUSH", false, func(ctx context.Context, c *redis.Client) error { return c.FunctionFlush(ctx).Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) { flushUnderLoad(t, tc.scripts, tc.flush) })
	}
}

func flushUnderLoad(t *testing.T, scripts bool, flush func(ctx context.Context, c *redis.Client) error) {
	cc := cluster(t)
	ctx := context.Background()
	st, err := redislimit.NewStore(cc, redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	if scripts {
		redislimit.UseScripts(st)
	}
	r, err := chanlimit.New(chanlimit.Config{Limit: 50, Window: time.Hour, Store: st})
	require.NoError(t, err)
	defer r.Close()

	var masters []*redis.Client
	for _, addr := range strings.Split(env(t, "REDIS_CLUSTER_ADDRS"), ",") {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		masters = append(masters, c)
	}
	stop := make(chan struct{})
	var flushes atomic.Int64
	var flusher sync.WaitGroup
	flusher.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, c := range masters {
				if flush(ctx, c) == nil {
					flushes.Add(1)
				}
			}
		}
	})

	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	granted := make([]atomic.Int64, len(keys))
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 40 {
				k := (g + i) % len(keys)
				if i%10 == 0 { // on keys of their own, within their quota: granted at once
					_, err := r.WaitN(ctx, "wait-"+keys[k], 1)
					if !assert.NoError(t, err) {
						return
					}
					continue
				}
				d, err := r.AllowN(ctx, keys[k], 1)
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					granted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	flusher.Wait()
	for k := range keys {
		assert.EqualValues(t, 50, granted[k].Load(), "key %s: exactly its quota", keys[k])
		d, err := r.Peek(ctx, "wait-"+keys[k], 1)
		require.NoError(t, err)
		assert.Equal(t, 50-8-1, d.Remaining, "key wait-%s: its 8 waits took 8 units", keys[k])
	}
	t.Logf("%d flushes", flushes.Load())
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, s.StoreErrors)
}

// opsSent is a Store that counts the ops it is handed.
type opsSent struct {
	chanlimit.Store
	n atomic.Int64
}

func (s *opsSent) Decide(ctx context.Context, ops []chanlimit.StoreOp) {
	s.n.Add(int64(len(ops)))
	s.Store.Decide(ctx, ops)
}

// TestFailOpenGivesRedisNothing: a spent key, Redis stalled longer than
// the client's read timeouts (with its default retries), callers with
// short deadlines: FailOpen allows their requests locally, and when the
// callers have left, nothing goes back to Redis, which granted nothing.
// Before, each left caller's grant was refunded to Redis, and the spent
// key had its units again. (Of the five requests, those still waiting for
// room for a trip when their callers left are never sent.)
func TestFailOpenGivesRedisNothing(t *testing.T) {
	srv := newServer(t, "--enable-debug-command", "yes")
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), ReadTimeout: 150 * time.Millisecond})
	defer client.Close()
	rst, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t), FailMode: redislimit.FailOpen, Pause: -1})
	require.NoError(t, err)
	st := &opsSent{Store: rst}
	r, err := chanlimit.New(chanlimit.Config{Limit: 5, Window: time.Hour, Store: st})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	d, err := r.AllowN(ctx, "k", 5)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	sentBefore := st.n.Load()
	woke := stall(t, srv, 1500*time.Millisecond)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, _ = r.AllowN(ctx, "k", 1) // it leaves before the store answers
		})
	}
	wg.Wait()
	<-woke
	require.Eventually(t, func() bool { // every op sent failed, and its trip landed, once the client gave up
		s, err := r.Stats(ctx)
		sent := st.n.Load() - sentBefore
		return err == nil && sent > 0 && s.StoreErrors >= uint64(sent)
	}, 10*time.Second, 10*time.Millisecond)
	d, err = r.Peek(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the key is still spent in Redis: %+v", d)
	assert.Zero(t, d.Remaining)
}

// TestSlowRedisSparesOtherKeys: while a WaitN's round trip is stuck in a
// stalled Redis, the partition goes on serving what needs no Redis: Stats
// (a function run by Do), a request above the capacity, on other keys.
// Before, the WaitN's round trip ran on the partition's goroutine, and
// they waited behind it until Redis woke.
func TestSlowRedisSparesOtherKeys(t *testing.T) {
	srv := newServer(t, "--enable-debug-command", "yes")
	client := redis.NewClient(&redis.Options{Addr: srv.addr()}) // go-redis's defaults
	defer client.Close()
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t), Pause: -1})
	require.NoError(t, err)
	r, err := chanlimit.New(chanlimit.Config{Limit: 5, Window: time.Hour, Store: st, Partitions: 1})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	require.True(t, r.Allow("warm")) // the script loaded, a connection open

	woke := stall(t, srv, time.Second)
	waited := make(chan error, 1)
	go func() {
		_, err := r.WaitN(ctx, "slow", 1) // its trip waits for Redis
		waited <- err
	}()
	for { // until the WaitN is in: Stats counts it waiting, or waits behind it
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		s, err := r.Stats(short)
		cancel()
		require.NoError(t, err, "Stats is answered while Redis sleeps")
		if s.Waiting == 1 {
			break
		}
	}
	_, err = r.AllowN(ctx, "fast", 6)
	require.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)
	select {
	case <-woke:
		t.Fatal("the partition waited for Redis")
	default:
	}
	<-woke
	require.NoError(t, <-waited)
}

// TestCheckBoundsNames: a key's value in Redis gives a policy's field
// ("algorithm|name") in two bytes of length, as the script's arguments
// do: Check refuses a Name too long for them, and the longest it takes is
// decided and stored. Before, its length wrapped in the key's value.
func TestCheckBoundsNames(t *testing.T) {
	client := single(t)
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix(t)})
	require.NoError(t, err)
	longest := math.MaxUint16 - len("fixed_window|")
	p := chanlimit.Policy{Name: strings.Repeat("n", longest+1), Algorithm: "fixed_window", Limit: 2, Window: time.Hour}
	_, err = chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{p}, Store: st})
	require.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
	assert.ErrorContains(t, err, "too long")
	p.Name = p.Name[:longest]
	r, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{p}, Store: st})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	for want := 1; want >= 0; want-- {
		d, err := r.AllowN(ctx, "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, want, d.Remaining)
	}
	d, err := r.AllowN(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the state, under its long field, was stored")
}
