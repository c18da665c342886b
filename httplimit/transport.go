package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/chanlimit/chanlimit"
)

// Transport rate-limits outgoing requests: an http.RoundTripper that
// waits (WaitN, in line with the key's other requests) for each request's
// turn before Base sends it, for a client that calls a rate-limited API (a
// provider's 100 requests a second per account). Key nil means the
// request's URL host (with its port, if the URL has one); Cost nil means
// 1. A request whose turn would come after MaxWait (0: no bound but its
// context's deadline) fails at once, and one whose context ends while it
// waits fails then: neither is sent, and neither takes any quota. It
// composes with any http.Client: set it as the client's Transport.
//
// It listens to the server, too. Unless IgnoreServer, a response that is
// 429, or 503 with Retry-After, or whose RateLimit field has a member with
// r=0, holds the request's key (Router.Hold) for what the server asks:
// the longest of Retry-After (delay-seconds, or an HTTP-date measured
// against the response's Date field, else against the time of day) and
// those members' t, at most MaxHold (0 means DefaultMaxHold; more than
// MaxServerHold counts as MaxServerHold, so that no server, broken or
// hostile, can lock a client out for long). The requests on that key, on
// this client and on every other that shares the router (or its Store),
// then wait for the hold's end before they are sent. A value that is
// malformed, negative or given twice is ignored; a response that asks for
// no wait (a bare 429) holds nothing. A hold the router cannot make (a
// router on a Store that cannot hold) is skipped: the response is
// returned all the same.
//
// With Retries > 0, a request so refused is sent again once its turn
// comes after the hold, at most Retries times, if it is safe to: its
// method is idempotent (RFC 9110, 9.2.2: GET, HEAD, OPTIONS, TRACE, PUT,
// DELETE) or it has an Idempotency-Key field, its body can be sent again
// (it has none, or GetBody), and its turn comes within MaxWait and its
// context's deadline. The refused response's body is then read (up to
// 64 KiB, so that its connection can serve again) and closed. Otherwise
// the refusal is returned as it came, its body unread; and if the turn
// foreseen passes after all (other requests joined the line first), the
// error is ErrNotSent's.
type Transport struct {
	Base    http.RoundTripper // nil means http.DefaultTransport
	Router  *chanlimit.Router
	Key     func(*http.Request) (string, error)
	Cost    func(*http.Request) int
	MaxWait time.Duration

	IgnoreServer bool          // do not hold keys on the server's word
	Retries      int           // 0: none
	MaxHold      time.Duration // the longest hold the server's word can set; 0 means DefaultMaxHold
}

// DefaultMaxHold is the longest hold a server's word sets (Transport's and
// grpclimit's MaxHold 0): long enough for a quota that refills by the
// minute, short enough that one refusal cannot stall a client for an hour.
const DefaultMaxHold = 5 * time.Minute

// MaxServerHold is the longest hold a server's word can ever set,
// whatever MaxHold says.
const MaxServerHold = time.Hour

// ErrNotSent is matched (errors.Is) by the error of a request Transport
// did not send: its key could not be made, its wait would pass MaxWait or
// its context's deadline (the error matches context.DeadlineExceeded too),
// its context ended while it waited, or the router could not decide it.
var ErrNotSent = errors.New("httplimit: Transport: the request was not sent")

// RoundTrip waits for req's turn, then sends it with Base; it holds the
// key on the server's word, and sends the request again if it may (see
// Transport). As an http.RoundTripper must, it closes req's body whether
// it sends the request or not, and leaves req as it was.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, n, err := t.wait(req)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	sent := req
	for tries := 0; ; tries++ {
		resp, err := base.RoundTrip(sent)
		if err != nil || t.IgnoreServer {
			return resp, err
		}
		hold, asks := serverWait(resp, time.Now())
		if !asks {
			return resp, nil
		}
		// Even if the request's context has just ended: the response
		// stands whatever the router answers, but a request is sent again
		// only after a hold that was made.
		herr := t.Router.Hold(context.WithoutCancel(sent.Context()), key, min(hold, t.maxHold()))
		refused := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
		if herr != nil || !refused || tries >= t.Retries || !resendable(req) {
			return resp, nil
		}
		if !t.turnComes(req.Context(), key, n) {
			return resp, nil
		}
		again := req.Clone(req.Context())
		if again.Body, err = bodyAgain(req); err != nil {
			return resp, nil
		}
		discard(resp.Body)
		if err := t.waitTurn(again.Context(), key, n); err != nil {
			if again.Body != nil {
				again.Body.Close()
			}
			return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		sent = again
	}
}

// CloseIdleConnections closes the idle connections of Base, if it has
// any to close (http.Client.CloseIdleConnections calls it).
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// errNoTransportRouter is the error of a Transport with no Router.
var errNoTransportRouter = errors.New("httplimit: Transport has no Router")

// wait waits for req's turn: WaitN of its cost on its key, up to
// MaxWait. It returns the key and the cost.
func (t *Transport) wait(req *http.Request) (key string, n int, err error) {
	if t.Router == nil {
		return "", 0, errNoTransportRouter
	}
	key = req.URL.Host
	if t.Key != nil {
		if key, err = t.Key(req); err != nil {
			return "", 0, fmt.Errorf("%w: %w", ErrKey, err)
		}
	}
	n = 1
	if t.Cost != nil {
		n = t.Cost(req)
	}
	return key, n, t.waitTurn(req.Context(), key, n)
}

// waitTurn waits for the turn of n units on key, up to MaxWait.
func (t *Transport) waitTurn(ctx context.Context, key string, n int) error {
	if t.MaxWait <= 0 {
		_, err := t.Router.WaitN(ctx, key, n)
		return err
	}
	wctx, cancel := WaitContext(ctx, t.MaxWait)
	defer cancel()
	d, err := t.Router.WaitN(wctx, key, n)
	if err != nil && d.RetryAfter > 0 {
		return fmt.Errorf("%w: its turn is %v away, past MaxWait %v or the context's deadline", err, d.RetryAfter, t.MaxWait)
	}
	return err
}

// maxHold returns the longest hold the server's word sets.
func (t *Transport) maxHold() time.Duration {
	if t.MaxHold <= 0 {
		return DefaultMaxHold
	}
	return min(t.MaxHold, MaxServerHold)
}

// turnComes reports whether the turn of n units on key, asked now, comes
// within MaxWait and ctx's deadline, as far as the router foresees it.
func (t *Transport) turnComes(ctx context.Context, key string, n int) bool {
	d, err := t.Router.Peek(ctx, key, n)
	if err != nil {
		return false
	}
	wait := d.RetryAfter
	if d.Allowed {
		wait = d.Delay
	}
	if t.MaxWait > 0 && wait > t.MaxWait {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && wait > time.Until(dl) {
		return false
	}
	return true
}

// resendable reports whether req may be sent again (RFC 9110, 9.2.2): its
// method is idempotent, or it carries an Idempotency-Key, and its body,
// if any, can be had again.
func resendable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if req.Header.Get("Idempotency-Key") == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// bodyAgain returns a new copy of req's body, or none.
func bodyAgain(req *http.Request) (io.ReadCloser, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req.Body, nil
	}
	return req.GetBody()
}

// maxDiscard is the most of a refused response's body read before it is
// closed, so that its connection may serve the next request: a refusal's
// body is short, and a longer one costs its connection instead.
const maxDiscard = 64 << 10

// discard reads what is left of body, up to maxDiscard, and closes it.
func discard(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDiscard)
	body.Close()
}
