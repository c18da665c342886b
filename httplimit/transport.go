package httplimit

import (
	"errors"
	"fmt"
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
type Transport struct {
	Base    http.RoundTripper // nil means http.DefaultTransport
	Router  *chanlimit.Router
	Key     func(*http.Request) (string, error)
	Cost    func(*http.Request) int
	MaxWait time.Duration
}

// ErrNotSent is matched (errors.Is) by the error of a request Transport
// did not send: its key could not be made, its wait would pass MaxWait or
// its context's deadline (the error matches context.DeadlineExceeded too),
// its context ended while it waited, or the router could not decide it.
var ErrNotSent = errors.New("httplimit: Transport: the request was not sent")

// RoundTrip waits for req's turn, then sends it with Base. As an
// http.RoundTripper must, it closes req's body whether it sends the
// request or not.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.wait(req); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(req)
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

// wait waits for req's turn: WaitN of its cost on its key, up to MaxWait.
func (t *Transport) wait(req *http.Request) error {
	if t.Router == nil {
		return errNoTransportRouter
	}
	key := req.URL.Host
	if t.Key != nil {
		var err error
		if key, err = t.Key(req); err != nil {
			return fmt.Errorf("%w: %w", ErrKey, err)
		}
	}
	n := 1
	if t.Cost != nil {
		n = t.Cost(req)
	}
	ctx := req.Context()
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
