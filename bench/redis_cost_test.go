package bench

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkRedisCost: what a decision costs Redis and the client, beside
// redis_rate, as BenchmarkRedis runs them (and chanlimit-16p: a router of
// 16 partitions, as on a machine of 16 cores) (callers at once over 10,000
// keys under redisAdmit). Redis's main thread is the bound for both: one
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
				ctx := context.Background()
				if err := l.client.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				cpu0, client0 := redisCPU(b, l.client), clientCPU(b)
				benchRedis(b, l, ks, callers)
				cpu, client := redisCPU(b, l.client)-cpu0, clientCPU(b)-client0
				calls, usec := scriptCalls(b, l.client)
				n := float64(b.N)
				b.ReportMetric(usec/n, "redis-us/decision")
				b.ReportMetric(float64(cpu.Microseconds())/n, "redis-cpu-us/decision")
				b.ReportMetric(float64(client.Microseconds())/n, "client-cpu-us/decision")
				if calls > 0 {
					b.ReportMetric(n/calls, "decisions/call")
				}
			})
		}
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
