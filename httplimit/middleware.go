// Package httplimit is chanlimit's net/http middleware: it keys each
// request (by client address, header, or both), asks a chanlimit.Router,
// and lets the request through or refuses it with 429 Too Many Requests,
// writing the RateLimit-Policy and RateLimit fields of the IETF draft
// "RateLimit header fields for HTTP" (draft-ietf-httpapi-ratelimit-headers)
// on both, so that clients can pace themselves.
//
// Middleware returns a func(http.Handler) http.Handler, the shape chi and
// most routers take as middleware; with net/http's ServeMux, which takes
// none, wrap a handler before registering it (or the whole mux).
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// Options configure a Middleware. The zero Options key requests by
// client address (KeyByIP), cost 1 each, never wait, and answer with the
// defaults below.
type Options struct {
	// Key returns the request's key: whose quota it uses. nil means
	// KeyByIP. Its error goes to OnError, wrapped with ErrKey.
	Key func(*http.Request) (string, error)

	// Cost returns the units the request takes (several for an expensive
	// one); nil means 1. A cost below 1 is an error wrapping
	// chanlimit.ErrInvalidCount (500 by default: the Cost function is
	// wrong); a cost above what the key's policies ever allow at once is
	// one wrapping chanlimit.ErrExceedsCapacity (400 by default: it could
	// never pass, so waiting or retrying is no use).
	Cost func(*http.Request) int

	// MaxWait is the longest a request waits for its grant (WaitN, in
	// line with the key's other waiters) before it is refused; 0 (or
	// less) means it never waits: it is allowed or refused at once
	// (AllowN), and a leaky_bucket allowance goes on at once whatever its
	// Delay (with MaxWait it waits for its turn). A request whose wait
	// would pass MaxWait is refused at once, not after MaxWait. One whose grant comes later than foreseen
	// (the key's policies changed, the timer was late) waits a little
	// past MaxWait, WaitGrace at most, before it is refused.
	MaxWait time.Duration

	// OnLimited answers a refused request, after the middleware has set
	// its RateLimit-Policy, RateLimit and Retry-After fields; DecisionFrom
	// gives it the refusal's Decision. nil means WriteLimited: 429 Too
	// Many Requests with an RFC 9457 application/problem+json body.
	OnLimited http.Handler

	// OnError answers a request whose key could not be made or that the
	// router could not decide; err says why, for the application to log.
	// nil means WriteError, whose answer tells the client no more than
	// its status does.
	OnError func(http.ResponseWriter, *http.Request, error)

	// Refund, if set, runs once the handler of an allowed request has
	// returned, with the status it wrote (200 if it wrote none, or
	// hijacked the connection); if it returns true, the request's Cost is
	// given back to its key (Router.Refund), so that it counts for
	// nothing: count failed logins only, or spare the client the server's
	// own errors. It does not run for a refused request, which took
	// nothing, nor after a handler that panicked; a request that a
	// middleware inside this one refused was given back already, and is
	// not given back twice. The refund is made even
	// if the client has gone; one the router cannot make (it was closed,
	// or a Store could not take it) leaves the request counted; with a
	// Store, the refund's round trip comes before ServeHTTP returns. With
	// Refund set, the handler gets a ResponseWriter that notes the status
	// (one allocation a request); it passes on Flush and Hijack, and
	// Unwrap gives http.ResponseController the one below.
	Refund func(r *http.Request, status int) bool

	// Skip, if set, lets the requests it returns true for through to the
	// handler unlimited: not decided, counted nowhere, and without
	// fields (health checks, a load balancer's probes). It runs before
	// the key is made, on every request.
	Skip func(*http.Request) bool

	// OmitFields leaves the RateLimit-Policy and RateLimit fields out of
	// every response, for a server that would not tell its clients its
	// limits; a refusal still has its Retry-After and its problem body.
	OmitFields bool
}

// WaitGrace is how long past MaxWait a request may wait for a grant that
// was due by MaxWait.
const WaitGrace = 100 * time.Millisecond

// middleware is one Middleware's router and options.
type middleware struct {
	router   *chanlimit.Router
	opts     Options
	key      func(*http.Request) (string, error)
	onError  func(http.ResponseWriter, *http.Request, error)
	policies [4]atomic.Pointer[policyFields] // the fields of the sets met last
	next     atomic.Uint32                   // the slot of policies to replace next
	quotas   sync.Pool                       // of *chanlimit.Quota, for the router to fill in
}

