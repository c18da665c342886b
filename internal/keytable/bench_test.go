package keytable

import (
	"fmt"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// BenchmarkAllowEach: a table's own cost of a batch of 64 token-bucket
// decisions on 500 keys it holds, with no goroutine and no channel: the
// partition's share of an AllowBatch. One op is one decision.
func BenchmarkAllowEach(b *testing.B) {
	rule, err := algorithms.NewTokenBucket(algorithms.Params{Limit: 1 << 30, Window: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	t := NewRule(rule).NewTable()
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprintf("api-key-%08d", i)
		var d algorithms.Decision
		if err := t.AllowN(keys[i], 0, 1, &d); err != nil {
			b.Fatal(err)
		}
	}
	for _, hashed := range []bool{false, true} {
		b.Run(fmt.Sprintf("hashed=%v", hashed), func(b *testing.B) {
			items := make([]Item, 64)
			next, now := 0, time.Duration(0)
			for b.Loop() {
				for k := range items {
					items[k] = Item{Key: keys[next%len(keys)], N: 1}
					if hashed {
						items[k].Hash, items[k].Hashed = Hash(items[k].Key), true
					}
					next += 7
				}
				now += time.Microsecond
				t.AllowEach(items, now)
				if !items[0].D.Allowed {
					b.Fatal(items[0])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(items)), "ns/decision")
		})
	}
}

// BenchmarkSetPolicies: a switch of a partition's 100,000 token-bucket
// keys to a bucket of another limit, each key's state adopted: the pause
// a partition makes for SetPolicies. One op is one switch.
func BenchmarkSetPolicies(b *testing.B) {
	sets := make([]*Set, 2)
	for i := range sets {
		p := algorithms.Params{Limit: 100 + i, Window: time.Second}
		rule, err := algorithms.NewTokenBucket(p)
		if err != nil {
			b.Fatal(err)
		}
		sets[i] = NewSet([]Policy{{Name: "p", Algorithm: algorithms.TokenBucketName, Params: p, Rule: NewRule(rule)}})
	}
	k := NewKeys(sets[0])
	for i := range 100_000 {
		var d algorithms.Decision
		if err := k.AllowN(fmt.Sprintf("api-key-%08d", i), 0, 1, &d); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		i++
		k.SetPolicies(sets[i%2], time.Millisecond)
	}
	if k.Len() != 100_000 {
		b.Fatal(k.Len())
	}
}
