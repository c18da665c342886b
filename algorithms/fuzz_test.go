package algorithms_test

import (
	"errors"
	"math"
	"testing"
	"time"

	. "github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/model"
)

// Fuzz targets, one per algorithm: arbitrary Params and an arbitrary
// schedule, played on the algorithm and its reference model (play): no
// panic, identical decisions, PeekN agreeing with AllowN, and the window
// invariants; then again with the clock stepping back (playBackwards). Their seeds run with the normal tests; to search further:
//
//	go test ./algorithms -run '^$' -fuzz FuzzSlidingWindowCounter -fuzztime 1m

func FuzzTokenBucket(f *testing.F)          { fuzzAlgorithm(f, model.TokenBucket) }
func FuzzGCRA(f *testing.F)                 { fuzzAlgorithm(f, model.GCRA) }
func FuzzLeakyBucket(f *testing.F)          { fuzzAlgorithm(f, model.LeakyBucket) }
func FuzzSlidingWindowLog(f *testing.F)     { fuzzAlgorithm(f, model.SlidingWindowLog) }
func FuzzFixedWindow(f *testing.F)          { fuzzAlgorithm(f, model.FixedWindow) }
func FuzzSlidingWindowCounter(f *testing.F) { fuzzAlgorithm(f, model.SlidingWindowCounter) }

func fuzzAlgorithm(f *testing.F, name string) {
	seeds := []struct {
		limit, window, burst int64
		calls                []byte
	}{
		{3, int64(time.Second), 0, []byte{0, 1, 1, 0, 5, 2, 3, 1, 2, 6, 7, 3}},
		{7, int64(10 * time.Second), 2, []byte{0, 1, 0, 1, 5, 0, 2, 1, 3, 1, 4, 5}},
		{1, int64(1000 * time.Hour), 0, []byte{0, 0, 2, 0, 3, 0, 1, 0}},
		{1e9, 1, math.MaxInt64, []byte{0, 1, 0, 2, 1, 1, 0, 9}},
		{math.MaxInt64, int64(century), 0, []byte{0, 1, 4, 2, 3, 1, 7, 1}},
		{10, int64(time.Second), 25, []byte{6, 1, 14, 1, 22, 9, 30, 13, 3, 1}},
		{0, int64(time.Second), 0, []byte{0, 1}},
		{1, 0, 0, []byte{0, 1}},
		{1, int64(century), 3, []byte{0, 1}},
		{-5, -5, -5, nil},
	}
	for _, s := range seeds {
		f.Add(s.limit, s.window, s.burst, s.calls)
	}
	f.Fuzz(func(t *testing.T, limit, window, burst int64, data []byte) {
		p := Params{Limit: int(limit), Window: time.Duration(window), Burst: int(burst)}
		alg, err := construct(name, p)
		if err != nil {
			if !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("%+v refused with %v, want an ErrInvalidParams", p, err)
			}
			return
		}
		if p.Window > century {
			return // the models keep sums of instants and windows in a Duration
		}
		calls := decodeCalls(data, p, alg.capacity)
		if err := play(name, p, calls); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if err := playBackwards(name, p, calls); err != nil {
			t.Fatalf("%+v, stepping back: %v", p, err)
		}
	})
}

// decodeCalls turns fuzz bytes into a schedule, two bytes a call: the
// first picks the clock step, the second the n.
func decodeCalls(data []byte, p Params, capacity int) []call {
	token := max(p.Window/time.Duration(min(p.Limit, math.MaxInt64)), 1)
	var calls []call
	for i := 0; i+1 < len(data) && len(calls) < 64; i += 2 {
		a, b := data[i], data[i+1]
		var dt time.Duration
		switch a % 8 {
		case 0:
		case 1:
			dt = 1
		case 2:
			dt = p.Window - 1
		case 3:
			dt = p.Window
		case 4:
			dt = p.Window + 1
		case 5:
			dt = token
		case 6:
			dt = p.Window / 8 * time.Duration(a>>3%16) // up to 2 Windows
		case 7:
			dt = time.Duration(a>>3) * 365 * 24 * time.Hour
		}
		var n int
		switch b % 4 {
		case 0:
			n = 1
		case 1:
			n = capacity
		case 2:
			n = 1 + int(b>>2)%min(capacity, 64)
		case 3:
			n = []int{0, -1, capacity + 1, capacity/2 + 1}[int(b>>2)%4]
		}
		// A step of 0 to 5 leaves a's high bit free: set, the call is a
		// refund of n.
		calls = append(calls, call{dt: dt, n: n, refund: a%8 < 6 && a&0x80 != 0})
	}
	return calls
}
