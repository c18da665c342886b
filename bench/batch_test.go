package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/chanlimit/chanlimit"
)

// BenchmarkAllowBatch: AllowBatch with 64 requests over 1,000 keys; one op
// is one batch, and ns/decision is what each of the 64 decisions cost.
func BenchmarkAllowBatch(b *testing.B) {
	for _, p := range []policy{admitAll, denyMost} {
		for _, size := range []int{16, 64, 256} {
			b.Run(fmt.Sprintf("limit=%s/size=%d", p.name, size), func(b *testing.B) {
				benchAllowBatch(b, p, size)
			})
		}
	}
}

func benchAllowBatch(b *testing.B, p policy, size int) {
	r, err := chanlimit.New(chanlimit.Config{Limit: p.perSecond, Window: 1e9})
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
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/decision")
}
