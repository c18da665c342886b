// Command report turns the raw output of the benchmarks in this module into
// RESULTS.md: medians of every run, ratios to the floor (the bare channel
// round trip) and to the best peer, and the machine they ran on.
//
//	go run ./cmd/report results/raw/*.txt > RESULTS.md
package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/perf/benchfmt"
)

// sample is every value measured for one benchmark and unit. benchfmt
// reports every unit in ns as one in sec: ns/op is sec/op, p50-ns is
// p50-sec.
type sample struct {
	bench string            // BenchmarkAllow, ...
	conf  map[string]string // the key=value parts of its name, and its file's layout
	unit  string
	vals  []float64
}

// A raw file whose results ran in another layout than the usual (bench/run
// writes "layout: apart" first for the Redis benchmarks it runs with
// redis-server on a CPU of its own) says so in a file configuration line,
// which load puts in each of its samples' conf as "layout". find looks at
// such samples only when asked for a layout.

func main() {
	all, err := load(os.Args[1:])
	if err != nil {
		log.Fatal(err)
	}
	write(os.Stdout, all)
}

// load reads the benchmark results in the files at paths, and returns a
// sample for each benchmark and unit, in the order they first appear.
func load(paths []string) ([]*sample, error) {
	samples := map[string]*sample{}
	var order []string
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		r := benchfmt.NewReader(f, path)
		for r.Scan() {
			res, ok := r.Result().(*benchfmt.Result)
			if !ok {
				continue
			}
			base, parts := res.Name.Parts()
			conf := map[string]string{}
			for _, p := range parts {
				k, v, _ := strings.Cut(strings.TrimPrefix(string(p), "/"), "=")
				conf[k] = strings.TrimSuffix(v, "-"+fmt.Sprint(runtime.GOMAXPROCS(0)))
			}
			if layout := res.GetConfig("layout"); layout != "" {
				conf["layout"] = layout
			}
			for _, v := range res.Values {
				id := fmt.Sprint(string(base), conf, v.Unit)
				s, ok := samples[id]
				if !ok {
					s = &sample{bench: string(base), conf: conf, unit: v.Unit}
					samples[id] = s
					order = append(order, id)
				}
				s.vals = append(s.vals, v.Value)
			}
		}
		err = r.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	var all []*sample
	for _, id := range order {
		all = append(all, samples[id])
	}
	return all, nil
}

