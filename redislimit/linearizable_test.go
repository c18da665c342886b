package redislimit_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/lincheck"
	"github.com/chanlimit/chanlimit/redislimit"
)

// The checks' size: CI's by default; .ci/lincheck-soak asks for more.
var (
	linearSeeds = flag.Int("lincheck.seeds", 4, "histories recorded and checked for each set of policies and setting")
	linearOps   = flag.Int("lincheck.ops", 20, "calls each goroutine makes in a history")
)

// linearTimeout bounds porcupine's search for one history: one it does
// not finish fails the test.
var linearTimeout = time.Minute

// linearRun is one history: routers, each with a client of its own from
// newClient, sharing one quota in Redis and one fake clock, FailClosed.
type linearRun struct {
	policies  []chanlimit.Policy
	newClient func(t testing.TB) redis.UniversalClient
	routers   int
	clients   int // goroutines per router
	ops       int // calls per goroutine
	seed      uint64
	leave     float64       // the share of calls whose caller leaves
	pause     time.Duration // the stores' Options.Pause
	lossy     bool          // give-backs may be lost (faults)

	// during, if set, starts what goes on while the calls run (a fault),
	// and after stops it.
	during, after func()
}

// linearResult is what run checked.
type linearResult struct {
	lincheck.Result
	failed, left int // calls that failed (their effect unknown), and calls whose callers left
}

// run records the history and checks it.
func (lr linearRun) run(t *testing.T) linearResult {
	t.Helper()
	origin := time.Unix(1_800_000_000, 0)
	clk := clock.NewFake(origin)
	pre := prefix(t)
	h := lincheck.NewHistory(clk, origin, true)
	var targets []lincheck.Target
	var routers []*chanlimit.Router
	for range lr.routers {
		st, err := redislimit.NewStore(lr.newClient(t), redislimit.Options{Prefix: pre, Pause: lr.pause})
		require.NoError(t, err)
		r, err := chanlimit.New(chanlimit.Config{Policies: lr.policies, Clock: clk, Partitions: 2, Store: h.ObserveStore(st, len(targets))})
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		targets, routers = append(targets, r), append(routers, r)
	}
	w := lincheck.Workload{
		Routers: targets, Waiters: []int{lr.routers - 1}, Clock: clk, Origin: origin,
		Keys: []string{"a", "b", "c"}, Capacity: 3, Clients: lr.clients, Ops: lr.ops,
		Step: 60 * time.Millisecond, Quantum: time.Microsecond, Leave: lr.leave, Store: true, Seed: lr.seed,
		Pace: 12, History: h,
	}
	if lr.during != nil {
		lr.during()
	}
	w.Run(t)
	if lr.after != nil {
		lr.after()
	}
	// Closed, a router has no round trip out: every request and give-back
	// Redis may have run is in the history.
	for _, r := range routers {
		r.Close()
	}
	m, err := lincheck.NewModel(lr.policies, lincheck.Options{Store: true, Lossy: lr.lossy})
	require.NoError(t, err)
	require.Zero(t, h.Lost(), "requests the history had no room to keep")
	ops := h.Operations()
	res := linearResult{Result: lincheck.Check(t, m, ops, linearTimeout)}
	if res.Key != "" {
		// What a reader needs to find the cause: every call on the key,
		// and what Redis was asked and answered.
		t.Logf("the calls on %q:\n%s\nthe requests on %q the stores were handed, and their answers:\n%s",
			res.Key, lincheck.Listing(ops, res.Key), res.Key, h.StoreLog(res.Key))
	}
	for _, op := range ops {
		switch op.Output.(lincheck.Output).Outcome {
		case lincheck.Unknown:
			res.failed++
		case lincheck.Left:
			res.left++
		}
	}
	return res
}

