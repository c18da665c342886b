package model

import (
	"fmt"
	"math"
	"math/big"

	"github.com/chanlimit/chanlimit/algorithms"
)

// CheckWindowInvariant checks, over the admissions of the named rule for
// p, the bound the rule promises on the units any span of one Window,
// (t - Window, t], holds: Limit for sliding_window_log, 2 × Limit for
// fixed_window and sliding_window_counter. It checks nothing for the other
// rules, nor for a Limit whose double overflows.
func CheckWindowInvariant(name string, p algorithms.Params, adm []Admission) error {
	most := map[string]int{
		SlidingWindowLog:     p.Limit,
		FixedWindow:          2 * p.Limit,
		SlidingWindowCounter: 2 * p.Limit,
	}
	bound, ok := most[name]
	if !ok || p.Limit > math.MaxInt/2 {
		return nil
	}
	// The span holding the most ends at an admission.
	for _, end := range adm {
		if units := UnitsIn(adm, end.At-p.Window, end.At); units > bound {
			return fmt.Errorf("%s: %d units admitted in the Window ending at %v, more than %d", name, units, end.At, bound)
		}
	}
	return nil
}

// CheckSpacing checks that leaky_bucket's admitted work, for p, starts
// evenly spaced: between the starts of two admissions lie at least the
// units admitted between them × Window/Limit, rounded down to the
// nanosecond.
func CheckSpacing(p algorithms.Params, adm []Admission) error {
	for i := range adm {
		units := new(big.Int)
		for j := i + 1; j < len(adm); j++ {
			units.Add(units, big.NewInt(int64(adm[j-1].N)))
			need := new(big.Int).Mul(units, big.NewInt(int64(p.Window)))
			need.Quo(need, big.NewInt(int64(p.Limit)))
			if gap := new(big.Int).Sub(adm[j].Start(), adm[i].Start()); gap.Cmp(need) < 0 {
				return fmt.Errorf("leaky_bucket: work admitted at %v starts %v after work admitted at %v, %v units apart: want at least %v",
					adm[j].At, gap, adm[i].At, units, need)
			}
		}
	}
	return nil
}
