package grpclimit

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// UnaryClientInterceptor makes each unary call wait its turn on r (WaitN,
// in line with the key's other calls) before it is sent; the key is the
// call's full method unless Key says otherwise. A call whose turn would
// come after MaxWait (0: no bound but its context) or its deadline fails
// at once with codes.ResourceExhausted and the wait in a
// google.rpc.RetryInfo (Refusal), one whose context ends while it waits
// with its context's code; one the router cannot decide, or whose key
// function fails, with an error whose gRPC code is what a server would
// answer (status.Code: codes.Unavailable for a closed router,
// codes.InvalidArgument for a cost above the key's capacity or a key
// error, codes.ResourceExhausted for a full line) and which matches the
// router's error (errors.Is). None of them is sent, and none takes any
// quota.
//
// It listens to the server, too. Unless IgnoreServer, a call that ends
// with codes.ResourceExhausted and a google.rpc.RetryInfo holds its key
// (Router.Hold) for the RetryInfo's delay, at most MaxHold (0 means
// httplimit.DefaultMaxHold; more than httplimit.MaxServerHold counts as
// that), so the next calls on the key, on every client that shares the
// router, wait for its end before they are sent; a RetryInfo that does
// not parse, or is negative or given twice, is ignored. With Retries > 0,
// a call so refused is made again once its turn comes after the hold, at
// most Retries times, if RetrySafe says the method may be (nil: none may),
// and its turn comes within MaxWait and its context's deadline; else the
// refusal comes back as it came.
func UnaryClientInterceptor(r *chanlimit.Router, opts Options) grpc.UnaryClientInterceptor {
	c := client{r: r, opts: opts}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		key, n, skip, err := c.wait(ctx, method)
		if err != nil {
			return err
		}
		for tries := 0; ; tries++ {
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			if skip || !c.held(ctx, key, err) {
				return err
			}
			if tries >= c.opts.Retries || c.opts.RetrySafe == nil || !c.opts.RetrySafe(method) || !c.turnComes(ctx, key, n) {
				return err
			}
			if err := c.waitTurn(ctx, key, n); err != nil {
				return err
			}
		}
	}
}

// StreamClientInterceptor makes each stream wait its turn before it is
// opened, as UnaryClientInterceptor makes a unary call wait, and holds its
// key, as that one does, if the stream ends so refused (RecvMsg's error).
// A stream is never opened again.
func StreamClientInterceptor(r *chanlimit.Router, opts Options) grpc.StreamClientInterceptor {
	c := client{r: r, opts: opts}
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		key, _, skip, err := c.wait(ctx, method)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if skip || c.opts.IgnoreServer {
			return cs, err
		}
		if err != nil {
			c.held(ctx, key, err)
			return nil, err
		}
		return &listening{ClientStream: cs, c: &c, ctx: ctx, key: key}, nil
	}
}

// listening is a client stream whose end, if the server refused it with a
// RetryInfo, holds its key.
type listening struct {
	grpc.ClientStream
	c   *client
	ctx context.Context
	key string
}

func (s *listening) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && err != io.EOF {
		s.c.held(s.ctx, s.key, err)
	}
	return err
}

// client is a client interceptor's router and options.
type client struct {
	r    *chanlimit.Router
	opts Options
}

// errNoRouter is the error of an interceptor given no Router.
var errNoRouter = errors.New("grpclimit: the interceptor was given a nil *chanlimit.Router")

// wait waits for the turn of a call to method, and returns its key and
// cost, or that Skip lets it through.
func (c *client) wait(ctx context.Context, method string) (key string, n int, skip bool, err error) {
	if c.opts.Skip != nil && c.opts.Skip(ctx, method) {
		return "", 0, true, nil
	}
	if c.r == nil {
		return "", 0, false, &notSent{err: errNoRouter, code: codes.Internal}
	}
	key = method
	if c.opts.Key != nil {
		if key, err = c.opts.Key(ctx, method); err != nil {
			return "", 0, false, &notSent{err: err, code: codes.InvalidArgument}
		}
	}
	n = cost(ctx, c.opts.Cost, method)
	return key, n, false, c.waitTurn(ctx, key, n)
}

// waitTurn waits for the turn of n units on key, up to MaxWait.
func (c *client) waitTurn(ctx context.Context, key string, n int) error {
	wctx := ctx
	if c.opts.MaxWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = httplimit.WaitContext(ctx, c.opts.MaxWait)
		defer cancel()
	}
	d, err := c.r.WaitN(wctx, key, n)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, context.DeadlineExceeded) && d.RetryAfter > 0:
		return refusedHere(d) // its turn would come past MaxWait or its deadline
	case errors.Is(err, context.DeadlineExceeded): // its turn came later than foreseen, past MaxWait and its grace
		d.RetryAfter = httplimit.WaitGrace
		return refusedHere(d)
	}
	return &notSent{err: err, code: codeOf(ctx, err)}
}

// refused is the error of a call a client interceptor refused itself,
// unsent: the status of Refusal, as a server's refusal has, but marked,
// so that an interceptor around this one (another router's) never takes
// it for the server's word and holds its own key for it.
type refused struct{ st *status.Status }

// refusedHere returns the error of a call refused here, for d.
func refusedHere(d chanlimit.Decision) error {
	return &refused{status.Convert(Refusal(d))}
}

func (e *refused) Error() string { return e.st.Err().Error() }

// GRPCStatus returns the refusal's status, for status.FromError and
// status.Code.
func (e *refused) GRPCStatus() *status.Status { return e.st }

// held holds key if err, a call's end, is the server's refusal with a
// RetryInfo, unless IgnoreServer, and reports whether it was held: a call
// is made again only after a hold that was made.
func (c *client) held(ctx context.Context, key string, err error) bool {
	var here *refused
	if err == nil || c.opts.IgnoreServer || errors.As(err, &here) {
		return false // not the server's word: a refusal of an interceptor within this one
	}
	wait, asks := serverWait(err)
	if !asks {
		return false
	}
	maxHold := httplimit.DefaultMaxHold
	if c.opts.MaxHold > 0 {
		maxHold = min(c.opts.MaxHold, httplimit.MaxServerHold)
	}
	// Even if the call's context has just ended: the call's error stands
	// whatever the router answers.
	return c.r.Hold(context.WithoutCancel(ctx), key, min(wait, maxHold)) == nil
}

// turnComes reports whether the turn of n units on key, asked now, comes
// within MaxWait and ctx's deadline, as far as the router foresees it.
func (c *client) turnComes(ctx context.Context, key string, n int) bool {
	d, err := c.r.Peek(ctx, key, n)
	if err != nil {
		return false
	}
	wait := d.RetryAfter
	if d.Allowed {
		wait = d.Delay
	}
	if c.opts.MaxWait > 0 && wait > c.opts.MaxWait {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && wait > time.Until(dl) {
		return false
	}
	return true
}

// notSent is the error of a call a client interceptor did not send, as
// the router (or the key function) answered: its gRPC code (GRPCStatus)
// is what a server would answer the same error with, and errors.Is
// matches the router's error through it.
type notSent struct {
	err  error
	code codes.Code
}

func (e *notSent) Error() string { return "grpclimit: the call was not sent: " + e.err.Error() }

func (e *notSent) Unwrap() error { return e.err }

// GRPCStatus returns the call's status, for status.FromError and
// status.Code. Its message is the error's: it never leaves the client.
func (e *notSent) GRPCStatus() *status.Status { return status.New(e.code, e.Error()) }
