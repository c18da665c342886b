package bench

import (
	"hash/maphash"
	"sync"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// BenchmarkRoundTrip: where the time of one Allow goes, one goroutine
// calling on 1,000 keys that admit everything. stage=floor is the bare
// round trip (as impl=floor); stage=table is the same round trip with the
// partition goroutine reading the clock and deciding on a token-bucket
// table, as chanlimit's does, and nothing else; stage=chanlimit is the
// router, which adds what makes it a service: contexts, Close, supervision,
// counts, forgetting, and a whole Decision in the reply. stage=work is the
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

// tableFloor is the floor whose goroutines each own a table and decide on
// it at the clock's reading.
type tableFloor struct {
	mailboxes []chan floorRequest
	seed      maphash.Seed
	replies   sync.Pool
	wg        sync.WaitGroup
}

func newTableFloor(tb testing.TB, p policy) limiter {
	f := &tableFloor{mailboxes: make([]chan floorRequest, chanlimit.DefaultPartitions()), seed: maphash.MakeSeed()}
	f.replies.New = func() any { return make(chan bool, 1) }
	rule, err := algorithms.NewTokenBucket(algorithms.Params{Limit: p.limit, Window: p.window})
	if err != nil {
		tb.Fatal(err)
	}
	origin := time.Now()
	for i := range f.mailboxes {
		mb := make(chan floorRequest, chanlimit.DefaultMailboxSize)
		f.mailboxes[i] = mb
		table := algorithms.Keyed[algorithms.TokenBucketState](rule).NewTable()
		f.wg.Go(func() {
			for req := range mb {
				d, err := table.AllowN(req.key, time.Since(origin), req.n)
				req.reply <- err == nil && d.Allowed
			}
		})
	}
	return f
}

func (f *tableFloor) Allow(key string) bool {
	h := maphash.String(f.seed, key) >> 32
	mb := f.mailboxes[h*uint64(len(f.mailboxes))>>32]
	reply := f.replies.Get().(chan bool)
	mb <- floorRequest{key: key, n: 1, reply: reply}
	ok := <-reply
	f.replies.Put(reply)
	return ok
}

func (f *tableFloor) Close() {
	for _, mb := range f.mailboxes {
		close(mb)
	}
	f.wg.Wait()
}

// benchWork reads the clock and decides on a token-bucket table, as the
// table stage's goroutine does for each request.
func benchWork(b *testing.B) {
	rule, err := algorithms.NewTokenBucket(algorithms.Params{Limit: admitAll.limit, Window: admitAll.window})
	if err != nil {
		b.Fatal(err)
	}
	table := algorithms.Keyed[algorithms.TokenBucketState](rule).NewTable()
	ks := keys(1000)
	origin := time.Now()
	for _, k := range ks {
		table.AllowN(k, time.Since(origin), 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if d, err := table.AllowN(ks[i%len(ks)], time.Since(origin), 1); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
		i++
	}
}
