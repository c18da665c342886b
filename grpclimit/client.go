package grpclimit

import (
	"context"
	"errors"

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
func UnaryClientInterceptor(r *chanlimit.Router, opts Options) grpc.UnaryClientInterceptor {
	c := client{r: r, opts: opts}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if err := c.wait(ctx, method); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
}

// StreamClientInterceptor makes each stream wait its turn before it is
// opened, as UnaryClientInterceptor makes a unary call wait.
func StreamClientInterceptor(r *chanlimit.Router, opts Options) grpc.StreamClientInterceptor {
	c := client{r: r, opts: opts}
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := c.wait(ctx, method); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, callOpts...)
	}
}

// client is a client interceptor's router and options.
type client struct {
	r    *chanlimit.Router
	opts Options
}

// errNoRouter is the error of an interceptor given no Router.
var errNoRouter = errors.New("grpclimit: the interceptor was given a nil *chanlimit.Router")

// wait waits for the turn of a call to method.
func (c *client) wait(ctx context.Context, method string) error {
	if c.opts.Skip != nil && c.opts.Skip(ctx, method) {
		return nil
	}
	if c.r == nil {
		return &notSent{err: errNoRouter, code: codes.Internal}
	}
	key := method
	if c.opts.Key != nil {
		var err error
		if key, err = c.opts.Key(ctx, method); err != nil {
			return &notSent{err: err, code: codes.InvalidArgument}
		}
	}
	n := cost(ctx, c.opts.Cost, method)
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
		return Refusal(d) // its turn would come past MaxWait or its deadline
	case errors.Is(err, context.DeadlineExceeded): // its turn came later than foreseen, past MaxWait and its grace
		d.RetryAfter = httplimit.WaitGrace
		return Refusal(d)
	}
	return &notSent{err: err, code: codeOf(ctx, err)}
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
