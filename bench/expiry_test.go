package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

// BenchmarkExpiryStall: a partition holds 1,000,000 keys that all become
// idle at the same instant; a caller then sends Allow after Allow on one
// more key until all have expired, and every call is timed. With
// due=none, no key is due: the same calls, for comparison. sweep=full
// times what expiring them all in one go would cost (the table's Expire
// with no budget), the stall that the per-message budget avoids. One op is
// the whole run: use -benchtime 1x. stats-max-ns is the longest Stats call
// among those that check, every 16,384 calls, whether all have expired.
func BenchmarkExpiryStall(b *testing.B) {
	const n = 1_000_000
	for _, due := range []string{"none", "all"} {
		b.Run("due="+due, func(b *testing.B) {
			var lat []time.Duration
			var statsMax time.Duration
			calls := 0
			for b.Loop() {
				lat, statsMax, calls = expiryStall(b, n, due == "all")
			}
			b.ReportMetric(float64(statsMax), "stats-max-ns")
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)-1]), "max-ns")
			b.ReportMetric(float64(lat[len(lat)*9999/10000]), "p99.99-ns")
			b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
			b.ReportMetric(float64(calls), "calls")
		})
	}
	b.Run("sweep=full", func(b *testing.B) {
		var took time.Duration
		for b.Loop() {
			tab := keytable.NewRule(must(algorithms.NewTokenBucket(algorithms.Params{Limit: 1, Window: time.Minute}))).NewTable()
			var d algorithms.Decision
			for i := range n {
				_ = tab.AllowN(fmt.Sprintf("api-key-%08d", i), 0, 1, &d)
			}
			t0 := time.Now()
			tab.Expire(time.Minute, math.MaxInt)
			took = time.Since(t0)
		}
		b.ReportMetric(float64(took), "max-ns")
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// expiryStall fills one partition with n keys, moves the clock past their
// deadline if due, and times single Allows until the partition holds one
// key (or, if none is due, for as many calls as expiring them took).
func expiryStall(b *testing.B, n int, due bool) (lat []time.Duration, statsMax time.Duration, calls int) {
	clk := clock.NewFake(time.Now())
	r := must(chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Minute, Partitions: 1, Clock: clk}))
	defer r.Close()
	ctx := context.Background()
	reqs := make([]chanlimit.Request, 1000)
	out := make([]chanlimit.Decision, len(reqs))
	for i := 0; i < n; i += len(reqs) {
		for j := range reqs {
			reqs[j] = chanlimit.Request{Key: fmt.Sprintf("api-key-%08d", i+j), N: 1}
		}
		if err := r.AllowBatch(ctx, reqs, out); err != nil {
			b.Fatal(err)
		}
	}
	if due {
		clk.Advance(time.Minute + time.Second) // past the deadline and the grace
	} else {
		clk.Advance(time.Second)
	}
	lat = make([]time.Duration, 0, n/8)
	for i := 0; ; i++ {
		t0 := time.Now()
		r.Allow("hot")
		lat = append(lat, time.Since(t0))
		if i%16384 != 0 {
			continue
		}
		t0 = time.Now()
		st := must(r.Stats(ctx))
		statsMax = max(statsMax, time.Since(t0))
		if (due && st.Keys+st.Idle <= 1) || (!due && len(lat) >= n/16) {
			return lat, statsMax, len(lat)
		}
	}
}
