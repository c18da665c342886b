package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/redislimit"
)

// The Redis benchmarks measure chanlimit with a redislimit.Store beside
// github.com/go-redis/redis_rate/v10 on the same redis-server, the one
// .ci/redis starts (REDIS_ADDR). Each implementation has a client of its
// own, and keys under a prefix of its own, new for each run. Redis runs on
// the same machine as the benchmark, and takes a share of its processors.

// redisKeys is how many keys the Redis benchmarks spread decisions over.
const redisKeys = 10_000

// redisAdmit is the policy of the Redis benchmarks: 1,000,000 requests per
// second per key, in bursts of up to 1,000,000, which neither
// implementation ever denies here (a denial fails the benchmark). It is not
// admitAll (1<<30 per second): redis_rate's script keeps each key's state
// as seconds since 2017 in a Lua double, whose resolution there (about
// 6e-8 s) is coarser than 2^-30 s, so under admitAll its state would never
// move and it would write nothing: it would measure a read-only path.
// Under redisAdmit both write each key's state on every decision
// (checkWrites verifies it), and keep it about a second past the key's
// last decision (redislimit's Grace; redis_rate's EX of a whole second):
// at tens of thousands of decisions per second over 10,000 keys, most
// decisions find their key's state, and some find it gone, alike in both.
var redisAdmit = policy{"admit", 1_000_000, time.Second}

// redisPoolSize is each client's pool: enough connections for 256 callers
// that each hold one for a round trip (redis_rate's case).
const redisPoolSize = 300

// redisLimiter decides on Redis: allow is one decision for 1 unit on key;
// redisKey is the Redis key that holds key's state.
type redisLimiter struct {
	allow    func(ctx context.Context, key string) (bool, error)
	redisKey func(key string) string
	client   *redis.Client
	router   *chanlimit.Router // chanlimit's; nil for redis_rate
	store    *tripStore        // chanlimit's; nil for redis_rate
}

// tripStore is a redislimit.Store that counts its Decide calls (each a
// partition's trip: a round trip of its own, or one it shares with
// others, as the store combines those that wait for one) and the requests
// they carried: decisions/trip is how many decisions shared a Decide.
type tripStore struct {
	*redislimit.Store
	trips, ops atomic.Int64
}

func (s *tripStore) Decide(ctx context.Context, ops []chanlimit.StoreOp) {
	s.trips.Add(1)
	s.ops.Add(int64(len(ops)))
	s.Store.Decide(ctx, ops)
}

// trips returns a function that reports decisions/trip since trips was
// called, for chanlimit's store; for redis_rate, one round trip per
// decision, it reports nothing.
func (l *redisLimiter) trips(b *testing.B) (report func()) {
	if l.store == nil {
		return func() {}
	}
	trips, ops := l.store.trips.Load(), l.store.ops.Load()
	return func() {
		if t := l.store.trips.Load() - trips; t > 0 {
			b.ReportMetric(float64(l.store.ops.Load()-ops)/float64(t), "decisions/trip")
		}
	}
}

func (l *redisLimiter) close() {
	if l.router != nil {
		_ = l.router.Close()
	}
	_ = l.client.Close()
}

// redisImpl names an implementation and makes it on a client, its keys
// under prefix.
type redisImpl struct {
	name string
	make func(b *testing.B, client *redis.Client, prefix string) *redisLimiter
}

// redisImpls are the implementations the Redis benchmarks measure.
var redisImpls = []redisImpl{
	{"chanlimit", newRedisChanlimit},
	{"redis_rate", newRedisRate},
}

// redisCostImpls are those BenchmarkRedisCost measures: redisImpls;
// chanlimit-16p, a router of 16 partitions, as DefaultPartitions gives on
// a machine of 16 cores, where each partition has few of the requests out
// at once and the store sends their trips together; and store, the
// redislimit.Store a router uses, called by each caller itself: what the
// store costs without the router's goroutines.
var redisCostImpls = append(redisImpls[:len(redisImpls):len(redisImpls)],
	redisImpl{"chanlimit-16p", newRedisChanlimit16}, redisImpl{"store", newRedisStore})

