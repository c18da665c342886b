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
