package bench

import (
	"testing"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

// BenchmarkRoundTrip: where the time of one Allow goes, one goroutine
// calling on 1,000 keys that admit everything. stage=floor is the bare
// round trip (as impl=floor); stage=table is the same round trip with the
// partition goroutine reading the clock and deciding on a token-bucket
// table, as chanlimit's does, and nothing else; stage=chanlimit is the
// router, which adds what makes it a service: contexts, Close, supervision,
// counts, expiring idle keys, and a whole Decision in the reply. stage=work is the
// table stage's work alone: the clock and the decision, with no goroutine.
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("stage=work", benchWork)
	for _, st := range []struct {
		name string
		make func(testing.TB, policy) limiter
	}{{"floor", newFloor}, {"table", newTableFloor}, {"chanlimit", newChanlimit}} {
		b.Run("stage="+st.name, func(b *testing.B) {
			benchAllow(b, impl{st.name, st.make}, admitAll, keys(1000), 0)
		})
	}
}

// newTableFloor is the floor whose goroutines each own a table and decide
// on it at the clock's reading.
func newTableFloor(tb testing.TB, p policy) limiter {
	rule, err := algorithms.NewTokenBucket(algorithms.Params{Limit: p.limit, Window: p.window})
	if err != nil {
		tb.Fatal(err)
	}
	origin := time.Now()
	return startFloor(func() func(string, int) bool {
		table := keytable.NewRule(rule).NewTable()
		var d algorithms.Decision
		return func(key string, n int) bool {
			err := table.AllowN(key, time.Since(origin), n, &d)
			return err == nil && d.Allowed
		}
	})
}

// benchWork reads the clock and decides on a token-bucket table, as the
// table stage's goroutine does for each request.
func benchWork(b *testing.B) {
	rule, err := algorithms.NewTokenBucket(algorithms.Params{Limit: admitAll.limit, Window: admitAll.window})
	if err != nil {
		b.Fatal(err)
	}
	table := keytable.NewRule(rule).NewTable()
	ks := keys(1000)
	origin := time.Now()
	d := new(algorithms.Decision)
	for _, k := range ks {
		_ = table.AllowN(k, time.Since(origin), 1, d)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := table.AllowN(ks[i%len(ks)], time.Since(origin), 1, d); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
		i++
	}
}
