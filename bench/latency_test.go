package bench

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkLatency: 64 goroutines hammer 1,000 keys; every call is timed,
// and the percentiles of all of them are reported (p50-ns … p99.99-ns).
// One op is one call, as in BenchmarkAllow.
func BenchmarkLatency(b *testing.B) {
	const goroutines = 64
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			l := im.make(b, admitAll)
			defer l.Close()
			ks := keys(1000)
			for _, k := range ks {
				l.Allow(k)
			}
			perG := max(b.N/goroutines, 1)
			samples := make([][]time.Duration, goroutines)
			tallies := make([]tally, goroutines)
			var start, wg sync.WaitGroup
			start.Add(1)
			for g := range goroutines {
				samples[g] = make([]time.Duration, perG)
				wg.Go(func() {
					start.Wait()
					i := rand.IntN(len(ks))
					for j := range samples[g] {
						t0 := time.Now()
						ok := l.Allow(ks[i%len(ks)])
						samples[g][j] = time.Since(t0)
						tallies[g].note(ok)
						i++
					}
				})
			}
			b.ResetTimer()
			start.Done()
			wg.Wait()
			b.StopTimer()
			var total tally
			for _, t := range tallies {
				total.allowed += t.allowed
				total.denied += t.denied
			}
			total.check(b, im, admitAll)
			all := slices.Concat(samples...)
			slices.Sort(all)
			for _, q := range []struct {
				name string
				p    float64
			}{{"p50", .50}, {"p90", .90}, {"p99", .99}, {"p99.9", .999}, {"p99.99", .9999}} {
				b.ReportMetric(float64(all[min(int(q.p*float64(len(all))), len(all)-1)]), q.name+"-ns")
			}
		})
	}
}