// Middleware returns middleware that decides each request on r before
// the handler it wraps sees it. An allowed request goes on to the
// handler, with the response's RateLimit-Policy (every policy of the
// request's key: its override's, or the router's) and RateLimit fields
// already set. RateLimit has a member for each of those policies, the
// deciding one first (Decision.Policy), each with that policy's own
// remaining quota (r) and seconds until it has more (t); while callers
// wait on the key (MaxWait), what it has is theirs, and every member
// says r=0 with the wait in line. A refused request never reaches the
// handler: it gets the same fields, its deciding member's t being the
// Retry-After, and OnLimited's answer (429 by default). A request that
// could not be decided gets OnError's, without the fields. The key's
// policies come with the decision, in the same round trip to the router.
//
// Several middlewares can limit one request (a global limit outside, a
// route's inside, each with its own router): each learns of those the
// request passed before it on the same exchange through the request's
// context (and the ResponseWriter each was given, which must lead, by
// Unwrap, to the same one: a handler's requests of its own, in process
// with its request's context, are not its request). The response
// carries every router's members: RateLimit-Policy lists them from the
// outermost in; RateLimit does so on an allowance, and on a refusal puts
// the refusing router's first (its deciding member leading), then the
// others' from the outermost in. When one refuses a request, or cannot
// decide it, those it passed give back what it took from them
// (Router.Refund, before the response is written), so that a request the
// handler never saw counts nowhere; each request is given back once,
// whether by this or by Refund. DecisionFrom and KeyFrom return the
// innermost middleware's.
//
// A nil r answers every request through OnError (500 by default) with
// an error saying so, and so does a nil handler every allowed request.
func Middleware(r *chanlimit.Router, opts Options) func(http.Handler) http.Handler {
	m := &middleware{router: r, opts: opts, key: opts.Key, onError: opts.OnError}
	m.quotas.New = func() any { return new(chanlimit.Quota) }
	if m.key == nil {
		m.key = KeyByIP
	}
	if m.onError == nil {
		m.onError = WriteError
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { m.onError(w, req, errNoHandler) })
		}
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			m.serve(w, req, next)
		})
	}
}

// errNoRouter and errNoHandler are the errors of a Middleware given no
// Router, and of one wrapped around no handler: each request is answered
// through OnError (500 by default) instead of a panic.
var (
	errNoRouter  = errors.New("httplimit: Middleware was given a nil *chanlimit.Router")
	errNoHandler = errors.New("httplimit: the middleware wraps a nil http.Handler")
)

// serve decides req, and passes it on to next or refuses it.
func (m *middleware) serve(w http.ResponseWriter, req *http.Request, next http.Handler) {
	if m.opts.Skip != nil && m.opts.Skip(req) {
		next.ServeHTTP(w, req)
		return
	}
	outer := outerOf(w, req) // the middlewares this request passed on its way here, if any
	for o := outer; o != nil; o = o.outer {
		if o.m == m { // this middleware limited the request already (mounted twice, or the request served again)
			next.ServeHTTP(w, req)
			return
		}
	}
	if m.router == nil {
		m.fail(w, req, outer, errNoRouter)
		return
	}
	key, err := m.key(req)
	if err != nil {
		m.fail(w, req, outer, fmt.Errorf("%w: %w", ErrKey, err))
		return
	}
	n := 1
	if m.opts.Cost != nil {
		n = m.opts.Cost(req)
	}
	ctx := req.Context()
	q := m.quotas.Get().(*chanlimit.Quota)
	d, err := m.decide(ctx, key, n, q)
	if errors.Is(err, chanlimit.ErrTooManyWaiters) {
		d, err = m.refusal(ctx, key, n, q) // a refusal like any other: the key has no room left
	}
	if err != nil {
		m.quotas.Put(q)
		m.fail(w, req, outer, err)
		return
	}

	// One allocation holds the request's context for the handler, with
	// its Decision and key (DecisionFrom, KeyFrom), what an inner
	// middleware needs to give it back, and the fields' values; each
	// field gets a slice of its own, capped, so that adding to one never
	// writes another.
	info := &requestInfo{Context: ctx, m: m, outer: outer, w: w, d: d, key: key, n: n}
	var t int64
	if !m.opts.OmitFields {
		fields := m.policyFields(q.Policies)
		info.values[0] = fields.value
		var buf [128]byte
		rate, wait := fields.appendRateLimit(buf[:0], d, q)
		info.values[1], t = string(rate), wait
	} else if !d.Allowed {
		t = untilMore(d, 0)
	}
	if !d.Allowed && !byHold(d) {
		info.violated = violated(d, q, n)
	}
	m.quotas.Put(q)
	h := w.Header()
	info.join(h)
	values := info.values[:]
	if values[0] != "" { // dry-run policies alone, or OmitFields: no fields
		h[fieldPolicy] = values[0:1:1]
	}
	if values[1] != "" { // none: as above, or a key held whose quota a Store cannot tell
		h[fieldRateLimit] = values[1:2:2]
	}
	if d.Allowed {
		req = req.WithContext(info)
		if m.opts.Refund == nil {
			next.ServeHTTP(w, req)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, req)
		if m.opts.Refund(req, sw.written()) {
			info.giveBack() // unless an inner middleware's refusal gave it back already
		}
		return
	}
	outer.giveBackAll() // the routers the request passed take nothing for it
	values[2] = strconv.FormatInt(t, 10)
	h[fieldRetryAfter] = values[2:3:3]
	if m.opts.OnLimited != nil {
		m.opts.OnLimited.ServeHTTP(w, req.WithContext(info))
		return
	}
	writeLimited(w, info)
}

