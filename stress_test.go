package chanlimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// stressCalls is how many calls each caller of TestStress makes: 1,500, or
// CHANLIMIT_STRESS for a longer run.
func stressCalls(t *testing.T) int {
	if s := os.Getenv("CHANLIMIT_STRESS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "CHANLIMIT_STRESS: calls per caller")
		return n
	}
	return 1500
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
// fake clock moved by the callers themselves, for every algorithm, then
// closes the router while callers are still at it. Each caller makes a set
// number of calls, chosen by its own seed, inside a synctest bubble, so
// that nothing depends on the wall clock and a call that hangs is reported
// as a deadlock. Nothing may hang, panic or leak (TestMain checks
// goroutines), every error must be one a caller can expect, and the
// router's counts must equal the decisions its callers got.
func TestStress(t *testing.T) {
	calls := stressCalls(t)
	for _, algorithm := range registered {
		t.Run(algorithm, func(t *testing.T) {
			for _, evict := range []bool{false, true} {
				synctest.Test(t, func(t *testing.T) { stress(t, algorithm, evict, calls) })
			}
		})
	}
}

func stress(t *testing.T, algorithm string, evict bool, calls int) {
	clk := clock.NewFake(epoch)
	r, err := chanlimit.New(chanlimit.Config{Algorithm: algorithm, Limit: 5, Window: 50 * time.Millisecond,
		Partitions: 3, MailboxSize: 4, MaxKeys: 40, EvictLRU: evict, MaxOverrides: 5, Clock: clk})
	require.NoError(t, err)
	// The router's policies switch between these, and overrides are set
	// from them: all hold n up to 3, under names that carry state across.
	policySets := [][]chanlimit.Policy{
		{{Algorithm: algorithm, Limit: 5, Window: 50 * time.Millisecond}},
		{{Algorithm: algorithm, Limit: 4, Window: 30 * time.Millisecond}, {Name: "long", Algorithm: "sliding_window_log", Limit: 9, Window: 200 * time.Millisecond}},
		{{Name: "long", Algorithm: "fixed_window", Limit: 3, Window: 100 * time.Millisecond}},
	}

	var (
		got      tally
		wg       sync.WaitGroup
		snapshot atomic.Pointer[[]byte]
	)
	expected := func(err error) bool {
		return err == nil || errors.Is(err, context.Canceled) || errors.Is(err, chanlimit.ErrTooManyKeys) ||
			errors.Is(err, chanlimit.ErrClosed) || errors.Is(err, chanlimit.ErrTooManyOverrides) ||
			// a snapshot taken before SetPolicies switched the router
			(errors.Is(err, chanlimit.ErrBadSnapshot) && strings.Contains(err.Error(), "taken under policies"))
	}
	// call makes one call, chosen by rng, and returns its error.
	call := func(rng *rand.Rand) error {
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		if rng.IntN(4) == 0 { // cancel while the call is on its way
			go cancel()
		}
		key := fmt.Sprint(rng.IntN(60))
		switch op := rng.IntN(100); {
		case op < 5: // time moves, in steps of up to a window
			clk.Advance(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
			return nil
		case op < 50:
			d, err := r.AllowN(ctx, key, 1+rng.IntN(3))
			if err == nil {
				got.note(d)
			}
			return err
		case op < 65:
			reqs := make([]chanlimit.Request, 1+rng.IntN(8))
			for i := range reqs {
				reqs[i] = chanlimit.Request{Key: fmt.Sprint(rng.IntN(60)), N: 1 + rng.IntN(2)}
			}
			out := make([]chanlimit.Decision, len(reqs))
			err := r.AllowBatch(ctx, reqs, out)
			for _, d := range out {
				if d.Limit != 0 {
					got.note(d)
				}
			}
			return err
		case op < 75:
			_, err := r.Peek(ctx, key, 1)
			return err
		case op < 82:
			return r.Reset(ctx, key)
		case op < 86:
			_, err := r.Stats(ctx)
			return err
		case op < 89:
			return r.SetOverride(ctx, key, policySets[rng.IntN(len(policySets))]...)
		case op < 92:
			return r.ClearOverride(ctx, key)
		case op < 93:
			return r.SetPolicies(ctx, policySets[rng.IntN(len(policySets))]...)
		case op < 97:
			var buf bytes.Buffer
			err := r.Snapshot(ctx, &buf)
			if err == nil {
				b := buf.Bytes()
				snapshot.Store(&b)
			}
			return err
		default:
			if b := snapshot.Load(); b != nil {
				return r.Restore(ctx, bytes.NewReader(*b))
			}
			return nil
		}
	}
	// caller makes up to calls calls, and stops early at ErrClosed.
	caller := func(seed uint64, started *sync.WaitGroup) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := range calls {
			err := call(rng)
			if i == 0 && started != nil {
				started.Done()
			}
			if !expected(err) {
				t.Errorf("unexpected error: %v", err)
				return
			}
			if errors.Is(err, chanlimit.ErrClosed) {
				return
			}
		}
	}
	for i := range 8 {
		wg.Add(1)
		go caller(uint64(i), nil)
	}
	wg.Wait()

	st, err := r.Stats(bg)
	require.NoError(t, err)
	assert.Equal(t, got.allowed.Load(), st.Allowed, "allowed")
	assert.Equal(t, got.denied.Load(), st.Denied, "denied")
	assert.LessOrEqual(t, st.Keys, 40+5, "MaxKeys, and the keys with an override")
	assert.LessOrEqual(t, st.Overrides, 5)
	assert.Positive(t, st.Allowed)
	assert.Positive(t, st.Denied)
	t.Logf("evict=%v: %d calls; allowed %d, denied %d, refused %d, expired %d, evicted %d",
		evict, 8*calls, st.Allowed, st.Denied, st.Refused, st.Expired, st.Evicted)

	// Close while callers are at it: every call returns.
	var started sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		started.Add(1)
		go caller(uint64(100+i), &started)
	}
	started.Wait()
	require.NoError(t, r.Close())
	wg.Wait()
	_, err = r.Stats(bg)
	assert.ErrorIs(t, err, chanlimit.ErrClosed)
	assert.ErrorIs(t, r.Snapshot(bg, io.Discard), chanlimit.ErrClosed)
}
