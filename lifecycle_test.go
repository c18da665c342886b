package chanlimit_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/clock"
)

var bg = context.Background()

func stats(t *testing.T, r *chanlimit.Router) chanlimit.Stats {
	t.Helper()
	st, err := r.Stats(bg)
	require.NoError(t, err)
	return st
}

// keysVanishWhenUntouched: keys touched at different instants leave Stats
// exactly when their state is untouched again, not 1ns before.
func keysVanishWhenUntouched(t *testing.T, algorithm string) {
	r, advance := conformanceRouter(t, algorithm)
	var now time.Duration
	var deadlines []time.Duration
	for k := range 6 {
		d := allowN(t, r, fmt.Sprint("key", k), 1+k%capacity)
		deadlines = append(deadlines, now+d.ResetAfter)
		advance(70 * time.Millisecond)
		now += 70 * time.Millisecond
	}
	d := allowN(t, r, "key0", 1) // key0 again, later
	deadlines[0] = now + d.ResetAfter
	slices.Sort(deadlines)

	for i, deadline := range deadlines {
		require.Greater(t, deadline, now)
		advance(deadline - 1 - now)
		before := stats(t, r)
		assert.Equal(t, len(deadlines)-i, before.Keys, "1ns before deadline %d (%v)", i, deadline)
		advance(1)
		now = deadline
		st := stats(t, r)
		assert.Equal(t, len(deadlines)-i-1, st.Keys, "at deadline %d (%v)", i, deadline)
		assert.Equal(t, before.Idle+1, st.Idle+int(st.Expired-before.Expired), "the key is idle, or expired")
	}
	// A message past the grace lets them all expire.
	advance(time.Second)
	stats(t, r)
	st := stats(t, r)
	assert.Equal(t, 0, st.Keys+st.Idle)
}

// restoreAnswersAsTheOriginal plays random schedules on a router, takes a
// snapshot midway, lets time pass, restores it into a fresh router with
// other partitions, and then plays the rest on both: every answer must be
// the same.
func restoreAnswersAsTheOriginal(t *testing.T, algorithm string) {
	rng := rand.New(rand.NewPCG(uint64(len(algorithm)), 7))
	for round := range 20 {
		clk := clock.NewFake(epoch)
		cfg := chanlimit.Config{Algorithm: algorithm, Limit: 1 + rng.IntN(5), Window: time.Duration(1+rng.IntN(1000)) * time.Millisecond, Clock: clk, Partitions: 1 + rng.IntN(4)}
		a, err := chanlimit.New(cfg)
		require.NoError(t, err)
		defer a.Close()
		step := func(r *chanlimit.Router, key string, n int, peek bool) string {
			var d chanlimit.Decision
			if peek {
				d, err = r.Peek(bg, key, n)
			} else {
				d, err = r.AllowN(bg, key, n)
			}
			return fmt.Sprintf("%+v %v", d, err)
		}
		type call struct {
			dt   time.Duration
			key  string
			n    int
			peek bool
		}
		calls := make([]call, 120)
		for i := range calls {
			calls[i] = call{
				dt:   []time.Duration{0, 1, time.Duration(rng.Int64N(int64(cfg.Window))), cfg.Window}[rng.IntN(4)],
				key:  fmt.Sprint(rng.IntN(6)),
				n:    1 + rng.IntN(cfg.Limit),
				peek: rng.IntN(5) == 0,
			}
		}
		for _, c := range calls[:60] {
			clk.Advance(c.dt)
			step(a, c.key, c.n, c.peek)
		}
		var snap bytes.Buffer
		require.NoError(t, a.Snapshot(bg, &snap))
		clk.Advance(time.Duration(rng.Int64N(int64(cfg.Window)))) // the restart

		cfg.Partitions = 1 + rng.IntN(4)
		b, err := chanlimit.New(cfg)
		require.NoError(t, err)
		defer b.Close()
		allowN(t, b, "5", 1) // Restore replaces what b held
		require.NoError(t, b.Restore(bg, bytes.NewReader(snap.Bytes())))
		for i, c := range calls[60:] {
			clk.Advance(c.dt)
			got, want := step(b, c.key, c.n, c.peek), step(a, c.key, c.n, c.peek)
			require.Equal(t, want, got, "round %d (%+v), call %d after the restore", round, cfg, i)
		}
		require.Equal(t, stats(t, a).Keys, stats(t, b).Keys, "round %d", round)
	}
}

