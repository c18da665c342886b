// Package shaping marks the calls of a stage that shapes its items
// (package pipeline's Throttle): it tries each item with
// Router.TryWaitEach and has those not granted wait (Router.StartWait),
// so that each item is one wait, and is observed as one (Config.Observe).
package shaping

import "context"

type marker struct{}

// Context returns ctx, marked as a shaping stage's.
func Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, marker{}, true)
}

// Is reports whether ctx is marked as a shaping stage's.
func Is(ctx context.Context) bool {
	v, _ := ctx.Value(marker{}).(bool)
	return v
}
