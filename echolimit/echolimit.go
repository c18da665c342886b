// Package echolimit is chanlimit's store for Echo v5's rate limiter
// middleware (middleware.RateLimiter and RateLimiterWithConfig): Echo
// keys each request and answers it; a chanlimit.Router decides it, and
// the response carries the RateLimit-Policy, RateLimit and Retry-After
// fields that package httplimit writes, with the same values.
//
// Echo v4 has no such interface for a store to write fields with: there,
// wrap httplimit's own middleware with echo.WrapMiddleware:
//
//	e.Use(echo.WrapMiddleware(httplimit.Middleware(r, httplimit.Options{})))
//
// Its module is its own (github.com/chanlimit/chanlimit/echolimit), so
// that only those who use Echo have it in their builds.
package echolimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// Store is a store for Echo's rate limiter middleware backed by a
// chanlimit.Router. Each request takes 1 unit (no other cost) of the key
// that Echo's RateLimiterConfig.IdentifierExtractor gives it (by default
// c.RealIP(): the peer's address, unless Echo's IPExtractor says
// otherwise; an IPv6 client is a key per address, where
// httplimit.KeyByIP keys its /64: an extractor that returns
// httplimit.KeyOfIP keys clients alike), decided at once by
// Router.AllowQuota, never waiting.
//
// Echo calls AllowContext (middleware.RateLimiterStoreContext), which
// sets httplimit's fields on the response's header before Echo answers:
// RateLimit-Policy and RateLimit on an allowance and on a refusal, with
// the values httplimit.Fields gives (none for a key under dry-run
// policies alone), and Retry-After on a refusal; a store before it on
// the request (a global limiter's, and this a route's) keeps its members,
// as httplimit's nested middlewares do. A refusal is answered by
// the DenyHandler: Echo's default and this package's DenyHandler both
// return middleware.ErrRateLimitExceeded, a 429 with Echo's JSON body
// (not httplimit's problem+json).
//
// What it does not do, being a store and not a middleware: a cost other
// than 1, waiting (httplimit's MaxWait), Refund after the handler, the
// give-back between nested limits, DecisionFrom and KeyFrom in the
// handler, OmitFields, OnLimited. For these, wrap
// httplimit.Middleware with echo.WrapMiddleware instead.
//
// A request the router cannot decide is not allowed, and gets no fields
// and an error: an *echo.HTTPError wrapping the router's error (errors.Is
// finds chanlimit.ErrClosed in it), whose status is the one
// httplimit.WriteError answers that error with: 400 for a key longer than
// the router's MaxKeyBytes; 503 for a closed router, one at its MaxKeys,
// a Store that cannot answer (chanlimit.ErrStoreUnavailable, FailClosed),
// or a request whose context ended; 500 otherwise. Echo hands a store's
// error to the DenyHandler, not to its ErrorHandler (which answers
// IdentifierExtractor's errors), and its default DenyHandler answers it
// as a refusal, 429; set DenyHandler to this package's, which returns the
// error for Echo's HTTPErrorHandler to answer with its status.
//
// A Store is safe for simultaneous use; NewStore makes one.
type Store struct {
	r      *chanlimit.Router
	quotas sync.Pool // of *chanlimit.Quota, for the router to fill in
}

var (
	_ middleware.RateLimiterStore        = (*Store)(nil)
	_ middleware.RateLimiterStoreContext = (*Store)(nil)
)

// NewStore returns a Store that decides requests on r. A nil r fails
// every request with an error (500).
func NewStore(r *chanlimit.Router) *Store {
	s := &Store{r: r}
	s.quotas.New = func() any { return new(chanlimit.Quota) }
	return s
}

// errNoRouter is the error of a Store made with no Router.
var errNoRouter = errors.New("echolimit: NewStore was given a nil *chanlimit.Router")

// Allow implements middleware.RateLimiterStore: it takes 1 unit of key,
// and reports whether it was granted. Having no request, it sets no
// fields; Echo calls AllowContext instead.
func (s *Store) Allow(key string) (bool, error) {
	if s.r == nil {
		return false, s.error(nil, errNoRouter)
	}
	d, err := s.r.AllowN(context.Background(), key, 1)
	if err != nil {
		return false, s.error(nil, err)
	}
	return d.Allowed, nil
}

// AllowContext implements middleware.RateLimiterStoreContext: it takes 1
// unit of key for the request of c, on the request's context, and sets
// the response's fields as httplimit does (RateLimit-Policy, RateLimit,
// and Retry-After on a refusal) before Echo answers.
func (s *Store) AllowContext(c *echo.Context, key string) (bool, error) {
	req := c.Request()
	if s.r == nil {
		return false, s.error(req, errNoRouter)
	}
	q := s.quotas.Get().(*chanlimit.Quota)
	defer s.quotas.Put(q)
	d, err := s.r.AllowQuota(req.Context(), key, 1, q)
	if err != nil {
		return false, s.error(req, err)
	}
	policy, rate, retryAfter := httplimit.Fields(d, q)
	h := c.Response().Header()
	// A limiter before this one (a global one, and this a route's) wrote
	// its members: the response carries both, as httplimit's nested
	// middlewares do, the refusing store's first in RateLimit.
	policy = join(h.Get("RateLimit-Policy"), policy)
	if d.Allowed {
		rate = join(h.Get("RateLimit"), rate)
	} else {
		rate = join(rate, h.Get("RateLimit"))
	}
	if policy != "" {
		h.Set("RateLimit-Policy", policy)
	}
	if rate != "" {
		h.Set("RateLimit", rate)
	}
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(retryAfter, 10))
	}
	return d.Allowed, nil
}

// join returns the Structured Fields List of a's members then b's.
func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + ", " + b
}

// DenyHandler is a RateLimiterConfig.DenyHandler for a Store: a refusal
// is Echo's middleware.ErrRateLimitExceeded (429, with the fields the
// Store set), and a request the Store could not decide returns the
// Store's error, for Echo's HTTPErrorHandler to answer with its status
// (400, 500 or 503; its default handler writes the status's text alone
// unless told to expose errors).
func DenyHandler(_ *echo.Context, _ string, err error) error {
	if err != nil {
		return err
	}
	return middleware.ErrRateLimitExceeded
}

// error returns err as Echo's error with the status httplimit.WriteError
// answers it with for req (nil: a request whose context never ends).
func (s *Store) error(req *http.Request, err error) error {
	status := httplimit.ErrorStatus(req, err)
	return echo.NewHTTPError(status, http.StatusText(status)).Wrap(err)
}