func TestStatsCountAnswers(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second, Partitions: 3})
	for range 5 {
		r.Allow("a")
	}
	r.Allow("b")
	out := make([]chanlimit.Decision, 3)
	require.NoError(t, r.AllowBatch(bg, []chanlimit.Request{{Key: "c", N: 2}, {Key: "c", N: 1}, {Key: "b", N: 1}}, out))
	_, err := r.Peek(bg, "z", 1)
	require.NoError(t, err)

	st := stats(t, r)
	assert.Equal(t, 3, st.Keys)
	assert.Equal(t, uint64(2+1+2), st.Allowed)
	assert.Equal(t, uint64(3+1), st.Denied)
	assert.Len(t, st.Partitions, 3)
	keys := 0
	for _, p := range st.Partitions {
		keys += p.Keys
	}
	assert.Equal(t, 3, keys)
	assert.Zero(t, st.Queued)
}

func TestMaxKeysRefusesNewKeysAndForgivesNone(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, MaxKeys: 3, Partitions: 1})
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, r.Allow(k))
	}
	d, err := r.AllowN(bg, "d", 1)
	assert.ErrorIs(t, err, chanlimit.ErrTooManyKeys)
	assert.Equal(t, chanlimit.Decision{}, d)
	assert.False(t, r.Allow("d"))
	for _, k := range []string{"a", "b", "c"} {
		assert.False(t, r.Allow(k), "%s keeps its used state", k)
	}
	st := stats(t, r)
	assert.Equal(t, 3, st.Keys)
	assert.Equal(t, uint64(2), st.Refused)

	// Peek answers as AllowN would; Reset on a new key needs no room.
	_, err = r.Peek(bg, "d", 1)
	assert.ErrorIs(t, err, chanlimit.ErrTooManyKeys)
	require.NoError(t, r.Reset(bg, "d"))
	require.NoError(t, r.Reset(bg, "a"))
	assert.True(t, r.Allow("d"), "a's place is free")

	// Once the others are untouched, new keys take their places.
	clk.Advance(time.Second)
	for _, k := range []string{"e", "f", "g"} {
		assert.True(t, r.Allow(k))
	}
	assert.Equal(t, 3, stats(t, r).Keys)
}

func TestEvictLRUDropsTheLeastRecentlyUsed(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, MaxKeys: 2, EvictLRU: true, Partitions: 1})
	require.True(t, r.Allow("a"))
	require.True(t, r.Allow("b"))
	require.False(t, r.Allow("a")) // a is the most recently used
	assert.True(t, r.Allow("c"), "b makes room")
	st := stats(t, r)
	assert.Equal(t, uint64(1), st.Evicted)
	assert.Equal(t, 2, st.Keys)
	assert.False(t, r.Allow("a"), "a was kept")
	assert.True(t, r.Allow("b"), "b was evicted: the trade-off EvictLRU makes")
}

func TestMaxKeyBytes(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, MaxKeyBytes: 4})
	assert.True(t, r.Allow("four"))
	long := "fives"
	_, err := r.AllowN(bg, long, 1)
	assert.ErrorIs(t, err, chanlimit.ErrKeyTooLong)
	assert.ErrorContains(t, err, "5 bytes, MaxKeyBytes is 4")
	_, err = r.Peek(bg, long, 1)
	assert.ErrorIs(t, err, chanlimit.ErrKeyTooLong)
	assert.ErrorIs(t, r.Reset(bg, long), chanlimit.ErrKeyTooLong)
	out := make([]chanlimit.Decision, 2)
	err = r.AllowBatch(bg, []chanlimit.Request{{Key: "ok", N: 1}, {Key: long, N: 1}}, out)
	assert.ErrorIs(t, err, chanlimit.ErrKeyTooLong)
	assert.ErrorContains(t, err, "request 1")
	assert.True(t, r.Allow("ok"), "a refused batch applies nothing")

	d, err := newRouterDefault(t).AllowN(bg, strings.Repeat("k", chanlimit.DefaultMaxKeyBytes+1), 1)
	assert.ErrorIs(t, err, chanlimit.ErrKeyTooLong)
	assert.Equal(t, chanlimit.Decision{}, d)
}

