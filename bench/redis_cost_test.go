package bench

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkRedisCost: what a decision costs Redis and the client, beside
// redis_rate, as BenchmarkRedis runs them (and chanlimit-16p: a router of
// 16 partitions, as on a machine of 16 cores; and store: the Store alone,
// called by each caller) (callers at once over 10,000 keys under
// redisAdmit). Redis's main thread is the bound for both: one
// Redis serves every instance. Before the run, CONFIG RESETSTAT; after it,
// INFO commandstats and INFO cpu give, per decision:
//
//	redis-us/decision   the time Redis spent in the scripts' calls
//	                    (FCALL, EVALSHA and EVAL, commandstats' usec)
//	redis-cpu-us/decision  Redis's main thread's CPU (user + sys), the
//	                    calls and their networking
//	client-cpu-us/decision  this process's CPU (getrusage), the callers,
//	                    the router and the client
//	decisions/call      decisions per script call
//
// and decisions/s and p50-ns as BenchmarkRedis reports them. Run it with a
// fixed count, e.g. -benchtime 60000x.
func BenchmarkRedisCost(b *testing.B) {
	ks := keys(redisKeys)
	open := newRedisOpen(b, ks)
	for _, im := range redisCostImpls {
		for _, callers := range []int{1, 8, 64, 256} {
			b.Run("impl="+im.name+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				l := open.get(b, im.name)
				reportCost(b, l.client, func() { benchRedis(b, l, ks, callers) })
			})
		}
	}
}

// BenchmarkRedisInstances: BenchmarkRedisCost's measures for 8 instances
// sharing one Redis and one quota (their keys under one prefix), each
// with a client of its own, and 64 callers whose decisions go to the
// instances in turn: each instance has about 8 requests at once, as a
// service of many machines under a moderate load each has. For chanlimit
// what counts is each instance's concurrency, not the total: its calls
// decide about what 8 callers' do.
func BenchmarkRedisInstances(b *testing.B) {
	const instances, callers = 8, 64
	ks := keys(redisKeys)
	for _, im := range redisImpls {
		b.Run("impl="+im.name+"/instances="+strconv.Itoa(instances)+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
			addr, run := redisAddr(b), redisRun()
			ls := make([]*redisLimiter, instances)
			for i := range ls {
				client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: redisPoolSize})
				ls[i] = im.make(b, client, run)
				b.Cleanup(ls[i].close)
				share := ks[i*len(ks)/instances : (i+1)*len(ks)/instances]
				warmUp(b, im.name, ls[i], share)
			}
			var turn atomic.Uint64
			all := &redisLimiter{
				allow: func(ctx context.Context, key string) (bool, error) {
					return ls[turn.Add(1)%instances].allow(ctx, key)
				},
				redisKey: ls[0].redisKey,
				client:   ls[0].client,
			}
			reportCost(b, all.client, func() { benchRedis(b, all, ks, callers) })
		})
	}
}

// reportCost runs run, the benchmark's decisions, between CONFIG
// RESETSTAT and INFO on c, and reports what they cost per decision.
func reportCost(b *testing.B, c *redis.Client, run func()) {
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0, client0 := redisCPU(b, c), clientCPU(b)
	run()
	cpu, client := redisCPU(b, c)-cpu0, clientCPU(b)-client0
	calls, usec := scriptCalls(b, c)
	n := float64(b.N)
	b.ReportMetric(float64(cpu.Microseconds())/n, "redis-cpu-us/decision")
	b.ReportMetric(float64(client.Microseconds())/n, "client-cpu-us/decision")
	if calls > 0 { // none where no script decides (BenchmarkRedisHop)
		b.ReportMetric(usec/n, "redis-us/decision")
		b.ReportMetric(n/calls, "decisions/call")
	}
}

// redisCPU returns the CPU time Redis's main thread has used.
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		name, v, ok := strings.Cut(line, ":")
		if ok && (name == "used_cpu_user_main_thread" || name == "used_cpu_sys_main_thread") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// scriptCalls returns the calls of FCALL, EVALSHA and EVAL since the last CONFIG
// RESETSTAT, and the microseconds Redis spent in them.
func scriptCalls(b *testing.B, c *redis.Client) (calls, usec float64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(line, ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval" && name != "cmdstat_fcall") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += f
			case "usec":
				usec += f
			}
		}
	}
	return calls, usec
}

// clientCPU returns the CPU time this process has used.
func clientCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