// newRedisChanlimit is a router with the default Partitions on a
// redislimit.Store (counted by a tripStore), deciding on Redis's clock (no
// Clock).
func newRedisChanlimit(b *testing.B, client *redis.Client, prefix string) *redisLimiter {
	return newRedisChanlimitOf(b, client, prefix, 0)
}

// newRedisChanlimit16 is newRedisChanlimit with 16 partitions.
func newRedisChanlimit16(b *testing.B, client *redis.Client, prefix string) *redisLimiter {
	return newRedisChanlimitOf(b, client, prefix, 16)
}

func newRedisChanlimitOf(b *testing.B, client *redis.Client, prefix string, partitions int) *redisLimiter {
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	ts := &tripStore{Store: st}
	r, err := chanlimit.New(chanlimit.Config{Limit: redisAdmit.limit, Window: redisAdmit.window, Store: ts, Partitions: partitions})
	if err != nil {
		b.Fatal(err)
	}
	return &redisLimiter{
		allow: func(ctx context.Context, key string) (bool, error) {
			d, err := r.AllowN(ctx, key, 1)
			return d.Allowed, err
		},
		redisKey: func(key string) string { return prefix + key },
		client:   client,
		router:   r,
		store:    ts,
	}
}

// newRedisStore is a redislimit.Store with no router: each decision is a
// Decide of one StoreAllow, made by its caller, under the policy a router
// of newRedisChanlimit hands the store.
func newRedisStore(b *testing.B, client *redis.Client, prefix string) *redisLimiter {
	st, err := redislimit.NewStore(client, redislimit.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	policies := []chanlimit.Policy{{Name: chanlimit.DefaultPolicyName, Algorithm: chanlimit.DefaultAlgorithm, Limit: redisAdmit.limit, Window: redisAdmit.window}}
	if err := st.Check(policies); err != nil {
		b.Fatal(err)
	}
	return &redisLimiter{
		allow: func(ctx context.Context, key string) (bool, error) {
			ops := []chanlimit.StoreOp{{Kind: chanlimit.StoreAllow, Key: key, N: 1, Policies: policies}}
			st.Decide(ctx, ops)
			return ops[0].Decision.Allowed, ops[0].Err
		},
		redisKey: func(key string) string { return prefix + key },
		client:   client,
	}
}

// newRedisRate is redis_rate's Limiter, one EVALSHA round trip per Allow.
func newRedisRate(_ *testing.B, client *redis.Client, prefix string) *redisLimiter {
	l := redis_rate.NewLimiter(client)
	limit := redis_rate.PerSecond(redisAdmit.limit) // Burst = Rate
	return &redisLimiter{
		allow: func(ctx context.Context, key string) (bool, error) {
			res, err := l.Allow(ctx, prefix+key, limit)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		},
		redisKey: func(key string) string { return "rate:" + prefix + key }, // redis_rate's own prefix
		client:   client,
	}
}

// redisAddr returns the single node .ci/redis started, and fails b
// without one.
func redisAddr(b *testing.B) string {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Fatal("REDIS_ADDR is not set: run the Redis benchmarks through .ci/redis, which starts a redis-server of their own, e.g. " +
			"../.ci/redis bash -c 'cd bench && go test -run ^$ -bench BenchmarkRedis -benchtime 3000x .'")
	}
	if d := redisDelay(b); d > 0 {
		return delayedAddr(b, addr, d)
	}
	return addr
}

// redisRun is a prefix new for each run, so that no run finds the state of
// an earlier one.
func redisRun() string {
	return fmt.Sprintf("bench:%d:", time.Now().UnixNano())
}

// redisOpen makes an implementation on a client of its own when a
// benchmark first asks for it, before its timer runs: 256 callers decide
// every key once (which loads the script into Redis and fills the
// client's pool), and checkWrites checks that it writes its keys' state.
// It closes them when the benchmark that made the redisOpen ends.
type redisOpen struct {
	parent *testing.B
	addr   string
	run    string // the prefix of this run's keys
	ks     []string
	open   map[string]*redisLimiter
}

