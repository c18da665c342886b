package chanlimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newRouter returns a router on a fake clock, closed when the test ends.
func newRouter(t *testing.T, cfg chanlimit.Config) (*chanlimit.Router, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	cfg.Clock = clk
	r, err := chanlimit.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.Close()) })
	return r, clk
}

func init() {
	// Algorithms that misbehave, to check how New reports them. They are
	// registered after the conformance suite has taken its list.
	type state = algorithms.TokenBucketState
	must(chanlimit.Register("test_refuses", func(algorithms.Params) (algorithms.Machine[state], error) {
		return nil, errors.New("not today")
	}))
	must(chanlimit.Register("test_nil", func(algorithms.Params) (algorithms.Machine[state], error) {
		return nil, nil
	}))
	must(chanlimit.Register("test_panics", func(algorithms.Params) (algorithms.Machine[state], error) {
		panic("boom")
	}))
	must(chanlimit.Register[state]("test_typed_nil", func(algorithms.Params) (*algorithms.TokenBucket, error) {
		return nil, nil
	}))
	must(chanlimit.Register[state]("test_no_capacity", func(algorithms.Params) (zeroCapacity, error) {
		return zeroCapacity{}, nil
	}))
}

// zeroCapacity is a token bucket that can never allow anything.
type zeroCapacity struct{ *algorithms.TokenBucket }

func (zeroCapacity) Capacity() int { return 0 }