// median returns the median of vals.
func median(vals []float64) float64 {
	v := slices.Clone(vals)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// find returns the median of the sample of bench and unit whose config
// holds every pair in want, and whether there is one.
func find(all []*sample, bench, unit string, want map[string]string) (float64, bool) {
	for _, s := range all {
		if s.bench != bench || s.unit != unit {
			continue
		}
		if _, ok := want["layout"]; !ok && s.conf["layout"] != "" {
			continue
		}
		match := true
		for k, v := range want {
			if s.conf[k] != v {
				match = false
				break
			}
		}
		if match {
			return median(s.vals), true
		}
	}
	return 0, false
}

var peers = []string{"xrate", "sethvargo", "ulule", "throttled"}

func write(w io.Writer, all []*sample) {
	fmt.Fprintf(w, "# chanlimit beside its peers\n\n")
	fmt.Fprintf(w, "Written by `bench/run` on %s. Machine: %s. Medians of every run; the\n", time.Now().UTC().Format("2006-01-02"), machine())
	fmt.Fprintf(w, "raw output is in `results/raw/` when the script ran (not committed).\n\n")
	fmt.Fprintf(w, "`floor` is the bare channel round trip chanlimit is built on: the same\n")
	fmt.Fprintf(w, "partitions, hash, pooled reply channels and request by value, with no\n")
	fmt.Fprintf(w, "limiter. Peers: `xrate` is golang.org/x/time/rate with one Limiter per key\n")
	fmt.Fprintf(w, "in a sync.Map; `sethvargo` is sethvargo/go-limiter's memorystore; `ulule`\n")
	fmt.Fprintf(w, "is ulule/limiter/v3's memory store; `throttled` is throttled/v2's GCRA on\n")
	fmt.Fprintf(w, "its memstore. Modes: `seq` one goroutine; `par` RunParallel (GOMAXPROCS\n")
	fmt.Fprintf(w, "goroutines); `par32` RunParallel with SetParallelism(32).\n\n")

	allowTable(w, all)
	roundTripTable(w, all)
	batchTable(w, all)
	memoryTable(w, all)
	latencyTable(w, all)
	pipelineTable(w, all)
	waitTable(w, all)
	httpTable(w, all)
	redisTable(w, all)
	redisCostTable(w, all)
	redisInstancesTable(w, all)
	redisApartTable(w, all)
	redisHopTable(w, all)
	expiryTable(w, all)
	defaultsTable(w, all)
}

func allowTable(w io.Writer, all []*sample) {
	fmt.Fprintf(w, "## Allow: ns per call\n\n")
	fmt.Fprintf(w, "| keys | limit | mode | chanlimit | floor | %s | chanlimit / floor | chanlimit / best peer |\n", strings.Join(peers, " | "))
	fmt.Fprintf(w, "|---|---|---|---:|---:|%s---:|---:|\n", strings.Repeat("---:|", len(peers)))
	for _, keys := range []string{"1", "1k", "1M"} {
		for _, limit := range []string{"admit", "deny"} {
			for _, mode := range []string{"seq", "par", "par32"} {
				at := func(impl string) (float64, bool) {
					return find(all, "Allow", "sec/op", map[string]string{"keys": keys, "limit": limit, "mode": mode, "impl": impl})
				}
				c, ok := at("chanlimit")
				if !ok {
					continue
				}
				f, _ := at("floor")
				row := []string{keys, limit, mode, ns(c), ns(f)}
				best := 0.0
				for _, p := range peers {
					v, _ := at(p)
					row = append(row, ns(v))
					if v > 0 && (best == 0 || v < best) {
						best = v
					}
				}
				row = append(row, ratio(c, f), ratio(c, best))
				fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
			}
		}
	}
	fmt.Fprintln(w)
}

func roundTripTable(w io.Writer, all []*sample) {
	floor, ok := find(all, "RoundTrip", "sec/op", map[string]string{"stage": "floor"})
	if !ok {
		return
	}
	fmt.Fprintf(w, "## Where an Allow's time goes (1,000 keys, one goroutine, ns per call)\n\n")
	fmt.Fprintf(w, "`floor` is the bare round trip; `table` is the same round trip with the\n")
	fmt.Fprintf(w, "partition goroutine reading the clock and deciding on chanlimit's token-bucket\n")
	fmt.Fprintf(w, "table, and nothing more; `chanlimit` is the router. `work` is the table\n")
	fmt.Fprintf(w, "stage's work alone, with no goroutine: the clock and the decision.\n\n")
	fmt.Fprintf(w, "| stage | ns | / floor |\n|---|---:|---:|\n")
	for _, st := range []string{"work", "floor", "table", "chanlimit"} {
		if v, ok := find(all, "RoundTrip", "sec/op", map[string]string{"stage": st}); ok {
			fmt.Fprintf(w, "| %s | %s | %s |\n", st, ns(v), ratio(v, floor))
		}
	}
	work, _ := find(all, "RoundTrip", "sec/op", map[string]string{"stage": "work"})
	table, _ := find(all, "RoundTrip", "sec/op", map[string]string{"stage": "table"})
	if work > 0 && table > 0 {
		fmt.Fprintf(w, "\nThe work adds %s ns to the round trip, %s times its own %s ns: the caller\n", ns(table-floor), ratio(table-floor, work), ns(work))
		fmt.Fprintf(w, "waits for all of it, and the scheduler hands the two goroutines over less\n")
		fmt.Fprintf(w, "neatly.\n")
	}
	fmt.Fprintln(w)
}

func batchTable(w io.Writer, all []*sample) {
	bestSeq, bestName := 0.0, ""
	for _, p := range peers {
		if v, ok := find(all, "Allow", "sec/op", map[string]string{"keys": "1k", "limit": "admit", "mode": "seq", "impl": p}); ok && (bestSeq == 0 || v < bestSeq) {
			bestSeq, bestName = v, p
		}
	}
	fmt.Fprintf(w, "## AllowBatch: ns per decision (1,000 keys, one goroutine)\n\n")
	fmt.Fprintf(w, "Compared with the fastest peer's sequential Allow on 1,000 keys (%s, %s ns). A batch\n", bestName, ns(bestSeq))
	fmt.Fprintf(w, "travels as one message per partition it touches, so the partition count matters.\n\n")
	parts := []string{"default", "one", "2xprocs"}
	fmt.Fprintf(w, "| limit | batch size | default partitions (GOMAXPROCS) | one partition | 2 × GOMAXPROCS | default / fastest peer's Allow |\n|---|---:|---:|---:|---:|---:|\n")
	for _, limit := range []string{"admit", "deny"} {
		for _, size := range []string{"16", "64", "256"} {
			row := []string{limit, size}
			def := 0.0
			for _, p := range parts {
				v, _ := find(all, "AllowBatch", "sec/decision", map[string]string{"limit": limit, "size": size, "partitions": p})
				if p == "default" {
					def = v
				}
				row = append(row, ns(v))
			}
			row = append(row, ratio(def, bestSeq))
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
	fmt.Fprintln(w)
}

func memoryTable(w io.Writer, all []*sample) {
	fmt.Fprintf(w, "## Bytes per key with 1,000,000 keys\n\n| implementation | B/key |\n|---|---:|\n")
	for _, impl := range append([]string{"chanlimit"}, peers...) {
		if v, ok := find(all, "BytesPerKey", "B/key", map[string]string{"impl": impl}); ok {
			fmt.Fprintf(w, "| %s | %.0f |\n", impl, v)
		}
	}
	fmt.Fprintln(w)
	policiesTable(w, all)
}

// policiesTable writes chanlimit's bytes per key under one policy and
// under two (BenchmarkBytesPerKeyPolicies), and what the second costs
// beyond the first.
func policiesTable(w io.Writer, all []*sample) {
	one, ok := find(all, "BytesPerKeyPolicies", "B/key", map[string]string{"policies": "token_bucket"})
	if !ok {
		return
	}
	fmt.Fprintf(w, "### chanlimit under several policies (1,000,000 keys)\n\n")
	fmt.Fprintf(w, "| policies | B/key | beyond one policy | the second policy's state |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(w, "| token_bucket | %.0f | | |\n", one)
	for _, c := range []struct {
		name  string
		state int
	}{{"token_bucket+token_bucket", 24}, {"token_bucket+fixed_window", 16}} {
		if v, ok := find(all, "BytesPerKeyPolicies", "B/key", map[string]string{"policies": c.name}); ok {
			fmt.Fprintf(w, "| %s | %.0f | %.0f | %d |\n", c.name, v, v-one, c.state)
		}
	}
	fmt.Fprintln(w)
}

func latencyTable(w io.Writer, all []*sample) {
	qs := []string{"p50", "p90", "p99", "p99.9", "p99.99"}
	fmt.Fprintf(w, "## Latency with 64 goroutines hammering 1,000 keys (µs)\n\n")
	fmt.Fprintf(w, "| implementation | %s |\n|---|%s\n", strings.Join(qs, " | "), strings.Repeat("---:|", len(qs)))
	for _, impl := range append([]string{"chanlimit", "floor"}, peers...) {
		row := []string{impl}
		found := false
		for _, q := range qs {
			v, ok := find(all, "Latency", q+"-sec", map[string]string{"impl": impl}) // benchfmt turns ns into sec
			found = found || ok
			row = append(row, fmt.Sprintf("%.1f", v*1e6))
		}
		if found {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
	fmt.Fprintln(w)
}

// pipelineTable writes BenchmarkPipeline: each stage's time per event,
// what it adds to the pass-through floor, and its throughput against the
// x/time/rate worker's.
func pipelineTable(w io.Writer, all []*sample) {
	floor, ok := find(all, "Pipeline", "sec/op", map[string]string{"stage": "passthrough"})
	if !ok {
		return
	}
	xrate, _ := find(all, "Pipeline", "sec/op", map[string]string{"stage": "xrate"})
	fmt.Fprintf(w, "## A pipeline: events over 10,000 keys, producer → stage → consumer (ns per event)\n\n")
	fmt.Fprintf(w, "Every stage admits every event. `passthrough` decides nothing: the channels\n")
	fmt.Fprintf(w, "alone. `xrate` and `allow` are workers calling x/time/rate (a Limiter per key\n")
	fmt.Fprintf(w, "in a sync.Map) and chanlimit's Allow per event; `police` and `throttle` are\n")
	fmt.Fprintf(w, "chanlimit's pipeline stages, `throttle` with nothing to wait for.\n\n")
	fmt.Fprintf(w, "| stage | ns/event | over passthrough | throughput / xrate's |\n|---|---:|---:|---:|\n")
	for _, st := range []string{"passthrough", "xrate", "allow", "police", "throttle"} {
		v, ok := find(all, "Pipeline", "sec/op", map[string]string{"stage": st})
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", st, ns(v), ns(v-floor), ratio(xrate, v))
	}
	fmt.Fprintln(w)
}

// httpTable writes BenchmarkHTTP: each middleware's time per request,
// what it adds to the handler alone, that against httprate's, and the
// allocations.
func httpTable(w io.Writer, all []*sample) {
	if _, ok := find(all, "HTTP", "sec/op", map[string]string{"impl": "none"}); !ok {
		return
	}
	fmt.Fprintf(w, "## HTTP middleware: one request through ServeHTTP, in process (ns per request)\n\n")
	fmt.Fprintf(w, "Pre-built GET requests from 1 or 1,000 client IPs, keyed by IP, admit-all,\n")
	fmt.Fprintf(w, "into a handler that writes 200 (`none`: the handler alone). `chanlimit` is\n")
	fmt.Fprintf(w, "httplimit.Middleware writing RateLimit-Policy and RateLimit; `httprate` is\n")
	fmt.Fprintf(w, "go-chi/httprate's LimitByIP writing its X-RateLimit-* fields.\n\n")
	fmt.Fprintf(w, "| keys | mode | none | chanlimit | httprate | chanlimit adds | httprate adds | added / httprate's | allocs chanlimit / httprate |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, keys := range []string{"1", "1000"} {
		for _, mode := range []string{"seq", "par"} {
			at := func(impl, unit string) float64 {
				v, _ := find(all, "HTTP", unit, map[string]string{"keys": keys, "mode": mode, "impl": impl})
				return v
			}
			none, c, h := at("none", "sec/op"), at("chanlimit", "sec/op"), at("httprate", "sec/op")
			if c == 0 {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %.0f / %.0f |\n", keys, mode, ns(none), ns(c), ns(h),
				ns(c-none), ns(h-none), ratio(c-none, h-none), at("chanlimit", "allocs/op"), at("httprate", "allocs/op"))
		}
	}
	fmt.Fprintln(w)
}

// redisTable writes BenchmarkRedis and BenchmarkRedisBatch: chanlimit on
// a redislimit.Store beside redis_rate on the same redis-server, by
// concurrent callers, and a batch of 64 beside redis_rate one by one.
func redisTable(w io.Writer, all []*sample) {
	at := func(bench, unit string, conf map[string]string) float64 {
		v, _ := find(all, bench, unit, conf)
		return v
	}
	callers := []string{"1", "8", "64", "256"}
	if _, ok := find(all, "Redis", "decisions/s", map[string]string{"impl": "chanlimit"}); ok {
		fmt.Fprintf(w, "## Redis: decisions through one local redis-server\n\n")
		fmt.Fprintf(w, "Exactly `callers` goroutines share the decisions, each an Allow of 1 unit on\n")
		fmt.Fprintf(w, "a key drawn from 10,000, at 1,000,000 per second per key: every one is\n")
		fmt.Fprintf(w, "allowed, and each writes its key's state. `chanlimit` is a router with the\n")
		fmt.Fprintf(w, "default partitions on a redislimit.Store: each partition hands the store the\n")
		fmt.Fprintf(w, "requests queued in its mailbox at once (`per trip`: decisions per trip; the\n")
		fmt.Fprintf(w, "store sends trips that wait for a round trip together).\n")
		fmt.Fprintf(w, "`redis_rate` is go-redis/redis_rate/v10, one EVALSHA round trip per call.\n")
		fmt.Fprintf(w, "Each has a client of its own (PoolSize 300) on the redis-server `.ci/redis`\n")
		fmt.Fprintf(w, "starts on this machine, which takes a share of its processors. Latency is\n")
		fmt.Fprintf(w, "one call's, in µs.\n\n")
		fmt.Fprintf(w, "| callers | chanlimit decisions/s | redis_rate decisions/s | chanlimit / redis_rate | chanlimit p50 | redis_rate p50 | chanlimit p99 | redis_rate p99 | per trip |\n")
		fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, n := range callers {
			c := map[string]string{"impl": "chanlimit", "callers": n}
			r := map[string]string{"impl": "redis_rate", "callers": n}
			cd, rd := at("Redis", "decisions/s", c), at("Redis", "decisions/s", r)
			if cd == 0 && rd == 0 {
				continue
			}
			fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | %s | %s | %s | %s | %.1f |\n", n, cd, rd, ratio(cd, rd),
				us(at("Redis", "p50-sec", c)), us(at("Redis", "p50-sec", r)),
				us(at("Redis", "p99-sec", c)), us(at("Redis", "p99-sec", r)), at("Redis", "decisions/trip", c))
		}
		c1 := at("Redis", "p50-sec", map[string]string{"impl": "chanlimit", "callers": "1"})
		r1 := at("Redis", "p50-sec", map[string]string{"impl": "redis_rate", "callers": "1"})
		fmt.Fprintf(w, "\nAt 1 caller, chanlimit's p50 latency is %s times redis_rate's (%s µs and %s µs):\n", ratio(c1, r1), us(c1), us(r1))
		fmt.Fprintf(w, "each decision is one round trip in both, and chanlimit's also passes through a\n")
		fmt.Fprintf(w, "partition's goroutine and the one that makes its round trip: with a P idle,\n")
		fmt.Fprintf(w, "each hand-off wakes a thread of the Go runtime, which competes for the CPUs\n")
		fmt.Fprintf(w, "with Redis here.")
		if _, ok := find(all, "RedisCost", "p50-sec", map[string]string{"impl": "chanlimit", "layout": "apart"}); ok {
			fmt.Fprintf(w, " Below, the same with the benchmark on one P.")
		}
		fmt.Fprintf(w, "\n\n")
	}
	seq := at("RedisBatch", "sec/decision", map[string]string{"impl": "redis_rate", "mode": "seq"})
	if _, ok := find(all, "RedisBatch", "sec/decision", map[string]string{"impl": "chanlimit"}); !ok {
		return
	}
	fmt.Fprintf(w, "### 64 decisions at once through Redis, from one caller (ns per decision)\n\n")
	fmt.Fprintf(w, "`chanlimit batch` is one AllowBatch of 64 (one pipeline per partition it\n")
	fmt.Fprintf(w, "touches); `redis_rate seq` decides the 64 one by one; `redis_rate par`\n")
	fmt.Fprintf(w, "starts 64 goroutines, one per decision, and waits for them all.\n\n")
	fmt.Fprintf(w, "| case | ns/decision | decisions/s | / redis_rate seq |\n|---|---:|---:|---:|\n")
	for _, c := range []struct{ impl, mode string }{{"chanlimit", "batch"}, {"redis_rate", "seq"}, {"redis_rate", "par"}} {
		conf := map[string]string{"impl": c.impl, "mode": c.mode}
		v, ok := find(all, "RedisBatch", "sec/decision", conf)
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s %s | %s | %.0f | %s |\n", c.impl, c.mode, ns(v), at("RedisBatch", "decisions/s", conf), ratio(v, seq))
	}
	fmt.Fprintln(w)
}

// redisCostTable writes BenchmarkRedisCost: what a decision costs Redis
// and the client, chanlimit beside redis_rate, by concurrent callers.
func redisCostTable(w io.Writer, all []*sample) {
	at := func(unit string, conf map[string]string) float64 {
		v, _ := find(all, "RedisCost", unit, conf)
		return v
	}
	if _, ok := find(all, "RedisCost", "redis-us/decision", map[string]string{"impl": "chanlimit"}); !ok {
		return
	}
	fmt.Fprintf(w, "### What a decision costs through Redis (µs per decision)\n\n")
	fmt.Fprintf(w, "As above, after CONFIG RESETSTAT: `Redis` is the time Redis's commandstats\n")
	fmt.Fprintf(w, "count in the scripts' calls, `Redis CPU` its main thread's CPU (user and\n")
	fmt.Fprintf(w, "sys: the calls and their networking), `client CPU` the benchmark process's\n")
	fmt.Fprintf(w, "(getrusage: callers, router, client); `per call` is chanlimit's decisions\n")
	fmt.Fprintf(w, "per script call (redis_rate's is 1). Redis's one thread is the bound for\n")
	fmt.Fprintf(w, "every instance that shares it.\n\n")
	fmt.Fprintf(w, "| callers | chanlimit Redis | redis_rate Redis | ratio | chanlimit Redis CPU | redis_rate Redis CPU | ratio | chanlimit client CPU | redis_rate client CPU | per call | decisions/s ratio |\n")
	fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range []string{"1", "8", "64", "256"} {
		c := map[string]string{"impl": "chanlimit", "callers": n}
		r := map[string]string{"impl": "redis_rate", "callers": n}
		cu, ru := at("redis-us/decision", c), at("redis-us/decision", r)
		if cu == 0 && ru == 0 {
			continue
		}
		cc, rc := at("redis-cpu-us/decision", c), at("redis-cpu-us/decision", r)
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %s | %.1f | %.1f | %s | %.1f | %.1f | %.1f | %s |\n", n, cu, ru, ratio(cu, ru), cc, rc, ratio(cc, rc),
			at("client-cpu-us/decision", c), at("client-cpu-us/decision", r), at("decisions/call", c),
			ratio(at("decisions/s", c), at("decisions/s", r)))
	}
	fmt.Fprintln(w)
	if _, ok := find(all, "RedisCost", "redis-cpu-us/decision", map[string]string{"impl": "chanlimit-16p"}); ok {
		redisCost16Table(w, at)
	}
	if _, ok := find(all, "RedisCost", "redis-cpu-us/decision", map[string]string{"impl": "store"}); ok {
		redisCostStoreTable(w, at)
	}
}

// redisCost16Table writes BenchmarkRedisCost's figures for chanlimit-16p,
// by at (the median of a unit, for a configuration).
func redisCost16Table(w io.Writer, at func(unit string, conf map[string]string) float64) {
	fmt.Fprintf(w, "chanlimit-16p is a router of 16 partitions, as DefaultPartitions gives one\n")
	fmt.Fprintf(w, "on a machine of 16 cores: each partition sends its own bursts, and the\n")
	fmt.Fprintf(w, "store sends those that wait for a round trip together.\n\n")
	fmt.Fprintf(w, "| callers | chanlimit-16p Redis CPU | ratio to redis_rate | client CPU | per call | decisions/s ratio |\n")
	fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|\n")
	costRows(at, "chanlimit-16p", func(n string, c, r map[string]string) {
		cc := at("redis-cpu-us/decision", c)
		fmt.Fprintf(w, "| %s | %.1f | %s | %.1f | %.1f | %s |\n", n, cc, ratio(cc, at("redis-cpu-us/decision", r)),
			at("client-cpu-us/decision", c), at("decisions/call", c), ratio(at("decisions/s", c), at("decisions/s", r)))
	})
	fmt.Fprintln(w)
}

// costRows calls row for each number of callers BenchmarkRedisCost ran
// impl at, in order, with impl's configuration there and redis_rate's.
func costRows(at func(unit string, conf map[string]string) float64, impl string, row func(callers string, c, r map[string]string)) {
	for _, n := range []string{"1", "8", "64", "256"} {
		c := map[string]string{"impl": impl, "callers": n}
		if at("redis-cpu-us/decision", c) == 0 {
			continue
		}
		row(n, c, map[string]string{"impl": "redis_rate", "callers": n})
	}
}

// redisCostStoreTable writes BenchmarkRedisCost's figures for store, the
// redislimit.Store called by each caller itself, beside chanlimit's router
// on it: what the router's goroutines add to the store's cost.
func redisCostStoreTable(w io.Writer, at func(unit string, conf map[string]string) float64) {
	fmt.Fprintf(w, "`store` is the redislimit.Store a router uses, called by each caller\n")
	fmt.Fprintf(w, "itself, with no router: at one caller a decision goes from its caller to\n")
	fmt.Fprintf(w, "Redis and back (with more, those that wait for a round trip go in\n")
	fmt.Fprintf(w, "another caller's), where a router's goes from its caller to a partition,\n")
	fmt.Fprintf(w, "to the goroutine that makes the round trip, and back. Ratios are to\n")
	fmt.Fprintf(w, "redis_rate.\n\n")
	fmt.Fprintf(w, "| callers | store Redis CPU | ratio | store client CPU | chanlimit client CPU | per call | store decisions/s ratio | store p50 ratio | chanlimit p50 ratio |\n")
	fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	costRows(at, "store", func(n string, s, r map[string]string) {
		c := map[string]string{"impl": "chanlimit", "callers": n}
		sc := at("redis-cpu-us/decision", s)
		fmt.Fprintf(w, "| %s | %.1f | %s | %.1f | %.1f | %.1f | %s | %s | %s |\n", n, sc, ratio(sc, at("redis-cpu-us/decision", r)),
			at("client-cpu-us/decision", s), at("client-cpu-us/decision", c), at("decisions/call", s),
			ratio(at("decisions/s", s), at("decisions/s", r)), ratio(at("p50-sec", s), at("p50-sec", r)), ratio(at("p50-sec", c), at("p50-sec", r)))
	})
	fmt.Fprintln(w)
}

// redisApartTable writes BenchmarkRedisCost as it ran in the layout
// "apart": redis-server on a CPU of its own, the benchmark alone on
// another, with one P.
func redisApartTable(w io.Writer, all []*sample) {
	at := func(unit string, conf map[string]string) float64 {
		v, _ := find(all, "RedisCost", unit, conf)
		return v
	}
	apart := func(impl, callers string) map[string]string {
		return map[string]string{"impl": impl, "callers": callers, "layout": "apart"}
	}
	if _, ok := find(all, "RedisCost", "redis-cpu-us/decision", apart("chanlimit", "1")); !ok {
		return
	}
	fmt.Fprintf(w, "### Through Redis, with Redis on a CPU of its own and the benchmark on one P\n\n")
	fmt.Fprintf(w, "BenchmarkRedisCost again, with redis-server on one CPU and the benchmark\n")
	fmt.Fprintf(w, "alone on another (`taskset`; Go then gives it one P, as it does any\n")
	fmt.Fprintf(w, "process given one CPU, and a router one partition): as a service of one\n")
	fmt.Fprintf(w, "CPU whose Redis runs elsewhere. With no P idle, a hand-off between\n")
	fmt.Fprintf(w, "goroutines wakes no thread; above, each can, and the thread competes for\n")
	fmt.Fprintf(w, "the two CPUs with Redis while the request waits on it.\n\n")
	fmt.Fprintf(w, "| callers | chanlimit Redis CPU | redis_rate Redis CPU | ratio | chanlimit client CPU | redis_rate client CPU | per call | decisions/s ratio | chanlimit p50 | redis_rate p50 | ratio | store p50 ratio |\n")
	fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range []string{"1", "8", "64", "256"} {
		c, r, s := apart("chanlimit", n), apart("redis_rate", n), apart("store", n)
		cc, rc := at("redis-cpu-us/decision", c), at("redis-cpu-us/decision", r)
		if cc == 0 && rc == 0 {
			continue
		}
		cp, rp := at("p50-sec", c), at("p50-sec", r)
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %s | %.1f | %.1f | %.1f | %s | %s | %s | %s | %s |\n", n, cc, rc, ratio(cc, rc),
			at("client-cpu-us/decision", c), at("client-cpu-us/decision", r), at("decisions/call", c),
			ratio(at("decisions/s", c), at("decisions/s", r)), us(cp), us(rp), ratio(cp, rp), ratio(at("p50-sec", s), rp))
	}
	fmt.Fprintln(w)
}

// redisHopTable writes BenchmarkRedisHop, in each layout it ran in: a
// GET's latency made by its caller, and one or two goroutines away.
func redisHopTable(w io.Writer, all []*sample) {
	usual := func(hop string) map[string]string { return map[string]string{"hop": hop} }
	apart := func(hop string) map[string]string { return map[string]string{"hop": hop, "layout": "apart"} }
	_, ok := find(all, "RedisHop", "p50-sec", usual("none"))
	if _, okApart := find(all, "RedisHop", "p50-sec", apart("none")); !ok && !okApart {
		return
	}
	at := func(unit string, conf map[string]string) float64 {
		v, _ := find(all, "RedisHop", unit, conf)
		return v
	}
	cpu := func(conf map[string]string) string { // "–" where it did not run
		v, ok := find(all, "RedisHop", "client-cpu-us/decision", conf)
		if !ok {
			return "–"
		}
		return fmt.Sprintf("%.1f", v)
	}
	fmt.Fprintf(w, "### The floor under one caller's latency through Redis\n\n")
	fmt.Fprintf(w, "One caller's GET of a key that holds nothing (`BenchmarkRedisHop`): made by\n")
	fmt.Fprintf(w, "the caller (`none`), by a goroutine the caller hands the key to over a\n")
	fmt.Fprintf(w, "channel and that answers over another (`one`), as a router's round trips\n")
	fmt.Fprintf(w, "are made off its callers' goroutines, and through one more goroutine\n")
	fmt.Fprintf(w, "between them (`two`), as a router's partition is. No limiter: what the\n")
	fmt.Fprintf(w, "Go runtime charges for those hand-offs around a wait on the network, with\n")
	fmt.Fprintf(w, "Redis sharing the CPUs (as above) and on a CPU of its own with the\n")
	fmt.Fprintf(w, "benchmark on one P (apart). Latency in µs, client CPU in µs a GET.\n\n")
	fmt.Fprintf(w, "| hop | p50, shared | client CPU, shared | p50, apart | client CPU, apart |\n|---|---:|---:|---:|---:|\n")
	for _, hop := range []string{"none", "one", "two"} {
		pu, pa := at("p50-sec", usual(hop)), at("p50-sec", apart(hop))
		if pu == 0 && pa == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", hop, us(pu), cpu(usual(hop)), us(pa), cpu(apart(hop)))
	}
	fmt.Fprintln(w)
}

// redisInstancesTable writes BenchmarkRedisInstances: the cost table's
// measures for instances that share one Redis, each under a part of the
// callers.
func redisInstancesTable(w io.Writer, all []*sample) {
	c := map[string]string{"impl": "chanlimit"}
	r := map[string]string{"impl": "redis_rate"}
	at := func(unit string, conf map[string]string) float64 {
		v, _ := find(all, "RedisInstances", unit, conf)
		return v
	}
	if _, ok := find(all, "RedisInstances", "redis-cpu-us/decision", c); !ok {
		return
	}
	var instances, callers string
	for _, s := range all {
		if s.bench == "RedisInstances" {
			instances, callers = s.conf["instances"], s.conf["callers"]
			break
		}
	}
	fmt.Fprintf(w, "%s instances, each a router (or a redis_rate Limiter) on a client of its\n", instances)
	fmt.Fprintf(w, "own, share one Redis and one quota, and %s callers' decisions go to them\n", callers)
	fmt.Fprintf(w, "in turn: each instance has a few at once, as a service of many machines\n")
	fmt.Fprintf(w, "under a moderate load each has (`BenchmarkRedisInstances`).\n\n")
	fmt.Fprintf(w, "| instances | callers | chanlimit Redis CPU | redis_rate Redis CPU | ratio | chanlimit client CPU | redis_rate client CPU | per call | decisions/s ratio |\n")
	fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	cc, rc := at("redis-cpu-us/decision", c), at("redis-cpu-us/decision", r)
	fmt.Fprintf(w, "| %s | %s | %.1f | %.1f | %s | %.1f | %.1f | %.1f | %s |\n\n", instances, callers, cc, rc, ratio(cc, rc),
		at("client-cpu-us/decision", c), at("client-cpu-us/decision", r), at("decisions/call", c),
		ratio(at("decisions/s", c), at("decisions/s", r)))
}

// waitTable writes BenchmarkWaitLatency: how late WaitN wakes after its
// grant, beside a bare timer after its deadline.
func waitTable(w io.Writer, all []*sample) {
	fmt.Fprintf(w, "## How late a waiter wakes on the real clock (µs)\n\n")
	fmt.Fprintf(w, "| waiter | p50 | p99 |\n|---|---:|---:|\n")
	for _, c := range []string{"timer", "waitn"} {
		p50, ok := find(all, "WaitLatency", "p50-sec", map[string]string{"wait": c})
		if !ok {
			continue
		}
		p99, _ := find(all, "WaitLatency", "p99-sec", map[string]string{"wait": c})
		fmt.Fprintf(w, "| %s | %.0f | %.0f |\n", c, p50*1e6, p99*1e6)
	}
	fmt.Fprintln(w)
}

func expiryTable(w io.Writer, all []*sample) {
	fmt.Fprintf(w, "## Expiring 1,000,000 keys that become idle at once (one partition)\n\n")
	fmt.Fprintf(w, "Single Allow calls timed while the partition expires them, a few per message;\n")
	fmt.Fprintf(w, "`due=none` is the same calls with nothing due; `sweep=full` is one Expire\n")
	fmt.Fprintf(w, "of all of them at once, the stall the budget avoids. A Stats call every\n")
	fmt.Fprintf(w, "16,384 calls checks progress; it counts the idle keys still held.\n\n")
	fmt.Fprintf(w, "| case | p50 | p99.99 | longest | calls | longest Stats |\n|---|---:|---:|---:|---:|---:|\n")
	for _, c := range []struct{ key, val string }{{"due", "none"}, {"due", "all"}, {"sweep", "full"}} {
		want := map[string]string{c.key: c.val}
		longest, ok := find(all, "ExpiryStall", "max-sec", want)
		if !ok {
			continue
		}
		p50, _ := find(all, "ExpiryStall", "p50-sec", want)
		tail, _ := find(all, "ExpiryStall", "p99.99-sec", want)
		calls, _ := find(all, "ExpiryStall", "calls", want)
		stats, _ := find(all, "ExpiryStall", "stats-max-sec", want)
		fmt.Fprintf(w, "| %s=%s | %s | %s | %s | %.0f | %s |\n", c.key, c.val, ns(p50), ns(tail), ns(longest), calls, ns(stats))
	}
	fmt.Fprintln(w)
}

func defaultsTable(w io.Writer, all []*sample) {
	fmt.Fprintf(w, "## Partitions and MailboxSize (chanlimit Allow, 1,000 keys, ns per call)\n\n")
	fmt.Fprintf(w, "| mode | partitions | mailbox 1 | mailbox 16 | mailbox 64 | mailbox 256 |\n|---|---|---:|---:|---:|---:|\n")
	for _, mode := range []string{"seq", "par", "par32"} {
		for _, parts := range []string{"1xprocs", "2xprocs", "4xprocs", "16xprocs"} {
			row := []string{mode, strings.TrimSuffix(parts, "xprocs") + " × GOMAXPROCS"}
			found := false
			for _, mb := range []string{"1", "16", "64", "256"} {
				v, ok := find(all, "Defaults", "sec/op", map[string]string{"mode": mode, "partitions": parts, "mailbox": mb})
				found = found || ok
				row = append(row, ns(v))
			}
			if found {
				fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
			}
		}
	}
	fmt.Fprintln(w)
}

// ns formats seconds as nanoseconds.
func ns(sec float64) string {
	if sec == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", sec*1e9)
}

// us formats seconds as microseconds.
func us(sec float64) string {
	if sec == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", sec*1e6)
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// machine describes where this ran: the CPU, its count, and Go.
func machine() string {
	model := "unknown CPU"
	if out, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range bytes.Split(out, []byte("\n")) {
			if k, v, ok := bytes.Cut(line, []byte(":")); ok && strings.TrimSpace(string(k)) == "model name" {
				model = strings.TrimSpace(string(v))
				break
			}
		}
	}
	goVersion := runtime.Version()
	if out, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		goVersion = strings.TrimSpace(string(out))
	}
	return cmp.Or(fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d), %s, %s/%s", model, runtime.NumCPU(), runtime.GOMAXPROCS(0), goVersion, runtime.GOOS, runtime.GOARCH))
}
