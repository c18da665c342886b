package chanlimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// stressFor is how long TestStress mixes calls: 2 seconds, or
// CHANLIMIT_STRESS (a time.Duration) for a longer run.
func stressFor(t *testing.T) time.Duration {
	if s := os.Getenv("CHANLIMIT_STRESS"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "CHANLIMIT_STRESS")
		return d
	}
	return 2 * time.Second
}

// tally counts the answers callers got.
type tally struct{ allowed, denied atomic.Uint64 }

func (c *tally) note(d chanlimit.Decision) {
	if d.Allowed {
		c.allowed.Add(1)
	} else {
		c.denied.Add(1)
	}
}

// TestStress mixes every call, with contexts cancelled at random and the
// fake clock moving under them, for every algorithm, then closes the router
// while callers are still at it. Nothing may hang, panic or leak (TestMain
// checks goroutines), every error must be one a caller can expect, and the
// router's counts must equal the decisions its callers got.
func TestStress(t *testing.T) {
	per := stressFor(t) / time.Duration(len(registered))
	for _, algorithm := range registered {
		t.Run(algorithm, func(t *testing.T) {
			for _, evict := range []bool{false, true} {
				stress(t, algorithm, evict, per/2)
			}
		})
	}
}

func stress(t *testing.T, algorithm string, evict bool, d time.Duration) {
	clk := clock.NewFake(epoch)
	r, err := chanlimit.New(chanlimit.Config{Algorithm: algorithm, Limit: 5, Window: 50 * time.Millisecond,
		Partitions: 3, MailboxSize: 4, MaxKeys: 40, EvictLRU: evict, Clock: clk})
	require.NoError(t, err)

	var (
		got      tally
		calls    atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		snapshot atomic.Pointer[[]byte]
	)
	expected := func(err error) bool {
		return err == nil || errors.Is(err, context.Canceled) || errors.Is(err, chanlimit.ErrTooManyKeys) ||
			errors.Is(err, chanlimit.ErrClosed)
	}
	worker := func(seed uint64) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			calls.Add(1)
			ctx, cancel := context.WithCancel(bg)
			if rng.IntN(4) == 0 { // cancel while the call is on its way
				go cancel()
			}
			key := fmt.Sprint(rng.IntN(60))
			var err error
			switch op := rng.IntN(100); {
			case op < 55:
				var dec chanlimit.Decision
				if dec, err = r.AllowN(ctx, key, 1+rng.IntN(3)); err == nil {
					got.note(dec)
				}
			case op < 70:
				reqs := make([]chanlimit.Request, 1+rng.IntN(8))
				for i := range reqs {
					reqs[i] = chanlimit.Request{Key: fmt.Sprint(rng.IntN(60)), N: 1 + rng.IntN(2)}
				}
				out := make([]chanlimit.Decision, len(reqs))
				err = r.AllowBatch(ctx, reqs, out)
				for _, dec := range out {
					if dec.Limit != 0 {
						got.note(dec)
					}
				}
			case op < 80:
				_, err = r.Peek(ctx, key, 1)
			case op < 88:
				err = r.Reset(ctx, key)
			case op < 93:
				_, err = r.Stats(ctx)
			case op < 97:
				var buf bytes.Buffer
				if err = r.Snapshot(ctx, &buf); err == nil {
					b := buf.Bytes()
					snapshot.Store(&b)
				}
			default:
				if b := snapshot.Load(); b != nil {
					err = r.Restore(ctx, bytes.NewReader(*b))
				}
			}
			cancel()
			if !expected(err) {
				t.Errorf("unexpected error: %v", err)
				return
			}
		}
	}
	for i := range 8 {
		wg.Add(1)
		go worker(uint64(i))
	}
	wg.Add(1)
	go func() { // time moves, in steps of up to a window
		defer wg.Done()
		rng := rand.New(rand.NewPCG(99, 1))
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
				runtime.Gosched()
			}
		}
	}()

	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		_, err := r.Stats(bg)
		require.NoError(t, err)
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()

	st, err := r.Stats(bg)
	require.NoError(t, err)
	assert.Equal(t, got.allowed.Load(), st.Allowed, "allowed")
	assert.Equal(t, got.denied.Load(), st.Denied, "denied")
	assert.LessOrEqual(t, st.Keys, 40)
	assert.Positive(t, st.Allowed)
	assert.Positive(t, st.Denied)
	t.Logf("evict=%v: %d calls; allowed %d, denied %d, refused %d, expired %d, evicted %d",
		evict, calls.Load(), st.Allowed, st.Denied, st.Refused, st.Expired, st.Evicted)

	// Close while callers are at it: every call returns.
	stop = make(chan struct{})
	for i := range 8 {
		wg.Add(1)
		go worker(uint64(100 + i))
	}
	require.NoError(t, r.Close())
	close(stop)
	wg.Wait()
	_, err = r.Stats(bg)
	assert.ErrorIs(t, err, chanlimit.ErrClosed)
	assert.ErrorIs(t, r.Snapshot(bg, io.Discard), chanlimit.ErrClosed)
}
