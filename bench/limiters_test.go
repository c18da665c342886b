package bench

import (
	"context"
	"hash/maphash"
	"sync"
	"testing"
	"time"

	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/chanlimit/chanlimit"
)

// limiter is what every implementation measured here offers: one decision
// on one key.
type limiter interface {
	Allow(key string) bool
	Close()
}

// policy is the limit every implementation is configured with: limit
// requests per window per key, in bursts of up to limit.
type policy struct {
	name   string
	limit  int
	window time.Duration
}

var (
	// admitAll never denies: every call does the full work of an allowed
	// request.
	admitAll = policy{"admit", 1 << 30, time.Second}
	// denyMost allows one request per key, then denies for an hour: for
	// longer than any benchmark, whose keys may each come round only once
	// a second or less often (1M keys).
	denyMost = policy{"deny", 1, time.Hour}
	// holdAll allows one request per key an hour: every key's state is
	// kept, by the stores that let idle keys go too.
	holdAll = policy{"hold", 1, time.Hour}
)

// impl names an implementation and makes one for a policy.
type impl struct {
	name string
	make func(tb testing.TB, p policy) limiter
}

var impls = []impl{
	{"chanlimit", newChanlimit},
	{"floor", newFloor},
	{"xrate", newXRate},
	{"sethvargo", newSethvargo},
	{"ulule", newUlule},
	{"throttled", newThrottled},
}

// chanlimit with its defaults (token_bucket).

type chanlimitLimiter struct{ r *chanlimit.Router }

func newChanlimit(tb testing.TB, p policy) limiter {
	return newChanlimitWith(tb, chanlimit.Config{Limit: p.limit, Window: p.window})
}

func newChanlimitWith(tb testing.TB, cfg chanlimit.Config) limiter {
	r, err := chanlimit.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return chanlimitLimiter{r}
}

func (c chanlimitLimiter) Allow(key string) bool { return c.r.Allow(key) }
func (c chanlimitLimiter) Close()                { c.r.Close() }

// floor is the bare channel round trip this design pays per call: the same
// partitions chosen by the same hash, the same pooled reply channels and
// the same request by value, and no limiter at all. It allows everything.

type floorRequest struct {
	key   string
	n     int
	reply chan bool
}

type floorLimiter struct {
	mailboxes []chan floorRequest
	seed      maphash.Seed
	replies   sync.Pool
	wg        sync.WaitGroup
}

func newFloor(testing.TB, policy) limiter { return startFloor(nil) }

// startFloor starts the floor's goroutines. If decider is not nil, each
// goroutine gets a decide func of its own from it and answers what that
// says; otherwise it allows everything.
func startFloor(decider func() func(key string, n int) bool) *floorLimiter {
	f := &floorLimiter{mailboxes: make([]chan floorRequest, chanlimit.DefaultPartitions()), seed: maphash.MakeSeed()}
	f.replies.New = func() any { return make(chan bool, 1) }
	for i := range f.mailboxes {
		mb := make(chan floorRequest, chanlimit.DefaultMailboxSize)
		f.mailboxes[i] = mb
		if decider == nil {
			f.wg.Go(func() {
				for req := range mb {
					req.reply <- true
				}
			})
			continue
		}
		decide := decider()
		f.wg.Go(func() {
			for req := range mb {
				req.reply <- decide(req.key, req.n)
			}
		})
	}
	return f
}

func (f *floorLimiter) Allow(key string) bool {
	h := maphash.String(f.seed, key) >> 32
	mb := f.mailboxes[h*uint64(len(f.mailboxes))>>32]
	reply := f.replies.Get().(chan bool)
	mb <- floorRequest{key: key, n: 1, reply: reply}
	ok := <-reply
	f.replies.Put(reply)
	return ok
}

func (f *floorLimiter) Close() {
	for _, mb := range f.mailboxes {
		close(mb) // only the benchmark sends, and it has stopped
	}
	f.wg.Wait()
}

// xrate is golang.org/x/time/rate: one Limiter per key in a sync.Map.

type xrateLimiter struct {
	keys  sync.Map
	limit rate.Limit
	burst int
}

func newXRate(_ testing.TB, p policy) limiter {
	return &xrateLimiter{limit: rate.Limit(float64(p.limit) / p.window.Seconds()), burst: p.limit}
}

func (x *xrateLimiter) Allow(key string) bool {
	l, ok := x.keys.Load(key)
	if !ok {
		l, _ = x.keys.LoadOrStore(key, rate.NewLimiter(x.limit, x.burst))
	}
	return l.(*rate.Limiter).Allow()
}

func (x *xrateLimiter) Close() {}

// sethvargo is github.com/sethvargo/go-limiter's memorystore.

type sethvargoLimiter struct{ store sethvargo.Store }

func newSethvargo(tb testing.TB, p policy) limiter {
	tokens, interval := uint64(p.limit), p.window
	if p == admitAll {
		// memorystore refills interval/tokens tokens per interval passed
		// (v0.7.1), so at 1<<30 a second it refills none and denies once
		// the first second's tokens are spent. A bucket too large to
		// empty, refilled only after an hour, admits every call a
		// benchmark makes, on the same code path.
		tokens, interval = 1<<62, time.Hour
	}
	store, err := memorystore.New(&memorystore.Config{Tokens: tokens, Interval: interval})
	if err != nil {
		tb.Fatal(err)
	}
	return sethvargoLimiter{store}
}

func (s sethvargoLimiter) Allow(key string) bool {
	_, _, _, ok, _ := s.store.Take(context.Background(), key)
	return ok
}

func (s sethvargoLimiter) Close() { _ = s.store.Close(context.Background()) }

// ulule is github.com/ulule/limiter/v3 with its memory store.

type ululeLimiter struct{ l *ulule.Limiter }

func newUlule(_ testing.TB, p policy) limiter {
	store := ululememory.NewStore()
	return ululeLimiter{ulule.New(store, ulule.Rate{Period: p.window, Limit: int64(p.limit)})}
}

func (u ululeLimiter) Allow(key string) bool {
	c, err := u.l.Get(context.Background(), key)
	return err == nil && !c.Reached
}

func (u ululeLimiter) Close() {}

// throttled is github.com/throttled/throttled/v2's GCRA limiter on its
// memstore, without a key cap.

type throttledLimiter struct{ l *throttled.GCRARateLimiterCtx }

func newThrottled(tb testing.TB, p policy) limiter {
	store, err := memstore.NewCtx(0)
	if err != nil {
		tb.Fatal(err)
	}
	// PerDuration(n, d) is a period of d/n, kept at a microsecond or
	// more, as before this limit was a parameter.
	limit := min(p.limit, int(p.window/time.Microsecond))
	burst := limit - 1
	if p == admitAll {
		// A million a second with a burst of as many runs dry within a
		// second on one key; 2^30 more (about 18 minutes of refill)
		// admits every call a benchmark makes.
		burst = 1 << 30
	}
	l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: throttled.PerDuration(limit, p.window), MaxBurst: burst})
	if err != nil {
		tb.Fatal(err)
	}
	// Callers racing on one key retry its compare-and-swap, and after 10
	// tries (its default) a call fails with an error instead of a
	// decision; under RunParallel on one key that was 1-2% of the calls.
	// Its own knob lets every call decide, retries counted in its time.
	l.SetMaxCASAttemptsLimit(1 << 20)
	return throttledLimiter{l}
}

func (t throttledLimiter) Allow(key string) bool {
	limited, _, err := t.l.RateLimit(key, 1)
	return err == nil && !limited
}

func (t throttledLimiter) Close() {}