// registrations numbers the names tests register, so that -count=N runs
// never meet a name an earlier run took.
var registrations atomic.Int64

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	const century = 100 * 365 * 24 * time.Hour
	tests := []struct {
		name  string
		give  chanlimit.Config
		want  error
		field string
	}{
		{"ZeroLimit", chanlimit.Config{Window: time.Second}, chanlimit.ErrInvalidConfig, "Limit"},
		{"NegativeLimit", chanlimit.Config{Limit: -3, Window: time.Second}, chanlimit.ErrInvalidConfig, "Limit"},
		{"ZeroWindow", chanlimit.Config{Limit: 1}, chanlimit.ErrInvalidConfig, "Window"},
		{"NegativeWindow", chanlimit.Config{Limit: 1, Window: -time.Second}, chanlimit.ErrInvalidConfig, "Window"},
		{"NegativeBurst", chanlimit.Config{Limit: 1, Window: time.Second, Burst: -1}, chanlimit.ErrInvalidConfig, "Burst"},
		{"BurstWithSlidingWindowLog", chanlimit.Config{Algorithm: "sliding_window_log", Limit: 1, Window: time.Second, Burst: 2}, chanlimit.ErrInvalidConfig, "Burst"},
		{"BurstWithFixedWindow", chanlimit.Config{Algorithm: "fixed_window", Limit: 1, Window: time.Second, Burst: 2}, chanlimit.ErrInvalidConfig, "Burst"},
		{"BurstRefillLongerThanADuration", chanlimit.Config{Limit: 1, Window: century, Burst: 3}, chanlimit.ErrInvalidConfig, "Burst"},
		{"NegativePartitions", chanlimit.Config{Limit: 1, Window: time.Second, Partitions: -1}, chanlimit.ErrInvalidConfig, "Partitions"},
		{"TooManyPartitions", chanlimit.Config{Limit: 1, Window: time.Second, Partitions: chanlimit.MaxPartitions + 1}, chanlimit.ErrInvalidConfig, "Partitions"},
		{"NegativeMailboxSize", chanlimit.Config{Limit: 1, Window: time.Second, MailboxSize: -1}, chanlimit.ErrInvalidConfig, "MailboxSize"},
		{"HugeMailboxSize", chanlimit.Config{Limit: 1, Window: time.Second, MailboxSize: chanlimit.MaxMailboxSize + 1}, chanlimit.ErrInvalidConfig, "MailboxSize"},
		{"UnknownAlgorithm", chanlimit.Config{Algorithm: "leaky", Limit: 1, Window: time.Second}, chanlimit.ErrUnknownAlgorithm, "token_bucket"},
		{"AlgorithmFactoryRefuses", chanlimit.Config{Algorithm: "test_refuses", Limit: 1, Window: time.Second}, chanlimit.ErrInvalidConfig, "not today"},
		{"AlgorithmFactoryReturnsNil", chanlimit.Config{Algorithm: "test_nil", Limit: 1, Window: time.Second}, chanlimit.ErrInvalidConfig, "test_nil"},
		{"AlgorithmFactoryPanics", chanlimit.Config{Algorithm: "test_panics", Limit: 1, Window: time.Second}, chanlimit.ErrAlgorithmPanic, "boom"},
		{"AlgorithmIsATypedNil", chanlimit.Config{Algorithm: "test_typed_nil", Limit: 1, Window: time.Second}, chanlimit.ErrInvalidConfig, "nil Machine"},
		{"AlgorithmWithoutCapacity", chanlimit.Config{Algorithm: "test_no_capacity", Limit: 1, Window: time.Second}, chanlimit.ErrInvalidConfig, "Capacity is 0"},
		{"ClockIsATypedNil", chanlimit.Config{Limit: 1, Window: time.Second, Clock: (*clock.Fake)(nil)}, chanlimit.ErrClockPanic, "Clock"},
		{"MailboxesTooLargeTogether", chanlimit.Config{Limit: 1, Window: time.Second, Partitions: 64, MailboxSize: chanlimit.MaxMailboxSize}, chanlimit.ErrInvalidConfig, "Partitions × MailboxSize"},
		{"NegativeMaxKeys", chanlimit.Config{Limit: 1, Window: time.Second, MaxKeys: -1}, chanlimit.ErrInvalidConfig, "MaxKeys"},
		{"EvictLRUWithoutMaxKeys", chanlimit.Config{Limit: 1, Window: time.Second, EvictLRU: true}, chanlimit.ErrInvalidConfig, "EvictLRU"},
		{"FewerMaxKeysThanPartitions", chanlimit.Config{Limit: 1, Window: time.Second, MaxKeys: 3, Partitions: 4}, chanlimit.ErrInvalidConfig, "MaxKeys"},
		{"NegativeMaxKeyBytes", chanlimit.Config{Limit: 1, Window: time.Second, MaxKeyBytes: -1}, chanlimit.ErrInvalidConfig, "MaxKeyBytes"},
		{"WindowTooLongForTheCounter", chanlimit.Config{Algorithm: "sliding_window_counter", Limit: 1, Window: math.MaxInt64/2 + 1}, chanlimit.ErrInvalidConfig, "Window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := chanlimit.New(tt.give)
			assert.Nil(t, r)
			require.ErrorIs(t, err, tt.want)
			require.ErrorIs(t, err, chanlimit.ErrInvalidConfig, "every config error is an ErrInvalidConfig")
			assert.Contains(t, err.Error(), tt.field)
		})
	}
}

// TestDefaultPartitionsFitAnyMailbox: with Partitions left to the default,
// the largest MailboxSize is valid on any machine.
func TestDefaultPartitionsFitAnyMailbox(t *testing.T) {
	r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Second, MailboxSize: chanlimit.MaxMailboxSize})
	require.NoError(t, err)
	assert.NoError(t, r.Close())
}

func TestAllowNRejectsBadCount(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second, Burst: 5})
	tests := []struct {
		name string
		give int
		want error
	}{
		{"Zero", 0, chanlimit.ErrInvalidCount},
		{"Negative", -1, chanlimit.ErrInvalidCount},
		{"MinInt", math.MinInt, chanlimit.ErrInvalidCount},
		{"AboveBurst", 6, chanlimit.ErrExceedsCapacity},
		{"MaxInt", math.MaxInt, chanlimit.ErrExceedsCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := r.AllowN(context.Background(), "k", tt.give)
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, chanlimit.Decision{}, d)
		})
	}
	d, err := r.AllowN(context.Background(), "k", 5)
	require.NoError(t, err)
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 1666666667, Policy: "default"}, // 5/3 s, rounded up
		d, "the refused calls took nothing: the whole burst is still there")
}

