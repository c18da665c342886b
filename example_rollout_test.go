package chanlimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// Count only failed logins: each attempt takes a unit, and one that
// succeeds gives it back.
func ExampleRouter_Refund() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, err := chanlimit.New(chanlimit.Config{Limit: 3, Window: time.Hour, Clock: clk})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	ctx := context.Background()

	login := func(user, password string) error {
		d, err := r.AllowN(ctx, user, 1)
		if err != nil {
			return err
		}
		if !d.Allowed {
			return fmt.Errorf("too many failed logins: try again in %v", d.RetryAfter.Round(time.Minute))
		}
		if password != "secret" {
			return errors.New("wrong password")
		}
		return r.Refund(ctx, user, 1) // a login that succeeds costs nothing
	}
	for _, password := range []string{"secret", "secret", "guess", "secret", "guess", "guess", "guess"} {
		fmt.Println(login("ann", password))
	}
	// Output:
	// <nil>
	// <nil>
	// wrong password
	// <nil>
	// wrong password
	// wrong password
	// too many failed logins: try again in 20m0s
}

// Roll a stricter limit out safely: in dry run first, to see whom it
// would deny on real traffic, while the limit in force decides.
func ExamplePolicy_dryRun() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r, err := chanlimit.New(chanlimit.Config{Clock: clk, Policies: []chanlimit.Policy{
		{Name: "current", Limit: 5, Window: time.Minute},
		{Name: "planned", Limit: 3, Window: time.Minute, DryRun: true},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()

	for i := 1; i <= 6; i++ {
		d, err := r.AllowN(context.Background(), "tenant-7", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("request %d: allowed %v, would be denied %v, remaining %d (%s)\n", i, d.Allowed, d.WouldDeny, d.Remaining, d.Policy)
	}
	st, _ := r.Stats(context.Background())
	fmt.Println("decisions the planned limit would deny:", st.WouldDeny)
	// Output:
	// request 1: allowed true, would be denied false, remaining 4 (current)
	// request 2: allowed true, would be denied false, remaining 3 (current)
	// request 3: allowed true, would be denied false, remaining 2 (current)
	// request 4: allowed true, would be denied true, remaining 1 (current)
	// request 5: allowed true, would be denied true, remaining 0 (current)
	// request 6: allowed false, would be denied true, remaining 0 (current)
	// decisions the planned limit would deny: 3
}
