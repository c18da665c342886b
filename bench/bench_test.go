// Package bench measures chanlimit beside its peers and beside the bare
// channel round trip it is built on (the floor), in the same run. It is a
// module of its own, so the peers never enter chanlimit's go.mod.
//
//	go test -run '^$' -bench . -count 6 ./...   (or ./run, which also writes RESULTS.md)
package bench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// keySets are the key populations the workloads spread calls over.
var keySets = []struct {
	name string
	n    int
}{{"1", 1}, {"1k", 1_000}, {"1M", 1_000_000}}

var keyCache = map[int][]string{}

// keys returns n distinct keys shaped like API keys, made once.
func keys(n int) []string {
	if ks, ok := keyCache[n]; ok {
		return ks
	}
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("api-key-%08d", i)
	}
	keyCache[n] = ks
	return ks
}

// BenchmarkAllow: one decision per op, for every implementation, key set,
// policy and mode (one goroutine; RunParallel with GOMAXPROCS goroutines;
// RunParallel with 32 × GOMAXPROCS).
func BenchmarkAllow(b *testing.B) {
	for _, ks := range keySets {
		for _, p := range []policy{admitAll, denyMost} {
			for _, mode := range []struct {
				name        string
				parallelism int // 0: sequential
			}{{"seq", 0}, {"par", 1}, {"par32", 32}} {
				for _, im := range impls {
					name := fmt.Sprintf("keys=%s/limit=%s/mode=%s/impl=%s", ks.name, p.name, mode.name, im.name)
					b.Run(name, func(b *testing.B) {
						benchAllow(b, im, p, keys(ks.n), mode.parallelism)
					})
				}
			}
		}
	}
}

func benchAllow(b *testing.B, im impl, p policy, ks []string, parallelism int) {
	l := im.make(b, p)
	defer l.Close()
	// Every key is seen once before timing: the steady state, not the
	// first touch, is measured.
	for _, k := range ks {
		l.Allow(k)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallelism == 0 {
		var tally tally
		i := 0
		for b.Loop() {
			tally.note(l.Allow(ks[i%len(ks)]))
			i++
		}
		tally.check(b, im, p)
		return
	}
	var total tally
	var mu sync.Mutex
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		var tally tally
		i := rand.IntN(len(ks))
		for pb.Next() {
			tally.note(l.Allow(ks[i%len(ks)]))
			i++
		}
		mu.Lock()
		total.allowed += tally.allowed
		total.denied += tally.denied
		mu.Unlock()
	})
	total.check(b, im, p)
}

// tally counts the answers of a benchmark's calls, to check that each
// implementation took the path the case is named for.
type tally struct{ allowed, denied int }

func (t *tally) note(allowed bool) {
	if allowed {
		t.allowed++
	} else {
		t.denied++
	}
}

// check fails the benchmark if an implementation denied a call under
// admitAll (it would measure its deny path, not the admit path), or allowed
// most calls under denyMost. The floor decides nothing: it allows all.
func (t *tally) check(b *testing.B, im impl, p policy) {
	b.Helper()
	switch {
	case im.name == "floor":
	case p == admitAll && t.denied > 0:
		b.Fatalf("%d of %d calls denied under %q: this case must measure the admit path", t.denied, t.allowed+t.denied, p.name)
	case p == denyMost && t.allowed > t.denied:
		b.Fatalf("%d of %d calls allowed under %q: this case must measure the deny path", t.allowed, t.allowed+t.denied, p.name)
	}
}

func init() {
	if runtime.GOMAXPROCS(0) < 2 {
		fmt.Println("bench: GOMAXPROCS < 2: the parallel modes measure little")
	}
}
