package redislimit

import (
	"fmt"
	"math"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

// Lua's numbers are doubles: the script decides exactly the policies whose
// arithmetic stays among the integers a double holds, which Check tells.

// Exact is the largest value the script computes with: Lua's numbers are
// doubles, exact for integers up to 2^53, and Check keeps every product
// below 2^50.
const exact = 1 << 50

// exactTime bounds the times the script takes (µs since 1970): a double
// holds integers exactly below 2^53.
const exactTime = 1 << 53

// scriptAlgorithm numbers the algorithms the script knows, as decide.lua
// numbers them.
var scriptAlgorithm = map[string]int{
	algorithms.TokenBucketName:          1,
	algorithms.GCRAName:                 2,
	algorithms.LeakyBucketName:          3,
	algorithms.SlidingWindowLogName:     4,
	algorithms.SlidingWindowCounterName: 5,
	algorithms.FixedWindowName:          6,
}

// Check returns nil if the script can decide exactly under policies (which
// chanlimit has validated): the six algorithms of chanlimit, a Window of
// whole microseconds, and values whose arithmetic stays exact in Lua.
func (s *Store) Check(policies []chanlimit.Policy) error {
	for _, p := range policies {
		if err := check(p); err != nil {
			return fmt.Errorf("policy %q: %w", p.Name, err)
		}
	}
	return nil
}

func check(p chanlimit.Policy) error {
	alg, ok := scriptAlgorithm[p.Algorithm]
	if !ok {
		return fmt.Errorf("redislimit has no script for algorithm %q: it has one for each algorithm of chanlimit", p.Algorithm)
	}
	if field := len(p.Algorithm) + 1 + len(p.Name); field > math.MaxUint16 {
		return fmt.Errorf("its Name is %d bytes long, too long for a key's layout in Redis (at most %d)", len(p.Name), math.MaxUint16-1-len(p.Algorithm))
	}
	if p.Window%time.Microsecond != 0 {
		return fmt.Errorf("its Window, %v, is not a whole number of microseconds, as times in Redis are", p.Window)
	}
	w := uint64(p.Window / time.Microsecond)
	if w > exact {
		return fmt.Errorf("its Window, %v, is too long for Redis's arithmetic (at most %v)", p.Window, time.Duration(exact)*time.Microsecond)
	}
	limit, capacity := uint64(p.Limit), uint64(p.Limit)
	if p.Burst > 0 {
		capacity = uint64(p.Burst)
	}
	switch alg {
	case 4, 6:
		// The counts, as the log's entries, are at most the Limit.
		if limit > exact {
			return fmt.Errorf("its Limit %d is too large for Redis's arithmetic (at most 2^50)", limit)
		}
	case 1, 2, 3:
		// A full bucket holds capacity × perToken units.
		if _, perToken := perUnits(limit, w); capacity > exact/perToken {
			return fmt.Errorf("its Burst %d at Limit %d per %v is too large for Redis's arithmetic (Burst × Window / gcd(Limit, Window in µs) must be below 2^50)", capacity, limit, p.Window)
		}
	case 5:
		if limit > exact/w || limit > 1000*w {
			return fmt.Errorf("its Limit %d per %v is too large for Redis's arithmetic (Limit × Window in µs must be below 2^50, and Limit at most Window in ns)", limit, p.Window)
		}
	}
	return nil
}

// perUnits returns the units a bucket refills per microsecond, and the
// units in a token, for limit per w microseconds.
func perUnits(limit, w uint64) (perUs, perToken uint64) {
	a, b := limit, w
	for b != 0 {
		a, b = b, a%b
	}
	return limit / a, w / a
}
