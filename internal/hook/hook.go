// Package hook lets chanlimit's own packages reach what package chanlimit
// does not export: package chanlimit sets each function when it is
// initialised, and package pipeline calls it. Nothing outside the module
// can import it.
package hook

import (
	"context"

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

// Quota decides n units on key for a *chanlimit.Router r, as the
// Router's method that kind names does, and with the decision writes into
// q what key has under each of its policies (actor.Partition.AllowQuota),
// in one round trip: package httplimit's RateLimit fields. q is the
// partition's until Quota returns; after it returned ctx's error, the
// caller must not touch q again.
var Quota func(r any, ctx context.Context, kind Kind, key string, n int, q *keytable.Quota) (algorithms.Decision, error)

// Kind is the method of the Router's that Quota decides as.
type Kind uint8

const (
	AllowN Kind = iota // Router.AllowN
	PeekN              // Router.Peek
	WaitN              // Router.WaitN
)