// fail answers req, which could not be decided, through OnError, after
// the middlewares the request passed (outer) have given back what it
// took: it never reaches the handler. The answer has no fields, not even
// theirs, which the give-back made stale.
func (m *middleware) fail(w http.ResponseWriter, req *http.Request, outer *requestInfo, err error) {
	if outer != nil {
		outer.giveBackAll()
		h := w.Header()
		delete(h, fieldPolicy)
		delete(h, fieldRateLimit)
	}
	m.onError(w, req, err)
}

// decide asks the router for n units on key: AllowN, or WaitN up to
// MaxWait; with the decision, the router writes the key's quota into q. A
// wait that MaxWait cuts short is a refusal, not an error.
func (m *middleware) decide(ctx context.Context, key string, n int, q *chanlimit.Quota) (chanlimit.Decision, error) {
	if m.opts.MaxWait <= 0 {
		return m.router.AllowQuota(ctx, key, n, q)
	}
	wctx, cancel := WaitContext(ctx, m.opts.MaxWait)
	d, err := m.router.WaitQuota(wctx, key, n, q)
	cancel()
	switch {
	case err == nil:
		return d, nil
	case ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded):
		return d, err
	case d.RetryAfter > 0:
		return d, nil // refused at once: WaitN tells how long it would have waited (a hold's too), and the quota
	}
	return m.refusal(ctx, key, n, q) // the grant was late past WaitGrace
}

// refusal returns the Decision of a request on key refused though the
// router did not deny it (too many waiters, a wait cut short): the
// key's state as Peek sees it, denied, with its wait, and its quota in q.
func (m *middleware) refusal(ctx context.Context, key string, n int, q *chanlimit.Quota) (chanlimit.Decision, error) {
	d, err := m.router.PeekQuota(ctx, key, n, q)
	d.Allowed = false
	return d, err
}

// WaitContext returns ctx for a WaitN of at most maxWait, as Middleware
// (with MaxWait), Transport and package grpclimit wait: its Deadline,
// which WaitN refuses at once to wait past, is maxWait from now (or ctx's,
// if sooner), and it ends WaitGrace after that, so that a grant foreseen
// within maxWait that comes a little late is still waited for.
func WaitContext(ctx context.Context, maxWait time.Duration) (context.Context, context.CancelFunc) {
	// A context's deadline is on the wall clock, whatever the router's
	// Clock: WaitN reads it there too (as the time left), so this is the
	// one clock both sides agree on.
	deadline := clock.Real().Now().Add(maxWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	inner, cancel := context.WithDeadline(ctx, deadline.Add(WaitGrace))
	return graceContext{inner, deadline}, cancel
}

// graceContext is a context whose Deadline comes before it ends.
type graceContext struct {
	context.Context
	deadline time.Time
}

func (c graceContext) Deadline() (time.Time, bool) { return c.deadline, true }

// policyFields returns the fields of set, formatted once for the sets
// met last.
func (m *middleware) policyFields(set []chanlimit.Policy) *policyFields {
	for i := range m.policies {
		if f := m.policies[i].Load(); f != nil && f.same(set) {
			return f
		}
	}
	f := newPolicyFields(set)
	m.policies[m.next.Add(1)%uint32(len(m.policies))].Store(f)
	return f
}
