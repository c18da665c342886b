package clock_test

import (
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit/clock"
)

// A Fake moves only when told to, and fires its timers as it passes
// their deadlines, earliest first: a test of code that waits is instant
// and deterministic.
func ExampleFake() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := clk.Now()
	late := clk.NewTimer(2 * time.Second)
	soon := clk.NewTimer(time.Second)

	clk.Advance(1500 * time.Millisecond)
	select {
	case at := <-soon.C():
		fmt.Println("soon fired at", at.Sub(start))
	default:
		fmt.Println("soon has not fired")
	}
	select {
	case <-late.C():
		fmt.Println("late fired")
	default:
		fmt.Println("late waits, until", clk.Now().Sub(start)+500*time.Millisecond)
	}
	clk.Advance(time.Second)
	fmt.Println("late fired at", (<-late.C()).Sub(start))
	// Output:
	// soon fired at 1s
	// late waits, until 2s
	// late fired at 2s
}