// TestLinearizableThroughRedis checks, as TestLinearizableInMemory does in
// the root module, that histories of three routers sharing one quota in
// Redis are linearizable (DESIGN.md, property 10), on the single node and
// on the Cluster, for each algorithm and for several policies.
func TestLinearizableThroughRedis(t *testing.T) {
	for _, where := range []string{"single", "cluster"} {
		for name, policies := range lincheck.PolicySets() {
			t.Run(where+"/"+name, func(t *testing.T) {
				ops := 0
				for seed := range uint64(*linearSeeds) {
					lr := linearRun{policies: policies, newClient: func(t testing.TB) redis.UniversalClient { return clientOf(t, where) },
						routers: 3, clients: 3, ops: *linearOps, seed: seed, leave: 0.08}
					ops += lr.run(t).Ops
				}
				t.Logf("%d histories, %d operations checked", *linearSeeds, ops)
			})
		}
	}
}

// serverFaults are what TestLinearizableUnderFaults does to a
// redis-server of its own, again and again while the calls run: each
// returns once the fault is over.
var serverFaults = map[string]func(t *testing.T, srv *server, admin *redis.Client, rng *rand.Rand){
	// Redis runs no command for a while (CLIENT PAUSE ALL), then all of
	// them.
	"client-pause": func(t *testing.T, srv *server, admin *redis.Client, rng *rand.Rand) {
		ms := 10 + rng.IntN(90)
		assert.NoError(t, admin.Do(context.Background(), "CLIENT", "PAUSE", ms, "ALL").Err())
		time.Sleep(time.Duration(ms) * time.Millisecond) // the fault's own span, on the wall clock
	},
	// redis-server is stopped (SIGSTOP) and goes on (SIGCONT): if long
	// enough, its clients' reads time out (5 s, go-redis's default), and
	// go-redis sends their calls again, every attempt of which it runs
	// once it goes on.
	"sigstop": func(t *testing.T, srv *server, admin *redis.Client, rng *rand.Rand) {
		assert.NoError(t, srv.cmd.Process.Signal(syscall.SIGSTOP))
		time.Sleep(time.Duration(100+rng.IntN(4000)) * time.Millisecond) // the fault's own span, on the wall clock
		assert.NoError(t, srv.cmd.Process.Signal(syscall.SIGCONT))
	},
}

// networkFaults are what TestLinearizableUnderFaults does to the network
// between the routers and Redis, through the proxies of the routers'
// clients, again and again while the calls run: each returns once the
// fault is over.
var networkFaults = map[string]func(t *testing.T, pxs []*proxy, rng *rand.Rand){
	// Replies come late.
	"delay": func(t *testing.T, pxs []*proxy, rng *rand.Rand) {
		px := pxs[rng.IntN(len(pxs))]
		px.delay.Store(int64(time.Duration(1+rng.IntN(20)) * time.Millisecond))
		time.Sleep(time.Duration(10+rng.IntN(90)) * time.Millisecond) // the fault's own span, on the wall clock
		px.delay.Store(0)
	},
	// Replies are lost on their way, and what follows them on their
	// connections: the client's read times out, and it sends the call
	// again on a new one.
	"swallow": func(t *testing.T, pxs []*proxy, rng *rand.Rand) {
		px := pxs[rng.IntN(len(pxs))]
		px.swallow.Store(true)
		time.Sleep(time.Duration(1+rng.IntN(10)) * time.Millisecond) // the fault's own span, on the wall clock
		px.swallow.Store(false)
		time.Sleep(time.Second) // one at a time: each costs its calls a read timeout
	},
	// Connections are cut, whatever was on them, and for a while no new
	// one is taken: a call the client cannot send again fails, whether or
	// not Redis ran it.
	"cut": func(t *testing.T, pxs []*proxy, rng *rand.Rand) {
		px := pxs[rng.IntN(len(pxs))]
		px.refuse.Store(true)
		px.cut()
		time.Sleep(time.Duration(1200+rng.IntN(800)) * time.Millisecond) // past go-redis's retries: calls fail
		px.refuse.Store(false)
	},
}

