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
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
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

// violated returns the names of the policies that refused d, a denial of
// n units, with q its key's quota: the deciding policy, then each other
// policy, in order, whose own quota would not allow the request either
// (with a Store, q tells of the deciding policy alone). It is the
// problem body's "violated-policies".
func violated(d chanlimit.Decision, q *chanlimit.Quota, n int) []string {
	names := []string{d.Policy}
	for _, pq := range q.Each {
		if p := q.Policies[pq.Policy]; p.Name != d.Policy && !p.DryRun && pq.Remaining < n {
			names = append(names, p.Name)
		}
	}
	return names
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

// problem is an RFC 9457 problem details object.
type problem struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Detail     string   `json:"detail"`
	Violated   []string `json:"violated-policies,omitempty"` // 429: the policies that refused
	Policy     string   `json:"policy,omitempty"`            // 429: the policy that decided
	RetryAfter int64    `json:"retry_after,omitempty"`       // 429: Retry-After, in seconds
}

// The problem type of a refusal by the key's policies, defined by the
// IETF draft draft-ietf-httpapi-ratelimit-headers (from its revision 12),
// with its title.
const (
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	quotaExceededTitle   = "Request cannot be satisfied as assigned quota has been exceeded"
)

// WriteLimited writes the default refusal of r, which OnLimited is
// answering: 429 Too Many Requests with an RFC 9457
// application/problem+json body for the Decision DecisionFrom(r) returns
// (the RateLimit-Policy, RateLimit and Retry-After fields are already
// set). A refusal by the key's policies has the draft's problem type
// ProblemQuotaExceeded, with its "violated-policies" member (the deciding policy
// first, then any other that would not have allowed the request either),
// and, as before it, "policy" (the deciding one) and "retry_after" (the
// seconds to wait); one by a hold (chanlimit.Router.Hold), which no
// policy made, is "about:blank" with "retry_after". An OnLimited can log
// the refusal, then call it. Called for a request that carries no
// refusal (outside OnLimited), it answers as WriteError does an internal
// error: 500.
func WriteLimited(w http.ResponseWriter, r *http.Request) {
	info, ok := infoFrom(r)
	if !ok || info.d.Allowed {
		WriteError(w, r, errNoRefusal)
		return
	}
	writeLimited(w, info)
}

// errNoRefusal is WriteLimited's error for a request that carries no
// refusal.
var errNoRefusal = errors.New("httplimit: WriteLimited was called for a request the middleware did not refuse")

// writeLimited writes the default refusal of info's request: 429, with a
// problem body.
func writeLimited(w http.ResponseWriter, info *requestInfo) {
	d := info.d
	secs := untilMore(d, 0)
	p := problem{
		Type:       ProblemQuotaExceeded,
		Title:      quotaExceededTitle,
		Status:     http.StatusTooManyRequests,
		Detail:     fmt.Sprintf("rate limit %q reached: retry in %d s", d.Policy, secs),
		Violated:   info.violated,
		Policy:     d.Policy,
		RetryAfter: secs,
	}
	if byHold(d) {
		p.Type, p.Title = "", ""
		p.Detail = fmt.Sprintf("requests on this key are held: retry in %d s", secs)
	}
	writeProblem(w, p)
}

// writeProblem writes p as the response: its status, and its body as
// application/problem+json; a p of no type is "about:blank", titled by
// its status.
func writeProblem(w http.ResponseWriter, p problem) {
	if p.Type == "" {
		p.Type, p.Title = "about:blank", http.StatusText(p.Status)
	}
	body, err := json.Marshal(p)
	if err != nil { // strings and numbers always marshal
		body = []byte(`{"type":"about:blank"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// The details of WriteError's answers, one per status: a key function's
// error can carry anything (a database's error, a token), so none of an
// error's text reaches the client.
const (
	detailBadRequest  = "the request cannot be rate-limited as it is: it has no key the server accepts, or it costs more than its limits ever allow at once"
	detailUnavailable = "the rate limiter cannot decide the request now"
	detailInternal    = "the rate limiter could not decide the request"
)

// WriteError is the default OnError: it answers err with the status
// ErrorStatus gives it and an RFC 9457 application/problem+json body
// whose detail is fixed for each status, so that nothing of err reaches
// the client (an OnError of your own can log err, then call WriteError).
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	p := problem{Status: ErrorStatus(r, err)}
	switch p.Status {
	case http.StatusBadRequest:
		p.Detail = detailBadRequest
	case http.StatusServiceUnavailable:
		p.Detail = detailUnavailable
	default:
		p.Detail = detailInternal
	}
	writeProblem(w, p)
}

// ErrorStatus returns the status WriteError answers err with, for the
// request r (nil: a request whose context has not ended), so that a
// middleware of another framework answers as this one does:
//
//   - 400 Bad Request for a key the request does not give (ErrNoKey), a
//     key longer than the router's MaxKeyBytes, and a cost above what the
//     key's policies ever allow (chanlimit.ErrExceedsCapacity);
//   - 503 Service Unavailable for a router that is closed
//     (chanlimit.ErrClosed) or holds as many keys as it may
//     (chanlimit.ErrTooManyKeys), whose Store cannot answer
//     (chanlimit.ErrStoreUnavailable: Redis down, with FailClosed), and
//     for a request whose context ended first (the client went away, or a
//     server deadline passed);
//   - 500 Internal Server Error for anything else: a key function's own
//     error, a Cost below 1, a panic in an algorithm or the clock.
func ErrorStatus(r *http.Request, err error) int {
	switch {
	case errors.Is(err, ErrNoKey), errors.Is(err, chanlimit.ErrKeyTooLong), errors.Is(err, chanlimit.ErrExceedsCapacity):
		return http.StatusBadRequest
	case errors.Is(err, chanlimit.ErrClosed), errors.Is(err, chanlimit.ErrTooManyKeys), errors.Is(err, chanlimit.ErrStoreUnavailable),
		r != nil && r.Context().Err() != nil:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
