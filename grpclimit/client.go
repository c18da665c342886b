package grpclimit

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chanlimit/chanlimit"
)

// UnaryClientInterceptor makes each unary call wait its turn on r (WaitN,
// in line with the key's other calls) before it is sent; the key is the
// call's full method unless Key says otherwise. A call whose turn would
// come after MaxWait (0: no bound but its context) or its deadline fails
// at once with codes.ResourceExhausted and the wait in a
// google.rpc.RetryInfo (Refusal), one whose context ends while it waits
// with its context's code, one the router cannot decide with the router's
// error (a key function's error as it is): none of them is sent, and none
// takes any quota.
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
		return errNoRouter
	}
	key := method
	if c.opts.Key != nil {
		var err error
		if key, err = c.opts.Key(ctx, method); err != nil {
			return err
		}
	}
	n := cost(ctx, c.opts.Cost, method)
	wctx := ctx
	if c.opts.MaxWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, c.opts.MaxWait)
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
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.ResourceExhausted, msgLimited) // its turn came later than foreseen, past MaxWait
	}
	return err
}
