package bench

import (
	"fmt"
	"runtime"
	"testing"
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
