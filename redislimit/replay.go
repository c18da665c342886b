package redislimit

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chanlimit/chanlimit/clock"
)

// A call of the script that changes a key leaves its answers there (its
// record), so that an attempt of it the client sends again answers as
// the first time. The store keeps the records as long as its client may
// send a call again (replayWindow), and tells the script which of its own
// it may let go (flights).

// ReplayWindow is how long Redis keeps a call's answers, in case the
// client sends the call again (go-redis sends a pipeline again after a
// read timeout, and a stalled Redis runs every attempt once it wakes),
// for a client whose options the store cannot read. For a redis.Client
// or redis.ClusterClient it is as long as the client could send a call
// again after it first sent it: for each attempt, the wait for a
// connection (a dial's attempts and their backoffs, or the pool's
// timeout, the longer) and its write and read timeouts, and the backoffs
// between attempts (about 145 s with go-redis's defaults, on a Client
// or a ClusterClient). The key that holds a call's answers lives at least
// that long; the answers go with the store's next call on the key once no
// attempt of theirs can come.
const ReplayWindow = 150 * time.Second

// replayWindow returns how long client may send a call again after it
// first sent it (see ReplayWindow); at least a second. A ClusterClient
// sends a call again up to MaxRedirects times, each through a node's
// client, which sends it again up to MaxRetries times (none by default).
func replayWindow(client redis.UniversalClient) time.Duration {
	var attempts, dials int
	var dial, dialBackoff, pool, write, read, backoff time.Duration
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		attempts, dials, dial, dialBackoff, pool = max(o.MaxRetries, 0)+1, o.DialerRetries, o.DialTimeout, o.DialerRetryTimeout, o.PoolTimeout
		write, read, backoff = o.WriteTimeout, o.ReadTimeout, o.MaxRetryBackoff
	case *redis.ClusterClient:
		o := c.Options()
		attempts, dials, dial, dialBackoff, pool = (max(o.MaxRetries, 0)+1)*(max(o.MaxRedirects, 0)+1), o.DialerRetries, o.DialTimeout, o.DialerRetryTimeout, o.PoolTimeout
		write, read, backoff = o.WriteTimeout, o.ReadTimeout, o.MaxRetryBackoff
	default:
		return ReplayWindow
	}
	dial, dialBackoff, pool = max(dial, 0), max(dialBackoff, 0), max(pool, 0)
	write, read, backoff = max(write, 0), max(read, 0), max(backoff, 0)
	dials = max(dials, 1)
	conn := max(pool, time.Duration(dials)*dial+time.Duration(dials-1)*dialBackoff) // the wait for a connection
	attempt := conn + write + read
	window := time.Duration(attempts)*attempt + time.Duration(attempts-1)*backoff
	return max(window, time.Second)
}

// flights numbers a store's calls and knows which of them the client
// may still send again: those out (their pipeline has not returned), and
// for ReplayWindow those it gave up on, which Redis may yet run. The
// script lets go of the store's records of the others. The mutex guards
// this bookkeeping of the client's calls, never a key's state, which is
// Redis's.
type flights struct {
	mu   sync.Mutex
	next uint64
	out  []uint64  // the calls out, oldest first
	kept []givenUp // the calls given up on, oldest first
	args []uint64  // kept's numbers, as the script's arguments
}

type givenUp struct {
	seq   uint64
	until time.Time
}

// maxKept is the most calls given up on whose records are kept.
const maxKept = 256

// take numbers n calls, first to first+n-1, and returns with them the
// lowest call out (theirs included) and the calls given up on below it.
func (f *flights) take(n int) (first, low uint64, keep []uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first = f.next + 1
	for k := range n {
		f.out = append(f.out, first+uint64(k))
	}
	f.next += uint64(n)
	now := clock.Real().Now() // the client's retries are on the wall clock
	drop := 0
	for drop < len(f.kept) && now.After(f.kept[drop].until) {
		drop++
	}
	if drop > 0 {
		f.kept = append(f.kept[:0], f.kept[drop:]...)
		f.args = nil
	}
	if f.args == nil && len(f.kept) > 0 {
		for _, g := range f.kept {
			f.args = append(f.args, g.seq)
		}
	}
	low = first
	if len(f.out) > 0 {
		low = f.out[0]
	}
	return first, low, f.args // f.args is replaced, never changed: the caller may keep it
}

// land notes that the pipeline of calls has returned: their client sends
// them no more, but a call that failed without an answer from Redis may
// have run, and an attempt of it may run late, for replay.
func (f *flights) land(calls []call, replay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	until := clock.Real().Now().Add(replay)
	for _, c := range calls {
		if k := slices.Index(f.out, c.seq); k >= 0 {
			f.out = slices.Delete(f.out, k, k+1)
		}
		var redisErr redis.Error
		if err := c.cmd.Err(); err != nil && !errors.As(err, &redisErr) {
			f.kept = append(f.kept, givenUp{seq: c.seq, until: until})
			f.args = nil
		}
	}
	if len(f.kept) > maxKept {
		f.kept = append(f.kept[:0], f.kept[len(f.kept)-maxKept:]...)
	}
}
