package algorithms_test

import (
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
)

// A rule is a Machine applied to a state the caller owns: here, one key's
// token bucket of 5 a second, on a timeline the caller moves (chanlimit's
// partitions pass the time since they started).
func ExampleNewTokenBucket() {
	tb, err := algorithms.NewTokenBucket(algorithms.Params{Limit: 5, Window: time.Second})
	if err != nil {
		panic(err)
	}
	var key algorithms.TokenBucketState // the zero state: an untouched key
	var d algorithms.Decision
	for i := range 6 {
		tb.AllowN(&key, 0, 1, &d)
		fmt.Println(i, d.Allowed, d.Remaining, d.RetryAfter)
	}
	tb.AllowN(&key, 200*time.Millisecond, 1, &d) // a token a fifth of a second
	fmt.Println("at 200ms", d.Allowed, d.Remaining)
	// Output:
	// 0 true 4 0s
	// 1 true 3 0s
	// 2 true 2 0s
	// 3 true 1 0s
	// 4 true 0 0s
	// 5 false 0 200ms
	// at 200ms true 0
}