func newRedisOpen(b *testing.B, ks []string) *redisOpen {
	return &redisOpen{parent: b, addr: redisAddr(b), run: redisRun(), ks: ks, open: map[string]*redisLimiter{}}
}

// get returns the implementation name, made on b's first call.
func (o *redisOpen) get(b *testing.B, name string) *redisLimiter {
	if l, ok := o.open[name]; ok {
		return l
	}
	i := slices.IndexFunc(redisCostImpls, func(im redisImpl) bool { return im.name == name })
	client := redis.NewClient(&redis.Options{Addr: o.addr, PoolSize: redisPoolSize})
	l := redisCostImpls[i].make(b, client, o.run+name+":")
	o.parent.Cleanup(l.close)
	o.open[name] = l
	warmUp(b, name, l, o.ks)
	return l
}

// warmUp has l decide every key of ks once, from 256 goroutines, before a
// benchmark's timer runs (which loads the script into Redis and fills the
// client's pool), and checks that l writes its keys' state (checkWrites).
func warmUp(b *testing.B, name string, l *redisLimiter, ks []string) {
	ctx := context.Background()
	if err := l.client.Ping(ctx).Err(); err != nil {
		b.Fatalf("%s: redis at %s: %v", name, l.client.Options().Addr, err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 256)
	for g := range 256 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(ks); i = int(next.Add(1) - 1) {
				if ok, err := l.allow(ctx, ks[i]); err != nil || !ok {
					errs[g] = cmpErr(err, fmt.Errorf("%s denied %s while warming up", name, ks[i]))
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	checkWrites(b, name, l, ks[0])
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// checkWrites fails b unless a decision on key leaves a state in Redis
// that expires: a policy under which an implementation writes nothing
// would measure a path no limit that binds takes.
func checkWrites(b *testing.B, name string, l *redisLimiter, key string) {
	ctx := context.Background()
	if ok, err := l.allow(ctx, key); err != nil || !ok {
		b.Fatalf("%s: %s: allowed %v, error %v", name, key, ok, err)
	}
	ttl, err := l.client.PTTL(ctx, l.redisKey(key)).Result()
	if err != nil {
		b.Fatal(err)
	}
	if ttl <= 0 {
		b.Fatalf("%s kept no state in Redis for %s (PTTL %v): under this policy it would measure a path that writes nothing", name, key, ttl)
	}
}

// BenchmarkRedis: decisions through Redis by exactly `callers` goroutines
// at once, each decision an Allow of 1 unit on a key drawn at random from
// 10,000, under redisAdmit (every decision must be allowed: a denial or an
// error fails the benchmark). The callers share the b.N decisions; each
// call is timed. ns/op is the wall time over b.N, decisions/s its
// inverse, and p50-ns and p99-ns the latency of one call. chanlimit's
// partitions send each burst of queued requests as one pipeline, so its
// callers share round trips; redis_rate makes one round trip per call,
// on a connection of its own.
func BenchmarkRedis(b *testing.B) {
	ks := keys(redisKeys)
	open := newRedisOpen(b, ks)
	for _, im := range redisImpls {
		for _, callers := range []int{1, 8, 64, 256} {
			b.Run("impl="+im.name+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				benchRedis(b, open.get(b, im.name), ks, callers)
			})
		}
	}
}

func benchRedis(b *testing.B, l *redisLimiter, ks []string, callers int) {
	ctx := context.Background()
	lat := make([]time.Duration, b.N) // decision i's latency, written by the caller that made it
	var next, denied atomic.Int64
	var once sync.Once
	var failure error // the first error
	fail := func(err error) { once.Do(func() { failure = err }) }
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for g := range callers {
		ready.Add(1)
		done.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			ready.Done()
			<-start
			for i := next.Add(1) - 1; i < int64(len(lat)); i = next.Add(1) - 1 {
				key := ks[rng.IntN(len(ks))]
				t0 := time.Now()
				ok, err := l.allow(ctx, key)
				lat[i] = time.Since(t0)
				if err != nil {
					fail(err)
				} else if !ok {
					denied.Add(1)
				}
			}
		})
	}
	ready.Wait()
	trips := l.trips(b)
	b.ReportAllocs()
	b.ResetTimer()
	close(start)
	done.Wait()
	b.StopTimer()
	if failure != nil {
		b.Fatal(failure)
	}
	if n := denied.Load(); n > 0 {
		b.Fatalf("%d of %d decisions denied: an admit case must admit every one", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[min(len(lat)*99/100, len(lat)-1)]), "p99-ns")
	trips()
}

// redisBatch is the batch size of BenchmarkRedisBatch.
const redisBatch = 64

// BenchmarkRedisBatch: 64 decisions at once from one caller, over 10,000
// keys under redisAdmit (a denial or an error fails it); one op is the 64,
// and ns/decision and decisions/s are per decision. chanlimit's AllowBatch
// hands each partition its part (one message per partition it touches),
// and each partition sends its part as one pipeline: about one round trip
// per partition. redis_rate has no batch: mode=seq decides the 64 one by
// one from the one goroutine (64 round trips in a row); mode=par starts 64
// goroutines for each op, one per decision, and waits for them all (64
// round trips at once, on 64 connections; starting the goroutines is
// counted too, well under a microsecond each).
func BenchmarkRedisBatch(b *testing.B) {
	ks := keys(redisKeys)
	open := newRedisOpen(b, ks)
	cases := []struct {
		impl, mode string
		run        func(b *testing.B, l *redisLimiter, r *rand.Rand, ks []string)
	}{
		{"chanlimit", "batch", redisBatchChanlimit},
		{"redis_rate", "seq", redisBatchSeq},
		{"redis_rate", "par", redisBatchPar},
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("size=%d/impl=%s/mode=%s", redisBatch, c.impl, c.mode), func(b *testing.B) {
			l := open.get(b, c.impl)
			r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
			trips := l.trips(b)
			b.ReportAllocs()
			b.ResetTimer()
			c.run(b, l, r, ks)
			b.StopTimer()
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N*redisBatch)
			b.ReportMetric(per, "ns/decision")
			b.ReportMetric(1e9/per, "decisions/s")
			trips()
		})
	}
}

