package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/pipeline"
)

// pipelineKeys is the number of keys the pipeline workloads spread their
// events over.
const pipelineKeys = 10_000

// pipelineStages are the stages of BenchmarkPipeline: each reads events
// from in and returns a function that reads its output until it closes,
// and counts the events admitted. passthrough decides nothing: the floor,
// the channels alone.
var pipelineStages = []struct {
	name  string
	stage func(b *testing.B, in <-chan string) func() int
}{
	{"passthrough", func(b *testing.B, in <-chan string) func() int {
		return count(worker(in, func(string) bool { return true }))
	}},
	{"xrate", func(b *testing.B, in <-chan string) func() int {
		x := newXRate(b, admitAll)
		return count(worker(in, x.Allow))
	}},
	{"allow", func(b *testing.B, in <-chan string) func() int {
		r := newPipelineRouter(b)
		return count(worker(in, r.Allow))
	}},
	{"police", func(b *testing.B, in <-chan string) func() int {
		r := newPipelineRouter(b)
		return countResults(pipeline.Police(context.Background(), r, in, key, pipeline.Options[string]{}))
	}},
	{"throttle", func(b *testing.B, in <-chan string) func() int {
		r := newPipelineRouter(b)
		return countResults(pipeline.Throttle(context.Background(), r, in, key, pipeline.Options[string]{}))
	}},
}

// count returns the consumer of a worker's output.
func count(out <-chan bool) func() int {
	return func() (admitted int) {
		for ok := range out {
			if ok {
				admitted++
			}
		}
		return admitted
	}
}

// countResults returns the consumer of a stage's output.
func countResults(out <-chan pipeline.Result[string]) func() int {
	return func() (admitted int) {
		for r := range out {
			if r.Err == nil && r.Decision.Allowed {
				admitted++
			}
		}
		return admitted
	}
}

func key(s string) string { return s }

// newPipelineRouter returns a router that admits every event, closed when
// the benchmark ends.
func newPipelineRouter(b *testing.B) *chanlimit.Router {
	r, err := chanlimit.New(chanlimit.Config{Limit: admitAll.limit, Window: admitAll.window})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

// worker is a pipeline stage that decides each event with allow.
func worker(in <-chan string, allow func(string) bool) <-chan bool {
	out := make(chan bool, 64)
	go func() {
		defer close(out)
		for k := range in {
			out <- allow(k)
		}
	}()
	return out
}

// BenchmarkPipeline: b.N events over 10,000 keys, from a producer goroutine
// through a stage to a consumer, per event. Every stage must admit every
// event (checked): the cost measured is the admit path's.
func BenchmarkPipeline(b *testing.B) {
	ks := keys(pipelineKeys)
	for _, st := range pipelineStages {
		b.Run("stage="+st.name, func(b *testing.B) {
			in := make(chan string, 64)
			consume := st.stage(b, in)
			go func() {
				defer close(in)
				for i := range b.N {
					in <- ks[i%len(ks)]
				}
			}()
			b.ResetTimer()
			admitted := consume()
			b.StopTimer()
			if admitted != b.N {
				b.Fatalf("%s admitted %d of %d events", st.name, admitted, b.N)
			}
		})
	}
}

// BenchmarkWaitLatency: how late after its grant time a waiter wakes, on
// the real clock, beside how late a bare time.Timer wakes (the floor: the
// runtime's timers on this machine). For WaitN, one key grants one unit a
// millisecond (burst 1) to 16 goroutines calling WaitN in a loop, so
// that its line is never empty and the i-th grant is due i ms after the
// bucket was emptied (a line is served on its schedule); the lateness is
// when WaitN returned minus that. For the timer, one goroutine waits for
// a timer set for each millisecond in turn. Each reports the median and
// the 99th percentile.
func BenchmarkWaitLatency(b *testing.B) {
	const every = time.Millisecond
	b.Run("wait=timer", func(b *testing.B) {
		late := make([]time.Duration, b.N)
		start := time.Now()
		tm := time.NewTimer(every)
		for i := 1; i <= b.N; i++ {
			<-tm.C
			late[i-1] = time.Since(start) - time.Duration(i)*every
			tm.Reset(time.Until(start.Add(time.Duration(i+1) * every)))
		}
		reportLateness(b, late)
	})
	b.Run("wait=waitn", func(b *testing.B) {
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: every})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		late := make([]time.Duration, b.N)
		var grants atomic.Int64
		start := time.Now()
		if !r.Allow("k") { // empties the bucket: the grants are due from now on
			b.Fatal("the first request was denied")
		}
		var wg sync.WaitGroup
		for range 16 { // the line never empties, unless the timer is 16ms late
			wg.Go(func() {
				for {
					if _, err := r.WaitN(context.Background(), "k", 1); err != nil {
						b.Error(err)
						return
					}
					i := grants.Add(1)
					if i > int64(b.N) {
						return
					}
					late[i-1] = time.Since(start) - time.Duration(i)*every
				}
			})
		}
		wg.Wait()
		reportLateness(b, late)
	})
}

// reportLateness reports the median and the 99th percentile of late.
func reportLateness(b *testing.B, late []time.Duration) {
	b.StopTimer()
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2]), "p50-ns")
	b.ReportMetric(float64(late[len(late)*99/100]), "p99-ns")
}