func newRouterDefault(t *testing.T) *chanlimit.Router {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
	return r
}

func TestRestoreRefusesBadSnapshotsAndLoadsNothing(t *testing.T) {
	cfg := chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 2}
	src, _ := newRouter(t, cfg)
	for _, k := range []string{"a", "b", "c"} {
		allowN(t, src, k, 2)
	}
	var buf bytes.Buffer
	require.NoError(t, src.Snapshot(bg, &buf))
	good := buf.Bytes()

	dst, _ := newRouter(t, cfg)
	allowN(t, dst, "a", 1)
	allowN(t, dst, "held", 3)
	before := stats(t, dst).Keys

	corrupt := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	bad := map[string][]byte{
		"empty":            nil,
		"not a snapshot":   []byte("hello, world"),
		"truncated":        good[:len(good)-5],
		"truncated header": good[:25],
		"corrupted":        corrupt(len(good) / 2),
		"bad checksum":     corrupt(len(good) - 1),
		"trailing bytes":   append(bytes.Clone(good), 0),
	}
	for what, b := range bad {
		err := dst.Restore(bg, bytes.NewReader(b))
		assert.ErrorIs(t, err, chanlimit.ErrBadSnapshot, what)
	}
	others := map[string]chanlimit.Config{
		"another limit":     {Limit: 4, Window: time.Second},
		"another window":    {Limit: 3, Window: time.Minute},
		"another algorithm": {Algorithm: "gcra", Limit: 3, Window: time.Second},
		"another burst":     {Limit: 3, Window: time.Second, Burst: 5},
		"fewer MaxKeys":     {Limit: 3, Window: time.Second, MaxKeys: 2},
	}
	for what, c := range others {
		r, _ := newRouter(t, c)
		err := r.Restore(bg, bytes.NewReader(good))
		assert.ErrorIs(t, err, chanlimit.ErrBadSnapshot, what)
		if what == "fewer MaxKeys" {
			assert.ErrorIs(t, err, chanlimit.ErrTooManyKeys)
		}
	}
	short, _ := newRouter(t, chanlimit.Config{Limit: 3, Window: time.Second, Partitions: 2})
	require.NoError(t, short.Restore(bg, bytes.NewReader(good)), "same config")

	// A snapshot of another version, with its checksum made right.
	v5 := bytes.Clone(good)
	v5[len("chanlimit snapshot\n")] = 5
	v5 = resum(v5)
	err := dst.Restore(bg, bytes.NewReader(v5))
	assert.ErrorIs(t, err, chanlimit.ErrBadSnapshot)
	assert.ErrorContains(t, err, "version 5")

	// Nothing was half-loaded: dst is as it was.
	assert.Equal(t, before, stats(t, dst).Keys)
	assert.Equal(t, 1, allowN(t, dst, "a", 1).Remaining)
	assert.False(t, allowN(t, dst, "held", 1).Allowed)

	require.NoError(t, dst.Restore(bg, bytes.NewReader(good)))
	assert.Equal(t, 3, stats(t, dst).Keys, "a, b, c; held is gone")
	assert.True(t, allowN(t, dst, "held", 3).Allowed)
	assert.Equal(t, 0, allowN(t, dst, "a", 1).Remaining)
}

// noCodec is a fixed window that hides its codec.
type noCodec struct {
	algorithms.Machine[algorithms.FixedWindowState]
}

func TestSnapshotOfAnAlgorithmWithoutCodec(t *testing.T) {
	name := fmt.Sprint("test_no_codec_", registrations.Add(1))
	require.NoError(t, chanlimit.Register[algorithms.FixedWindowState](name, func(p algorithms.Params) (noCodec, error) {
		fw, err := algorithms.NewFixedWindow(p)
		return noCodec{fw}, err
	}))
	r, _ := newRouter(t, chanlimit.Config{Algorithm: name, Limit: 3, Window: time.Second})
	r.Allow("k")
	var buf bytes.Buffer
	err := r.Snapshot(bg, &buf)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Zero(t, buf.Len(), "nothing written")
}

