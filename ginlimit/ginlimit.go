// Package ginlimit is chanlimit's middleware for Gin: it limits each
// request as package httplimit's middleware does, by running that very
// middleware inside Gin's chain, so that the keys, the decisions, the
// RateLimit-Policy, RateLimit and Retry-After fields, the answers to a
// refusal or an error, Refund, Skip and the give-back between nested
// middlewares are httplimit's own, with the same Options.
//
// Its module is its own (github.com/chanlimit/chanlimit/ginlimit), so that
// only those who use Gin have it in their builds.
package ginlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// Middleware returns a gin.HandlerFunc that limits each request as
// httplimit.Middleware(r, opts) does, with the same Options and fields.
// The httplimit middleware is made once, here; each request goes through
// it with Gin's ResponseWriter and request:
//
//   - allowed (or skipped by Options.Skip), the request goes on down Gin's
//     chain with c.Request set to the request httplimit passes on, so that
//     httplimit.DecisionFrom(c.Request) and httplimit.KeyFrom(c.Request)
//     work in the handlers after this one, and a ginlimit middleware
//     after this one (a route's limit inside a global one) learns of this
//     one as nested httplimit middlewares do: the response carries both
//     routers' members, and a refusal by the inner one gives back what the
//     outer one took. c.Request stays so after the chain returns, for the
//     handlers before this one. With Options.Refund, httplimit notes the
//     status through a ResponseWriter of its own: while the chain runs,
//     c.Writer writes through it (Gin's Status, Size and Written stay
//     true), so that Refund sees the status the handlers after this one
//     wrote; c.Writer is Gin's own again once the chain returns.
//   - refused, or not decided (a key error, a closed router), the request
//     is answered by httplimit (Options.OnLimited or WriteLimited, 429;
//     Options.OnError or WriteError) and Gin's chain is aborted
//     (c.Abort): no handler after this one runs.
//
// It costs one allocation a request beyond httplimit's (one more with
// Options.Refund), which carries the request's gin.Context through
// httplimit to the chain.
func Middleware(r *chanlimit.Router, opts httplimit.Options) gin.HandlerFunc {
	limited := httplimit.Middleware(r, opts)(http.HandlerFunc(next))
	return func(c *gin.Context) {
		w := &writer{ResponseWriter: c.Writer, c: c}
		limited.ServeHTTP(w, c.Request)
		if !w.reached {
			c.Abort()
		}
	}
}

// writer is the ResponseWriter httplimit gets for a request: Gin's,
// which it writes its fields and answers to, with the request's
// gin.Context, for next to find.
type writer struct {
	gin.ResponseWriter
	c       *gin.Context
	reached bool // whether httplimit passed the request on: next ran
}

// Unwrap returns Gin's ResponseWriter, for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// errLost is the panic of next when the ResponseWriter httplimit passed
// on does not lead to the writer Middleware gave it: httplimit's own
// ResponseWriters unwrap to the one below (for http.ResponseController),
// so it cannot happen unless httplimit changes that.
var errLost = errors.New("ginlimit: httplimit passed on a ResponseWriter that does not unwrap to the one it was given")

// next is the handler inside httplimit's middleware: it continues Gin's
// chain of the request, with the request httplimit passed on and, if
// httplimit wrapped the ResponseWriter, with c.Writer writing through
// httplimit's.
func next(hw http.ResponseWriter, req *http.Request) {
	w := find(hw)
	if w == nil {
		panic(errLost)
	}
	w.reached = true
	c := w.c
	c.Request = req
	if hw == w {
		c.Next()
		return
	}
	c.Writer = &through{ResponseWriter: w.ResponseWriter, w: hw}
	defer func() { c.Writer = w.ResponseWriter }()
	c.Next()
}

// find returns the writer of Middleware that hw is, or wraps.
func find(hw http.ResponseWriter) *writer {
	for {
		switch x := hw.(type) {
		case *writer:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			hw = x.Unwrap()
		default:
			return nil
		}
	}
}

// through is Gin's ResponseWriter for the handlers after the middleware
// when httplimit wrapped the writer it was given (Options.Refund): what
// they write (status, headers, body) goes through httplimit's, which
// passes it on to Gin's; what Gin keeps of it (Status, Size, Written) and
// the rest of Gin's interface come from Gin's.
type through struct {
	gin.ResponseWriter                     // Gin's, below httplimit's
	w                  http.ResponseWriter // httplimit's
}

func (t *through) Header() http.Header               { return t.w.Header() }
func (t *through) WriteHeader(status int)            { t.w.WriteHeader(status) }
func (t *through) Write(p []byte) (int, error)       { return t.w.Write(p) }
func (t *through) WriteString(s string) (int, error) { return io.WriteString(t.w, s) }
func (t *through) Flush()                            { _ = http.NewResponseController(t.w).Flush() }
func (t *through) Unwrap() http.ResponseWriter       { return t.w }
func (t *through) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(t.w).Hijack()
}
