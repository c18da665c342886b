package bench

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit"
)

// BenchmarkBytesPerKey: the heap each implementation holds per key once
// 1,000,000 keys have each been allowed one request, under a limit of one
// an hour, so that no key is untouched again before the measurement. The keys are made
// inside the measurement and then dropped by the benchmark, so a store that
// keeps the caller's key string and one that keeps a copy both count the
// key's bytes once. One op is the whole fill; the figure is B/key.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1_000_000
	for _, im := range impls {
		if im.name == "floor" {
			continue // it keeps no keys
		}
		b.Run("impl="+im.name, func(b *testing.B) {
			var perKey float64
			for b.Loop() {
				perKey = bytesPerKey(b, im, n)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

func bytesPerKey(b *testing.B, im impl, n int) float64 {
	before := heapInUse()
	l := im.make(b, holdAll)
	for i := range n {
		l.Allow(fmt.Sprintf("api-key-%08d", i))
	}
	after := heapInUse()
	runtime.KeepAlive(l)
	l.Close()
	return float64(after-before) / float64(n)
}

// heapInUse returns the bytes of live heap objects after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkBytesPerKeyPolicies: chanlimit's bytes per key, measured as in
// BenchmarkBytesPerKey, under one policy (a token bucket), and under two:
// two token buckets, or a token bucket and a fixed window. Each key is
// allowed one request, which every policy holds for hours.
func BenchmarkBytesPerKeyPolicies(b *testing.B) {
	hour := chanlimit.Policy{Name: "hour", Limit: 1, Window: time.Hour}
	cases := []struct {
		name     string
		policies []chanlimit.Policy
	}{
		{"token_bucket", []chanlimit.Policy{hour}},
		{"token_bucket+token_bucket", []chanlimit.Policy{hour, {Name: "day", Limit: 10, Window: 24 * time.Hour}}},
		{"token_bucket+fixed_window", []chanlimit.Policy{hour, {Name: "day", Algorithm: "fixed_window", Limit: 10, Window: 24 * time.Hour}}},
	}
	for _, c := range cases {
		b.Run("policies="+c.name, func(b *testing.B) {
			im := impl{c.name, func(tb testing.TB, _ policy) limiter {
				return newChanlimitWith(tb, chanlimit.Config{Policies: c.policies})
			}}
			var perKey float64
			for b.Loop() {
				perKey = bytesPerKey(b, im, 1_000_000)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}
