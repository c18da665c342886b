package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestRedisCostTable: the cost table from raw results: medians per
// decision, ratios of chanlimit to redis_rate, decisions per call.
func TestRedisCostTable(t *testing.T) {
	all := loadLines(t,
		"BenchmarkRedisCost/impl=chanlimit/callers=64-P 60000 20000 ns/op 4.0 client-cpu-us/decision 5.0 decisions/call 50000 decisions/s 5.0 decisions/trip 1000000 p50-ns 2000000 p99-ns 6.0 redis-cpu-us/decision 5.0 redis-us/decision",
		"BenchmarkRedisCost/impl=redis_rate/callers=64-P 60000 40000 ns/op 8.0 client-cpu-us/decision 1.0 decisions/call 25000 decisions/s 2000000 p50-ns 4000000 p99-ns 30.0 redis-cpu-us/decision 20.0 redis-us/decision",
		"BenchmarkRedisCost/impl=chanlimit-16p/callers=64-P 60000 30000 ns/op 7.0 client-cpu-us/decision 4.0 decisions/call 37500 decisions/s 4.0 decisions/trip 1500000 p50-ns 3000000 p99-ns 10.0 redis-cpu-us/decision 8.0 redis-us/decision",
		"BenchmarkRedisCost/impl=store/callers=64-P 60000 25000 ns/op 3.0 client-cpu-us/decision 6.0 decisions/call 40000 decisions/s 700000 p50-ns 3000000 p99-ns 7.5 redis-cpu-us/decision 6.0 redis-us/decision",
	)
	var out bytes.Buffer
	redisCostTable(&out, all)
	if want := "| 64 | 5.0 | 20.0 | 0.25 | 6.0 | 30.0 | 0.20 | 4.0 | 8.0 | 5.0 | 2.00 |"; !strings.Contains(out.String(), want) {
		t.Errorf("the table lacks %q:\n%s", want, out.String())
	}
	if want := "| 64 | 10.0 | 0.33 | 7.0 | 4.0 | 1.50 |"; !strings.Contains(out.String(), want) {
		t.Errorf("the table of 16 partitions lacks %q:\n%s", want, out.String())
	}
	if want := "| 64 | 7.5 | 0.25 | 3.0 | 4.0 | 6.0 | 1.60 | 0.35 | 0.50 |"; !strings.Contains(out.String(), want) {
		t.Errorf("the table of the store alone lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	redisCostTable(&out, nil)
	if out.Len() != 0 {
		t.Errorf("a table without results:\n%s", out.String())
	}
}

// TestRedisApartTable: the table of BenchmarkRedisCost run with Redis on
// a CPU of its own, from a raw file that says "layout: apart", whose
// results the other tables leave alone.
func TestRedisApartTable(t *testing.T) {
	// The apart file first, as a glob of bench/run's raw files has it.
	all := loadFiles(t, []string{
		"layout: apart",
		"BenchmarkRedisCost/impl=chanlimit/callers=1 60000 60000 ns/op 50.0 client-cpu-us/decision 1.0 decisions/call 16000 decisions/s 1.0 decisions/trip 62000 p50-ns 90000 p99-ns 30.0 redis-cpu-us/decision 14.0 redis-us/decision",
		"BenchmarkRedisCost/impl=redis_rate/callers=1 60000 50000 ns/op 55.0 client-cpu-us/decision 1.0 decisions/call 20000 decisions/s 68000 p50-ns 90000 p99-ns 40.0 redis-cpu-us/decision 14.0 redis-us/decision",
		"BenchmarkRedisCost/impl=store/callers=1 60000 60000 ns/op 45.0 client-cpu-us/decision 1.0 decisions/call 16000 decisions/s 65100 p50-ns 90000 p99-ns 35.0 redis-cpu-us/decision 14.0 redis-us/decision",
	}, []string{
		"BenchmarkRedisCost/impl=chanlimit/callers=1-P 60000 90000 ns/op 70.0 client-cpu-us/decision 1.0 decisions/call 11000 decisions/s 1.0 decisions/trip 100000 p50-ns 200000 p99-ns 40.0 redis-cpu-us/decision 15.0 redis-us/decision",
		"BenchmarkRedisCost/impl=redis_rate/callers=1-P 60000 80000 ns/op 50.0 client-cpu-us/decision 1.0 decisions/call 12500 decisions/s 60000 p50-ns 200000 p99-ns 40.0 redis-cpu-us/decision 15.0 redis-us/decision",
	})
	var out bytes.Buffer
	redisApartTable(&out, all)
	if want := "| 1 | 30.0 | 40.0 | 0.75 | 50.0 | 55.0 | 1.0 | 0.80 | 62 | 68 | 0.91 | 0.96 |"; !strings.Contains(out.String(), want) {
		t.Errorf("the table lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	redisCostTable(&out, all)
	if want := "| 1 | 15.0 | 15.0 | 1.00 | 40.0 | 40.0 | 1.00 | 70.0 | 50.0 | 1.0 | 0.88 |"; !strings.Contains(out.String(), want) {
		t.Errorf("the usual table lacks %q (its own results, not the apart ones):\n%s", want, out.String())
	}
	var usual []*sample
	for _, s := range all {
		if s.conf["layout"] == "" {
			usual = append(usual, s)
		}
	}
	if len(usual) == 0 || len(usual) == len(all) {
		t.Fatalf("%d of %d samples without a layout: the file's layout line was not read", len(usual), len(all))
	}
	out.Reset()
	redisApartTable(&out, usual)
	if out.Len() != 0 {
		t.Errorf("an apart table without apart results:\n%s", out.String())
	}
}

// TestRedisHopTable: the floor's table, a row for each hop, with the
// apart layout's figures beside the usual ones where they ran.
func TestRedisHopTable(t *testing.T) {
	usual := []string{
		"BenchmarkRedisHop/hop=none-P 1000 50000 ns/op 45.0 client-cpu-us/decision 20000 decisions/s 48000 p50-ns 90000 p99-ns 30.0 redis-cpu-us/decision",
		"BenchmarkRedisHop/hop=one-P 1000 65000 ns/op 70.0 client-cpu-us/decision 15000 decisions/s 64000 p50-ns 90000 p99-ns 30.0 redis-cpu-us/decision",
	}
	all := loadFiles(t, []string{
		"layout: apart",
		"BenchmarkRedisHop/hop=none 1000 50000 ns/op 40.0 client-cpu-us/decision 20000 decisions/s 47000 p50-ns 90000 p99-ns 30.0 redis-cpu-us/decision",
		"BenchmarkRedisHop/hop=one 1000 50000 ns/op 41.0 client-cpu-us/decision 20000 decisions/s 49000 p50-ns 90000 p99-ns 30.0 redis-cpu-us/decision",
	}, usual)
	var out bytes.Buffer
	redisHopTable(&out, all)
	for _, want := range []string{"| none | 48 | 45.0 | 47 | 40.0 |", "| one | 64 | 70.0 | 49 | 41.0 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "| two |") {
		t.Errorf("a row for a hop that did not run:\n%s", out.String())
	}
	out.Reset()
	redisHopTable(&out, loadFiles(t, usual))
	if want := "| one | 64 | 70.0 | – | – |"; !strings.Contains(out.String(), want) {
		t.Errorf("the table without the apart layout lacks %q:\n%s", want, out.String())
	}
}

// TestRedisInstancesTable: the table of instances sharing one Redis,
// from raw results: medians per decision and the ratios to redis_rate.
func TestRedisInstancesTable(t *testing.T) {
	all := loadLines(t,
		"BenchmarkRedisInstances/impl=chanlimit/instances=8/callers=64-P 60000 14000 ns/op 11.0 client-cpu-us/decision 1.5 decisions/call 70000 decisions/s 800000 p50-ns 2000000 p99-ns 12.0 redis-cpu-us/decision 9.0 redis-us/decision",
		"BenchmarkRedisInstances/impl=redis_rate/instances=8/callers=64-P 60000 14000 ns/op 10.0 client-cpu-us/decision 1.0 decisions/call 35000 decisions/s 800000 p50-ns 2000000 p99-ns 16.0 redis-cpu-us/decision 7.0 redis-us/decision",
	)
	var out bytes.Buffer
	redisInstancesTable(&out, all)
	if want := "| 8 | 64 | 12.0 | 16.0 | 0.75 | 11.0 | 10.0 | 1.5 | 2.00 |"; !strings.Contains(out.String(), want) {
		t.Errorf("the table lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	redisInstancesTable(&out, nil)
	if out.Len() != 0 {
		t.Errorf("a table without results:\n%s", out.String())
	}
}

// TestRedisTable: the Redis tables from raw results, as bench/run writes
// them: medians, the ratio of decisions/s, latency in µs, and the ratio of
// p50 latency at 1 caller.
func TestRedisTable(t *testing.T) {
	all := loadLines(t,
		// Two runs of each: the medians are their means.
		"BenchmarkRedis/impl=chanlimit/callers=1-P 1000 50000 ns/op 20000 decisions/s 1.000 decisions/trip 40000 p50-ns 90000 p99-ns",
		"BenchmarkRedis/impl=chanlimit/callers=1-P 1000 50000 ns/op 20000 decisions/s 1.000 decisions/trip 40000 p50-ns 110000 p99-ns",
		"BenchmarkRedis/impl=redis_rate/callers=1-P 1000 40000 ns/op 25000 decisions/s 20000 p50-ns 60000 p99-ns",
		"BenchmarkRedis/impl=redis_rate/callers=1-P 1000 40000 ns/op 25000 decisions/s 20000 p50-ns 60000 p99-ns",
		"BenchmarkRedis/impl=chanlimit/callers=256-P 1000 20000 ns/op 50000 decisions/s 60.00 decisions/trip 5000000 p50-ns 9000000 p99-ns",
		"BenchmarkRedis/impl=redis_rate/callers=256-P 1000 40000 ns/op 25000 decisions/s 10000000 p50-ns 20000000 p99-ns",
		"BenchmarkRedisBatch/size=64/impl=chanlimit/mode=batch-P 100 1280000 ns/op 32.00 decisions/trip 20000 ns/decision 50000 decisions/s",
		"BenchmarkRedisBatch/size=64/impl=redis_rate/mode=seq-P 100 2560000 ns/op 40000 ns/decision 25000 decisions/s",
		"BenchmarkRedisBatch/size=64/impl=redis_rate/mode=par-P 100 1920000 ns/op 30000 ns/decision 33333 decisions/s",
	)
	var out bytes.Buffer
	redisTable(&out, all)
	got := out.String()
	for _, want := range []string{
		"| 1 | 20000 | 25000 | 0.80 | 40 | 20 | 100 | 60 | 1.0 |",
		"| 256 | 50000 | 25000 | 2.00 | 5000 | 10000 | 9000 | 20000 | 60.0 |",
		"At 1 caller, chanlimit's p50 latency is 2.00 times redis_rate's (40 µs and 20 µs)",
		"| chanlimit batch | 20000 | 50000 | 0.50 |",
		"| redis_rate seq | 40000 | 25000 | 1.00 |",
		"| redis_rate par | 30000 | 33333 | 0.75 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the tables lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "| 8 |") || strings.Contains(got, "| 64 |") {
		t.Errorf("rows for callers not measured:\n%s", got)
	}
	if strings.Contains(got, "one P") {
		t.Errorf("a pointer to the apart table, which has no results:\n%s", got)
	}
	out.Reset()
	redisTable(&out, append(all, loadFiles(t, []string{
		"layout: apart",
		"BenchmarkRedisCost/impl=chanlimit/callers=1 60000 60000 ns/op 50.0 client-cpu-us/decision 1.0 decisions/call 16000 decisions/s 1.0 decisions/trip 62000 p50-ns 90000 p99-ns 30.0 redis-cpu-us/decision 14.0 redis-us/decision",
	})...))
	if !strings.Contains(out.String(), "Below, the same with the benchmark on one P.") {
		t.Errorf("no pointer to the apart table, which has results:\n%s", out.String())
	}

	// Without Redis results, nothing.
	out.Reset()
	redisTable(&out, nil)
	if out.Len() != 0 {
		t.Errorf("tables without results:\n%s", out.String())
	}
}

// loadLines loads lines of go test -bench output, as a raw results file
// holds them, each with -P where its name has GOMAXPROCS.
func loadLines(t *testing.T, lines ...string) []*sample {
	t.Helper()
	return loadFiles(t, lines)
}

// loadFiles loads raw files, one for each list of lines, in order, as
// loadLines does one.
func loadFiles(t *testing.T, files ...[]string) []*sample {
	t.Helper()
	procs := fmt.Sprint(runtime.GOMAXPROCS(0))
	var paths []string
	for i, lines := range files {
		var raw strings.Builder
		raw.WriteString("goos: linux\ngoarch: amd64\npkg: github.com/chanlimit/chanlimit/bench\n")
		for _, line := range lines {
			raw.WriteString(strings.Replace(line, "-P ", "-"+procs+" ", 1) + "\n")
		}
		path := filepath.Join(t.TempDir(), fmt.Sprintf("raw%d.txt", i))
		if err := os.WriteFile(path, []byte(raw.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	all, err := load(paths)
	if err != nil {
		t.Fatal(err)
	}
	return all
}