func TestDefaultAlgorithmIsTokenBucket(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second})
	ctx := context.Background()
	d, err := r.AllowN(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, chanlimit.Decision{Allowed: true, Limit: 3, ResetAfter: time.Second, Policy: "default"}, d)
	clk.Advance(500 * time.Millisecond)
	d, err = r.AllowN(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, chanlimit.Decision{Limit: 3, Remaining: 1, RetryAfter: 166666667, ResetAfter: 500 * time.Millisecond, Policy: "default"}, d,
		"1.5 tokens refilled continuously: a token bucket")
}

func TestAllowIsAllowNOfOne(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Minute})
	assert.True(t, r.Allow("k"))
	assert.True(t, r.Allow("k"))
	assert.False(t, r.Allow("k"))
	assert.True(t, r.Allow(""), "the empty string is a key like any other")
}

// TestRealClockByDefault runs in a synctest bubble, where the real clock is
// synctest's: its Sleep moves time without waiting on the wall clock.
func TestRealClockByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := chanlimit.New(chanlimit.Config{Limit: 1, Window: time.Hour})
		require.NoError(t, err)
		defer r.Close()
		assert.True(t, r.Allow("k"))
		assert.False(t, r.Allow("k"))
		time.Sleep(time.Hour - time.Nanosecond) // synctest time
		assert.False(t, r.Allow("k"))
		time.Sleep(time.Nanosecond) // synctest time
		assert.True(t, r.Allow("k"), "an hour on the real clock refilled the bucket")
	})
}

func TestContextDone(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.AllowN(ctx, "k", 1)
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, r.Allow("k"), "the cancelled call used up nothing")
}

// TestCustomAlgorithmThroughTheRouter: a registered algorithm is used by
// name, with no change to the router.
func TestCustomAlgorithmThroughTheRouter(t *testing.T) {
	name := fmt.Sprint("test_double_burst_", registrations.Add(1)) // a name of its own each run
	require.NoError(t, chanlimit.Register[algorithms.TokenBucketState](name, func(p algorithms.Params) (*algorithms.TokenBucket, error) {
		p.Burst = 2 * p.Limit
		return algorithms.NewTokenBucket(p)
	}))
	r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 2, Window: time.Second})
	d, err := r.AllowN(context.Background(), "k", 4)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

// TestCloseRacingCallers: hundreds of callers on many keys while Close runs:
// every call returns, with a decision or ErrClosed, and (TestMain) no
// goroutine is left.
func TestCloseRacingCallers(t *testing.T) {
	for _, partitions := range []int{1, 4} {
		t.Run(fmt.Sprint("Partitions", partitions), func(t *testing.T) {
			r, err := chanlimit.New(chanlimit.Config{Limit: 1000, Window: time.Second, Partitions: partitions, MailboxSize: 4, Clock: clock.NewFake(epoch)})
			require.NoError(t, err)
			var (
				wg       sync.WaitGroup
				answered sync.WaitGroup
			)
			errs := make(chan error, 400)
			for i := range 400 {
				answered.Add(1)
				wg.Go(func() {
					key := fmt.Sprint("key-", i%37)
					for calls := 0; ; calls++ {
						_, err := r.AllowN(context.Background(), key, 1)
						if calls == 0 {
							answered.Done()
						}
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
			answered.Wait() // every caller is in its loop
			var closers sync.WaitGroup
			for range 3 {
				closers.Go(func() { assert.NoError(t, r.Close()) })
			}
			closers.Wait()
			wg.Wait()
			close(errs)
			n := 0
			for err := range errs {
				n++
				if !errors.Is(err, chanlimit.ErrClosed) {
					t.Errorf("a call racing Close returned %v, want ErrClosed", err)
				}
			}
			assert.Equal(t, 400, n, "every caller ended with ErrClosed")

			_, err = r.AllowN(context.Background(), "k", 1)
			assert.ErrorIs(t, err, chanlimit.ErrClosed)
			assert.False(t, r.Allow("k"))
			assert.NoError(t, r.Close(), "Close twice is fine")
		})
	}
}