func TestRestoreAfterADowntimeCountsIt(t *testing.T) {
	cfg := chanlimit.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Minute}
	src, clk := newRouter(t, cfg)
	allowN(t, src, "k", 2)
	var buf bytes.Buffer
	require.NoError(t, src.Snapshot(bg, &buf))

	clk.Advance(30 * time.Second)
	cfg.Clock = clk
	dst, err := chanlimit.New(cfg)
	require.NoError(t, err)
	defer dst.Close()
	require.NoError(t, dst.Restore(bg, bytes.NewReader(buf.Bytes())))
	d := allowN(t, dst, "k", 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 30*time.Second, d.RetryAfter, "the window opened 30s before the restart")

	// A snapshot older than its windows loads nothing.
	clk.Advance(time.Hour)
	late, err := chanlimit.New(cfg)
	require.NoError(t, err)
	defer late.Close()
	require.NoError(t, late.Restore(bg, bytes.NewReader(buf.Bytes())))
	assert.Zero(t, stats(t, late).Keys)
}

// resum puts a correct checksum on an edited snapshot.
func resum(b []byte) []byte {
	body := b[:len(b)-4]
	return binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}

// TestEndOfTimelineStillLimits: once the clock has run past the end of the
// timeline (about 292 years), time stops, and every algorithm still holds
// its limit: deadlines there never come.
func TestEndOfTimelineStillLimits(t *testing.T) {
	for _, algorithm := range registered {
		r, clk := newRouter(t, chanlimit.Config{Algorithm: algorithm, Limit: 1, Window: time.Second})
		clk.Advance(math.MaxInt64)
		allowed := 0
		for range 5 {
			if r.Allow("k") {
				allowed++
			}
		}
		assert.Equal(t, 1, allowed, algorithm)
		assert.Equal(t, 1, stats(t, r).Keys, algorithm)
	}
}

// TestStatsIsExactWhenManyKeysComeDueAtOnce: Stats counts the keys that
// became idle at once apart from those in use, well beyond the few that
// each message lets expire.
func TestStatsIsExactWhenManyKeysComeDueAtOnce(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Partitions: 2})
	reqs := make([]chanlimit.Request, 2000)
	for i := range reqs {
		reqs[i] = chanlimit.Request{Key: fmt.Sprint(i), N: 1}
	}
	require.NoError(t, r.AllowBatch(bg, reqs, make([]chanlimit.Decision, len(reqs))))
	clk.Advance(time.Second - 1)
	assert.Equal(t, 2000, stats(t, r).Keys)
	clk.Advance(1)
	assert.Equal(t, 0, stats(t, r).Keys)
}

// TestStatsCountsIdleKeysApart: Keys is exact however many keys became
// idle, whether or not the partition has got round to letting them go.
func TestStatsCountsIdleKeysApart(t *testing.T) {
	t.Run("AfterTheGrace", func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, Partitions: 1})
		reqs := make([]chanlimit.Request, 3000)
		for i := range reqs {
			reqs[i] = chanlimit.Request{Key: fmt.Sprint(i), N: 1}
		}
		require.NoError(t, r.AllowBatch(bg, reqs, make([]chanlimit.Decision, len(reqs)))) // untouched at 1s
		clk.Advance(1500 * time.Millisecond)
		allowN(t, r, "x", 1) // the 3000 are within their grace: none expires
		st := stats(t, r)
		assert.Equal(t, 1, st.Keys)
		assert.Equal(t, 3000, st.Idle, "untouched, and within their grace: counted apart")
		clk.Advance(time.Second)
		allowN(t, r, "x", 1) // at 2.5s, after its answer, expires 8 + 2 for its one request
		st = stats(t, r)
		assert.Equal(t, 1, st.Keys, "x, in a new window")
		assert.Equal(t, 3000-10, st.Idle)
		assert.Equal(t, uint64(10), st.Expired)
	})
	t.Run("StaleDeadlines", func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Algorithm: "sliding_window_log", Limit: 10, Window: 100 * time.Millisecond, Partitions: 1})
		reqs := make([]chanlimit.Request, 2000)
		for i := range reqs {
			reqs[i] = chanlimit.Request{Key: fmt.Sprint("hot", i), N: 1}
		}
		out := make([]chanlimit.Decision, len(reqs))
		require.NoError(t, r.AllowBatch(bg, reqs, out)) // untouched at 100ms
		clk.Advance(50 * time.Millisecond)
		require.True(t, allowN(t, r, "idle", 1).Allowed) // untouched at 150ms
		clk.Advance(40 * time.Millisecond)
		require.NoError(t, r.AllowBatch(bg, reqs, out)) // untouched at 190ms; the heap catches up later
		clk.Advance(70 * time.Millisecond)
		st := stats(t, r)
		assert.Equal(t, 2000, st.Keys, "at 160ms only idle is untouched")
	})
}

