package chanlimit_test

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// Flood: a stream of random keys, far more than MaxKeys, on a frozen fake
// clock so that no key ever becomes untouched. The heap must stay under
// floodHeapBound, and a hot key's state must come through intact.
const (
	floodMaxKeys   = 100_000
	floodHeapBound = 32 << 20 // README states it; measured about 16 MiB
)

// floodKeys is how many random keys the flood sends: floodDefault (10
// million without -race, 1 million with it), or CHANLIMIT_FLOOD_KEYS.
func floodKeys(t *testing.T) int {
	if s := os.Getenv("CHANLIMIT_FLOOD_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "CHANLIMIT_FLOOD_KEYS")
		return n
	}
	return floodDefault
}

func TestFloodOfRandomKeys(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Minute, MaxKeys: floodMaxKeys})
	require.True(t, allowN(t, r, "hot", 7).Allowed)
	hot := allowN(t, r, "hot", 4) // denied: 3 left
	require.False(t, hot.Allowed)

	total := floodKeys(t)
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([]chanlimit.Request, 1024)
	out := make([]chanlimit.Decision, len(reqs))
	var raw [16]byte
	var peak uint64
	var ms runtime.MemStats
	refused := 0
	for sent := 0; sent < total; sent += len(reqs) {
		for i := range reqs {
			binary.LittleEndian.PutUint64(raw[:8], rng.Uint64())
			binary.LittleEndian.PutUint64(raw[8:], rng.Uint64())
			reqs[i] = chanlimit.Request{Key: hex.EncodeToString(raw[:]), N: 1}
		}
		err := r.AllowBatch(bg, reqs, out)
		if err != nil {
			require.True(t, errors.Is(err, chanlimit.ErrTooManyKeys), "AllowBatch: %v", err)
		}
		for i := range out {
			if out[i].Limit == 0 {
				refused++
			}
		}
		if (sent/len(reqs))%512 == 0 {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	peak = max(peak, ms.HeapAlloc)
	t.Logf("%d random keys against MaxKeys %d: %d refused; peak live heap %.1f MiB", total, floodMaxKeys, refused, float64(peak)/(1<<20))

	st := stats(t, r)
	assert.LessOrEqual(t, st.Keys, floodMaxKeys)
	assert.Greater(t, st.Keys, floodMaxKeys*99/100, "shares fill evenly")
	assert.Equal(t, uint64(0), st.Evicted+st.Expired, "nothing was forgiven")
	assert.Less(t, peak, uint64(floodHeapBound), "peak live heap")
	assert.Equal(t, hot, allowN(t, r, "hot", 4), "the hot key's state came through the flood intact")
	assert.True(t, allowN(t, r, "hot", 3).Allowed)

	// Time moves on: the flood's keys become untouched and make room.
	clk.Advance(time.Minute)
	assert.True(t, allowN(t, r, "after the flood", 1).Allowed)
}
