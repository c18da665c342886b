package chanlimit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// Policies from a configuration file: ParsePolicies reads them and checks
// them as New would, and New takes them as they are.
func ExampleParsePolicies() {
	config := []byte(`[
		{"name": "second", "limit": 2, "window": "1s"},
		{"name": "minute", "algorithm": "sliding_window_log", "limit": 3, "window": "1m30s"}
	]`) // in practice: os.ReadFile("policies.json")
	policies, err := chanlimit.ParsePolicies(config)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range policies {
		fmt.Printf("%s: %d per %v\n", p.Name, p.Limit, p.Window)
	}

	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, err := chanlimit.New(chanlimit.Config{Policies: policies, Clock: clk})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	for range 3 {
		fmt.Print(r.Allow("alice"), " ")
	}
	clk.Advance(time.Second)
	fmt.Println(r.Allow("alice"), r.Allow("alice"))

	_, err = chanlimit.ParsePolicies([]byte(`[{"name": "hour", "limit": 100, "window": 3600}]`))
	fmt.Println(errors.Is(err, chanlimit.ErrInvalidConfig))
	fmt.Println(err)
	_, err = chanlimit.ParsePolicies([]byte(`[{"name": "hour", "limit": 100, "Window": "1h"}]`))
	fmt.Println(err)
	_, err = chanlimit.ParsePolicies([]byte(`[{"name": "hour", "window": "1h"}]`))
	fmt.Println(err)
	// Output:
	// second: 2 per 1s
	// minute: 3 per 1m30s
	// true true false true false
	// true
	// chanlimit: invalid config: Policies[0]: window: the number 3600 is not a duration, for it has no unit: write a string such as "1m30s"
	// chanlimit: invalid config: Policies[0]: "Window": no such key (keys are spelled exactly: "window"): a policy's keys are "name", "algorithm", "limit", "window", "burst" and "dry_run"
	// chanlimit: invalid config: Policies[0] ("hour"): Limit: must be > 0 (got 0)
}
