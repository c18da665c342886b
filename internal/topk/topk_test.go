package topk

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkSummary checks s against the true counts of what was added to it:
// its heap and index, the total, and Space-Saving's bounds for every key.
func checkSummary(t *testing.T, s *Summary, truth map[string]uint64) {
	t.Helper()
	var total uint64
	for _, c := range truth {
		total += c
	}
	require.Equal(t, total, s.Total())
	require.LessOrEqual(t, s.n, Size)
	indexed := 0
	for _, x := range s.index {
		if x != 0 {
			indexed++
		}
	}
	require.Equal(t, s.n, indexed, "every entry in use is indexed, once")
	for e := range s.n {
		require.Equal(t, e, s.find(s.entries[e].hash, string(s.entries[e].key)), "entry %d found by its key", e)
		require.GreaterOrEqual(t, s.entries[e].count, s.low, "entry %d has less than the least", e)
	}
	for _, e := range s.lows[:s.nlows] {
		require.Less(t, int(e), s.n)
	}
	for key, n := range truth {
		count, err, ok := s.Lookup(key)
		if !ok {
			require.LessOrEqual(t, n, s.Floor(), "%q counted %d, not held, above the floor", key, n)
			require.LessOrEqual(t, n*Size, total, "%q has more than 1/Size of the total and is not held", key)
			continue
		}
		require.LessOrEqual(t, count-err, n, "%q: count %d - err %d above its true %d", key, count, err, n)
		require.LessOrEqual(t, n, count, "%q: count %d below its true %d", key, count, n)
	}
}

// stream adds to s keys drawn by rng: a few heavy ones and a long tail,
// as a flood of denials of random keys beside a few abusers.
func stream(s *Summary, truth map[string]uint64, rng *rand.Rand, n int) {
	for range n {
		var key string
		switch r := rng.IntN(100); {
		case r < 40:
			key = fmt.Sprint("heavy-", rng.IntN(5))
		case r < 60:
			key = fmt.Sprint("mid-", rng.IntN(100))
		default:
			key = fmt.Sprint("tail-", rng.IntN(100_000))
		}
		s.Add(key)
		truth[key]++
	}
}

// TestSummaryKeepsItsBounds: against the true counts of random streams,
// a Summary keeps Space-Saving's bounds, at every step of a short stream
// and at the end of long ones.
func TestSummaryKeepsItsBounds(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var s Summary
		truth := map[string]uint64{}
		for range 200 {
			stream(&s, truth, rng, 1)
			checkSummary(t, &s, truth)
		}
		stream(&s, truth, rng, 20_000)
		checkSummary(t, &s, truth)
		for i := range 5 {
			count, _, ok := s.Lookup(fmt.Sprint("heavy-", i))
			assert.True(t, ok, "a heavy key is held")
			assert.Greater(t, count, uint64(0))
		}
		s.Empty()
		checkSummary(t, &s, map[string]uint64{})
	}
}

// TestSummaryCopiesItsKeys: a key the summary holds is its own copy.
func TestSummaryCopiesItsKeys(t *testing.T) {
	var s Summary
	buf := []byte("key-1")
	s.Add(string(buf[:5]))
	buf[4] = '2'
	_, _, ok := s.Lookup("key-1")
	assert.True(t, ok)
}

