// Package hook lets chanlimit's own packages reach what package chanlimit
// does not export: package chanlimit sets each function when it is
// initialised, and package pipeline calls it. Nothing outside the module
// can import it.
package hook

import (
	"context"
	"time"

	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

// TryWaitBatch decides WaitN requests that must not wait, for a
// *chanlimit.Router r: keys[i] and ns[i] (n >= 1, keys distinct) are
// granted into out[i] if WaitN would grant them at once; otherwise out[i]
// is not Allowed and, if WaitN would fail at once, errs[i] holds its
// error. A request whose errs[i] is set already is passed by. It returns
// ctx.Err() or ErrClosed if they came first: the requests not decided
// then have a zero out[i] and a nil errs[i].
var TryWaitBatch func(r any, ctx context.Context, keys []string, ns []int, out []algorithms.Decision, errs []error) error

// AllowEach decides requests as Router.AllowBatch does, for a
// *chanlimit.Router r, keys[i] and ns[i] into out[i], but reports each
// request's own error in errs[i]: a request whose n or key the router
// refuses fails alone, not the batch. A request whose errs[i] is set
// already is passed by. It returns ctx.Err() or ErrClosed if they came
// first: the requests not decided then have a zero out[i] and a nil
// errs[i].
var AllowEach func(r any, ctx context.Context, keys []string, ns []int, out []algorithms.Decision, errs []error) error

// PolicySet returns the set of policies key is under now, for a
// *chanlimit.Router r, as Router.PoliciesOf does: package httplimit keeps
// the fields it writes for a set, so that it formats them once.
var PolicySet func(r any, ctx context.Context, key string) (*keytable.Set, error)

// AllowMore decides n units on key as Router.AllowN does, for a
// *chanlimit.Router r, and for a request allowed returns the time until
// more quota too (actor.Partition.AllowMore): package httplimit's
// RateLimit field, in one round trip.
var AllowMore func(r any, ctx context.Context, key string, n int) (algorithms.Decision, time.Duration, error)