func redisBatchChanlimit(b *testing.B, l *redisLimiter, r *rand.Rand, ks []string) {
	ctx := context.Background()
	reqs := make([]chanlimit.Request, redisBatch)
	out := make([]chanlimit.Decision, redisBatch)
	for range b.N {
		for i := range reqs {
			reqs[i] = chanlimit.Request{Key: ks[r.IntN(len(ks))], N: 1}
		}
		if err := l.router.AllowBatch(ctx, reqs, out); err != nil {
			b.Fatal(err)
		}
		for i, d := range out {
			if !d.Allowed {
				b.Fatalf("%s denied: an admit case must admit every one", reqs[i].Key)
			}
		}
	}
}

func redisBatchSeq(b *testing.B, l *redisLimiter, r *rand.Rand, ks []string) {
	ctx := context.Background()
	batch := make([]string, redisBatch)
	for range b.N {
		for i := range batch {
			batch[i] = ks[r.IntN(len(ks))]
		}
		for _, key := range batch {
			if ok, err := l.allow(ctx, key); err != nil || !ok {
				b.Fatalf("%s: allowed %v, error %v: an admit case must admit every one", key, ok, err)
			}
		}
	}
}

func redisBatchPar(b *testing.B, l *redisLimiter, r *rand.Rand, ks []string) {
	ctx := context.Background()
	batch := make([]string, redisBatch)
	errs := make([]error, redisBatch)
	for range b.N {
		for i := range batch {
			batch[i] = ks[r.IntN(len(ks))]
		}
		var wg sync.WaitGroup
		for i, key := range batch {
			wg.Go(func() {
				ok, err := l.allow(ctx, key)
				if err == nil && !ok {
					err = fmt.Errorf("%s denied: an admit case must admit every one", key)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
}