// TestLinearizableUnderFaults checks histories of three routers sharing
// a redis-server of the test's own, FailClosed, with go-redis's default
// client options, while a fault comes and goes: a call that failed counts
// as decided or not, a caller who left as granted and given back later
// or never, and the histories are linearizable all the same. The faults
// of the network come to the Cluster's clients too, each of which
// reaches each master through a proxy of its own (the Cluster is shared
// with the other tests: nothing stops or pauses it).
func TestLinearizableUnderFaults(t *testing.T) {
	for _, set := range []string{"token_bucket", "several"} {
		for name, fault := range serverFaults {
			t.Run(name+"/"+set, func(t *testing.T) {
				srv := newServer(t)
				admin := redis.NewClient(&redis.Options{Addr: srv.addr()})
				t.Cleanup(func() { admin.Close() })
				linearFaults(t, set, name, func(t *testing.T, _ []*proxy, rng *rand.Rand) { fault(t, srv, admin, rng) }, singleVia(srv))
			})
		}
		for name, fault := range networkFaults {
			t.Run(name+"/"+set, func(t *testing.T) {
				linearFaults(t, set, name, fault, singleVia(newServer(t)))
			})
			t.Run("cluster/"+name+"/"+set, func(t *testing.T) {
				linearFaults(t, set, name, fault, clusterVia(strings.Split(env(t, "REDIS_CLUSTER_ADDRS"), ",")))
			})
		}
	}
}

// singleVia returns what makes a client of srv through a proxy of its
// own, which it adds to pxs.
func singleVia(srv *server) func(t testing.TB, pxs *[]*proxy) redis.UniversalClient {
	return func(t testing.TB, pxs *[]*proxy) redis.UniversalClient {
		px := newProxy(t, srv.addr())
		*pxs = append(*pxs, px)
		c := redis.NewClient(&redis.Options{Addr: px.addr()})
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// clusterVia returns what makes a client of the Cluster of masters that
// reaches each master through a proxy of its own, which it adds to pxs.
func clusterVia(masters []string) func(t testing.TB, pxs *[]*proxy) redis.UniversalClient {
	return func(t testing.TB, pxs *[]*proxy) redis.UniversalClient {
		via := map[string]string{} // each master's proxy, for this client
		for _, m := range masters {
			px := newProxy(t, m)
			*pxs = append(*pxs, px)
			via[m] = px.addr()
		}
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: masters, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to, ok := via[addr]
			if !ok {
				return nil, fmt.Errorf("a node the test has no proxy for: %s", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, to)
		}})
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// linearFaults records and checks histories under set's policies, with
// clients from newClient (each adding its proxies to pxs), while fault
// comes and goes.
func linearFaults(t *testing.T, set, name string, fault func(t *testing.T, pxs []*proxy, rng *rand.Rand), newClient func(t testing.TB, pxs *[]*proxy) redis.UniversalClient) {
	runs := max(1, *linearSeeds/2)
	var faulted, ops, failed, left int
	for seed := range uint64(runs) {
		var pxs []*proxy
		// Every request tries Redis (no Pause): a call fails only once it
		// went out and its answer never came, so that each failure is one
		// whose effect is unknown.
		lr := linearRun{policies: lincheck.PolicySets()[set], routers: 3, clients: 3, ops: *linearOps, seed: seed, leave: 0.08, lossy: true, pause: -1,
			newClient: func(t testing.TB) redis.UniversalClient { return newClient(t, &pxs) }}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		lr.during = func() {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(seed, uint64(len(name))))
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(5+rng.IntN(30)) * time.Millisecond):
					}
					fault(t, pxs, rng)
					faulted++
				}
			})
		}
		lr.after = func() { close(stop); wg.Wait() }
		res := lr.run(t)
		ops, failed, left = ops+res.Ops, failed+res.failed, left+res.left
	}
	t.Logf("%d histories, %d operations checked, %d faults: %d calls failed, %d callers left", runs, ops, faulted, failed, left)
}