// TestRestoreReadsOlderVersions: a snapshot of an older format restores
// as it did: testdata/version2.snapshot was taken by the code before
// version 3 (which holds policies and overrides), and version 1 is the same
// with the clock's reading as Unix nanoseconds. It was taken at epoch +
// 10s, of a sliding_window_log router (Limit 3, Window 1m) that had allowed
// 2 units on each of a, b and c at epoch.
func TestRestoreReadsOlderVersions(t *testing.T) {
	v2, err := os.ReadFile("testdata/version2.snapshot")
	require.NoError(t, err)
	versions := map[string][]byte{"version 2": v2, "version 1": toVersion1(t, v2)}
	for name, snapshot := range versions {
		t.Run(name, func(t *testing.T) {
			cfg := chanlimit.Config{Algorithm: "sliding_window_log", Limit: 3, Window: time.Minute, Partitions: 3}
			src, clk := newRouter(t, cfg)
			for _, k := range []string{"a", "b", "c"} {
				allowN(t, src, k, 2)
			}
			clk.Advance(30 * time.Second) // a restart that took 20s after the snapshot: it counts
			cfg.Clock = clk
			dst, err := chanlimit.New(cfg)
			require.NoError(t, err)
			defer dst.Close()
			require.NoError(t, dst.Restore(bg, bytes.NewReader(snapshot)))
			for _, k := range []string{"a", "b", "c", "d"} {
				want, err := src.Peek(bg, k, 2)
				require.NoError(t, err)
				got, err := dst.Peek(bg, k, 2)
				require.NoError(t, err)
				assert.Equal(t, want, got, k)
			}
			d, err := dst.Peek(bg, "a", 2)
			require.NoError(t, err)
			assert.Equal(t, 30*time.Second, d.RetryAfter, "a's units were taken 30s before")

			gcra, _ := newRouter(t, chanlimit.Config{Algorithm: "gcra", Limit: 3, Window: time.Minute})
			assert.ErrorIs(t, gcra.Restore(bg, bytes.NewReader(snapshot)), chanlimit.ErrBadSnapshot, "another algorithm")
			named, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{{Name: "minute", Algorithm: "sliding_window_log", Limit: 3, Window: time.Minute}}})
			assert.ErrorIs(t, named.Restore(bg, bytes.NewReader(snapshot)), chanlimit.ErrBadSnapshot, "the policy's name is not default")
		})
	}
}

// toVersion1 rewrites a version 2 snapshot in version 1's format: the
// clock's reading in Unix nanoseconds.
func toVersion1(t *testing.T, v2 []byte) []byte {
	t.Helper()
	const magic = "chanlimit snapshot\n"
	src := v2[len(magic) : len(v2)-4]
	out := []byte(magic)
	uvarint := func() uint64 {
		v, n := binary.Uvarint(src)
		require.Positive(t, n)
		src = src[n:]
		return v
	}
	varint := func() int64 {
		v, n := binary.Varint(src)
		require.Positive(t, n)
		src = src[n:]
		return v
	}
	require.Equal(t, uint64(2), uvarint(), "version")
	out = binary.AppendUvarint(out, 1)
	head := src
	name := uvarint()
	src = src[name:]
	uvarint() // Limit
	uvarint() // Window
	uvarint() // capacity
	sections := uvarint()
	out = append(out, head[:len(head)-len(src)]...)
	for range sections {
		taken := time.Unix(varint(), int64(uvarint()))
		out = binary.AppendVarint(out, taken.UnixNano())
		rest := src
		uvarint() // keys
		size := uvarint()
		src = src[size:]
		out = append(out, rest[:len(rest)-len(src)]...)
	}
	require.Empty(t, src)
	return resum(append(out, 0, 0, 0, 0))
}
