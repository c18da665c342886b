package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/chanlimit/chanlimit"
)

// What a middleware leaves in the request it passes on: its decision, for
// the handler (DecisionFrom, KeyFrom), and what the middlewares inside
// it on the same exchange need to write the response's fields with its
// members and to give the request back.

// requestInfo is the context of a request the middleware decided, as
// the handler or OnLimited gets it: the request's own, with its Decision
// and key, what an inner middleware needs to give the request back, and
// room for the fields' values, in one allocation.
type requestInfo struct {
	context.Context
	m        *middleware
	outer    *requestInfo        // the middleware the request passed before this one on the same exchange, if any
	w        http.ResponseWriter // the ResponseWriter the middleware was given, which tells the exchange (outerOf)
	d        chanlimit.Decision
	key      string
	n        int
	given    atomic.Bool // whether the request's n units were given back (a request is given back once)
	violated []string    // a refusal's policies that refused it (the problem's "violated-policies")
	values   [3]string   // RateLimit-Policy, RateLimit, Retry-After
}

// join makes c's fields those of the response: c's own members with
// those that h, the response's header, has already (the middlewares the
// request passed before this one wrote theirs, from the outermost in).
// RateLimit-Policy lists them from the outermost in, whatever the
// answer, so that it stays the same from one response to the next;
// RateLimit does so on an allowance, and on a refusal puts the refusing
// router's members first, its deciding one leading, then the others'
// from the outermost in. A name that two routers share appears once for
// each.
func (c *requestInfo) join(h http.Header) {
	policy, rate := h[fieldPolicy], h[fieldRateLimit]
	if len(policy) == 0 && len(rate) == 0 { // no middleware before this one wrote fields
		return
	}
	c.values[0] = joinList(strings.Join(policy, ", "), c.values[0])
	if c.d.Allowed {
		c.values[1] = joinList(strings.Join(rate, ", "), c.values[1])
	} else {
		c.values[1] = joinList(c.values[1], strings.Join(rate, ", "))
	}
}

// joinList returns the Structured Fields List of a's members then b's.
func joinList(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + ", " + b
}

// giveBack gives back to its router the n units c's request took, if it
// took them and nobody gave them back yet: Refund after the handler, or
// an inner middleware's refusal, whichever comes first; the other does
// nothing. Not the request's context, which ends with the handler: the
// router takes no value from it, only when to give up,
// and a refund it cannot make (a closed router, a Store that failed)
// leaves the request counted, as documented.
func (c *requestInfo) giveBack() {
	if !c.d.Allowed || !c.given.CompareAndSwap(false, true) {
		return
	}
	_ = c.m.router.Refund(context.Background(), c.key, c.n)
}

// giveBackAll gives back what each middleware in c's chain took for the
// request (c, and those it passed before), which one after them refused
// or could not decide. c may be nil: no middleware came before.
func (c *requestInfo) giveBackAll() {
	for ; c != nil; c = c.outer {
		c.giveBack()
	}
}

// String names the context without its values: a key may be a secret.
func (c *requestInfo) String() string {
	return fmt.Sprint(c.Context) + ".WithValue(httplimit's decision and key)"
}

// infoKey keys a requestInfo in its own context.
type infoKey struct{}

// Value returns c for infoKey, and otherwise the request's own context's
// value for k.
func (c *requestInfo) Value(k any) any {
	if k == (infoKey{}) {
		return c
	}
	return c.Context.Value(k)
}

// infoFrom returns the requestInfo of the innermost middleware that
// decided r.
func infoFrom(r *http.Request) (*requestInfo, bool) {
	info, ok := r.Context().Value(infoKey{}).(*requestInfo)
	return info, ok
}

// DecisionFrom returns the Decision the middleware made for r: in the
// wrapped handler, the grant; in OnLimited, the refusal. With several
// middlewares on one request, it is the innermost one's (the refusing
// one's, in OnLimited).
func DecisionFrom(r *http.Request) (chanlimit.Decision, bool) {
	info, ok := infoFrom(r)
	if !ok {
		return chanlimit.Decision{}, false
	}
	return info.d, true
}

// KeyFrom returns the key the middleware limited r by (Options.Key's),
// in the wrapped handler and in OnLimited; with several middlewares on
// one request, the innermost one's.
func KeyFrom(r *http.Request) (string, bool) {
	info, ok := infoFrom(r)
	if !ok {
		return "", false
	}
	return info.key, true
}

// outerOf returns the requestInfo of the middleware that req passed last
// before this one on the same exchange, or nil: a middleware's context
// alone does not say so, for a handler may serve requests of its own in
// process (the parts of a batch) with its request's context, and a
// refusal of one of those must not give back the request that carried
// it. Two middlewares are on one exchange when the ResponseWriter each
// was given leads, unwrapped (the Unwrap method http.ResponseController
// follows), to the same one; a writer in between that has no Unwrap
// hides the outer middleware, which then keeps what it took (its Refund
// option can give it back).
func outerOf(w http.ResponseWriter, req *http.Request) *requestInfo {
	info, ok := infoFrom(req)
	if !ok || !sameWriter(underlying(info.w), underlying(w)) {
		return nil
	}
	return info
}

// sameWriter reports whether a and b are the same ResponseWriter: one
// of a type that cannot be compared (a struct holding a map, say) is
// never the same as another, rather than a panic.
func sameWriter(a, b http.ResponseWriter) bool {
	va := reflect.ValueOf(a)
	return reflect.TypeOf(a) == reflect.TypeOf(b) && va.Comparable() && va.Equal(reflect.ValueOf(b))
}

// underlying returns the ResponseWriter w wraps, unwrapped all the way
// down.
func underlying(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}