// TestDenialsOverTwoGenerations: Denials counts the last one to two
// minutes of the partition's timeline, and its merged counts keep the
// bounds: count-err <= the true count over the generations it spans <=
// count, against the true counts of each minute.
func TestDenialsOverTwoGenerations(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var d Denials
	perMinute := []map[string]uint64{}
	for minute := range 6 {
		truth := map[string]uint64{}
		for i := range 5_000 {
			d.Tick(time.Duration(minute)*Generation + time.Duration(i)*10*time.Millisecond) // 50 s of the minute
			var key string
			if rng.IntN(3) == 0 {
				key = fmt.Sprint("heavy-", rng.IntN(3))
			} else {
				key = fmt.Sprint("tail-", rng.IntN(10_000))
			}
			d.Add(key)
			truth[key]++
		}
		perMinute = append(perMinute, truth)
		both := map[string]uint64{}
		for k, c := range truth {
			both[k] += c
		}
		if minute > 0 {
			for k, c := range perMinute[minute-1] {
				both[k] += c
			}
		}
		seen := 0
		d.Each(func(key string, count, err uint64) {
			seen++
			n := both[key]
			assert.LessOrEqual(t, count-err, n, "minute %d %q", minute, key)
			assert.LessOrEqual(t, n, count, "minute %d %q", minute, key)
		})
		assert.LessOrEqual(t, seen, 2*Size)
		for i := range 3 {
			found := false
			d.Each(func(key string, _, _ uint64) { found = found || key == fmt.Sprint("heavy-", i) })
			assert.True(t, found, "minute %d: heavy-%d is listed", minute, i)
		}
	}

	// Two generations of quiet: nothing is left.
	d.Tick(8 * Generation)
	d.Each(func(key string, _, _ uint64) { t.Errorf("%q outlived two quiet generations", key) })
}

// TestDenialsTickSteps: the generations move at exactly a Generation's
// age, and both empty at two.
func TestDenialsTickSteps(t *testing.T) {
	var d Denials
	held := func() (keys []string) {
		d.Each(func(key string, _, _ uint64) { keys = append(keys, key) })
		return keys
	}
	d.Tick(0)
	d.Add("a")
	d.Tick(Generation - 1)
	d.Add("b")
	assert.ElementsMatch(t, []string{"a", "b"}, held(), "one generation")
	d.Tick(Generation) // a and b go to prev
	d.Add("c")
	assert.ElementsMatch(t, []string{"a", "b", "c"}, held())
	d.Tick(2*Generation - 1)
	assert.ElementsMatch(t, []string{"a", "b", "c"}, held())
	d.Tick(2 * Generation) // a and b are let go
	assert.ElementsMatch(t, []string{"c"}, held())
	d.Tick(4*Generation + 5) // two generations on: nothing
	assert.Empty(t, held())
	d.Add("d")
	d.Tick(5*Generation - 1) // the generation began at 4 generations
	assert.ElementsMatch(t, []string{"d"}, held())
	d.Tick(5 * Generation)
	assert.ElementsMatch(t, []string{"d"}, held(), "in prev")
}

// FuzzSummary: any stream of keys keeps the summary's bounds.
func FuzzSummary(f *testing.F) {
	f.Add([]byte("aabbbcccddddeeeeeffffff"))
	f.Add(make([]byte, 300))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Summary
		truth := map[string]uint64{}
		for i, b := range data {
			key := fmt.Sprint(b % 97)
			if i%2 == 1 {
				key = fmt.Sprint(int(b) * i)
			}
			s.Add(key)
			truth[key]++
		}
		checkSummary(t, &s, truth)
	})
}

// TestSummaryCountsWithoutAllocating: once its entries have room for the
// keys, counting allocates nothing, even as new keys keep taking the
// places of others.
func TestSummaryCountsWithoutAllocating(t *testing.T) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("api-key-%06d", i)
	}
	var s Summary
	for _, k := range keys {
		s.Add(k)
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		s.Add(keys[i%len(keys)])
		i += 7
	})
	assert.Zero(t, allocs)
}

// BenchmarkSummaryAdd: a denial counted, among 1,000 keys denied in turn
// (each a new key for a summary of 64: the worst case), and among 50.
func BenchmarkSummaryAdd(b *testing.B) {
	for _, n := range []int{50, 1000} {
		b.Run(fmt.Sprint("keys=", n), func(b *testing.B) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("api-key-%08d", i)
			}
			var d Denials
			i := 0
			for b.Loop() {
				d.Add(keys[i%n])
				i++
			}
		})
	}
}
