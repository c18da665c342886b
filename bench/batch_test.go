package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/chanlimit/chanlimit"
)

// BenchmarkAllowBatch: AllowBatch with 16, 64 and 256 requests over 1,000
// keys, with the default partitions (one per processor), with one, and
// with two per processor (a batch travels as one message per partition it
// touches); one op is one batch, and ns/decision is what each decision
// cost.
func BenchmarkAllowBatch(b *testing.B) {
	procs := runtime.GOMAXPROCS(0)
	for _, p := range []policy{admitAll, denyMost} {
		for _, size := range []int{16, 64, 256} {
			for _, parts := range []struct {
				name string
				n    int // 0: the default
			}{{"default", 0}, {"one", 1}, {"2xprocs", 2 * procs}} {
				name := fmt.Sprintf("limit=%s/size=%d/partitions=%s", p.name, size, parts.name)
				b.Run(name, func(b *testing.B) {
					benchAllowBatch(b, p, size, parts.n)
				})
			}
		}
	}
}

func benchAllowBatch(b *testing.B, p policy, size, partitions int) {
	r, err := chanlimit.New(chanlimit.Config{Limit: p.limit, Window: p.window, Partitions: partitions})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ks := keys(1000)
	for _, k := range ks {
		r.Allow(k)
	}
	ctx := context.Background()
	reqs := make([]chanlimit.Request, size)
	out := make([]chanlimit.Decision, size)
	next := 0
	var tally tally
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range reqs {
			reqs[i] = chanlimit.Request{Key: ks[next%len(ks)], N: 1}
			next += 7
		}
		if err := r.AllowBatch(ctx, reqs, out); err != nil {
			b.Fatal(err)
		}
		for i := range reqs {
			tally.note(out[i].Allowed)
		}
	}
	b.StopTimer()
	tally.check(b, impl{name: "chanlimit"}, p)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/decision")
}
