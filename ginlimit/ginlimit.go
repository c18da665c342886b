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
//     outer one took, whatever c.Writer wrappers lie between them (they
//     know each other by the gin.Context). A request Gin serves again on
//     its gin.Context (engine.HandleContext) is limited once by each. c.Request stays so after the chain returns, for the
//     handlers before this one. With Options.Refund, httplimit notes the
//     status through a ResponseWriter of its own: while the chain runs,
//     c.Writer writes through it (Gin's Status, Size and Written stay
//     true), so that Refund sees the status the client gets: the last one
//     set before the body, as Gin sends it, or Gin's 404 or 405 for a
//     route it has none for; c.Writer is Gin's own again once the chain
//     returns.
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

// Unwrap returns the request's exchange: the writer below w that stands
// for the gin.Context. Every ginlimit middleware on one gin.Context
// unwraps to the same, so httplimit knows them for one exchange (nested:
// the inner one gives back to the outer one on a refusal) whatever
// c.Writer wrappers a middleware between them added (a body logger,
// gzip), which unwrap to nothing. http.ResponseController finds the
// methods it asks for (Flush, Hijack) on w itself, from Gin's writer.
func (w *writer) Unwrap() http.ResponseWriter { return exchange{w.c} }

// exchange is the writer of a gin.Context as httplimit sees it below a
// ginlimit middleware's: c.Writer as it is when asked. It has no Unwrap:
// two are the same exchange when their gin.Contexts are.
type exchange struct{ c *gin.Context }

func (e exchange) Header() http.Header         { return e.c.Writer.Header() }
func (e exchange) Write(p []byte) (int, error) { return e.c.Writer.Write(p) }
func (e exchange) WriteHeader(status int)      { e.c.Writer.WriteHeader(status) }

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
	t := &through{ResponseWriter: w.ResponseWriter, w: hw}
	c.Writer = t
	defer func() { c.Writer = w.ResponseWriter }()
	c.Next()
	// Gin answers a route it has none for (404, 405) after the chain,
	// with the status it set before it; a handler that wrote nothing is
	// answered with the status it set. httplimit's writer is told it
	// now, for Refund: Gin's WriteHeader, below it, sends nothing.
	t.commit()
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
// they write goes through httplimit's, which passes it on to Gin's, so
// that httplimit notes the status. Gin's WriteHeader only sets the
// status, and the last one set before the body is the one sent: through
// sets Gin's, and tells httplimit's the status once, as Gin sends it
// (the first write, WriteHeaderNow, Flush or Hijack), or once the chain
// has returned (commit). What Gin keeps of it (Status, Size, Written) and
// the rest of Gin's interface come from Gin's.
type through struct {
	gin.ResponseWriter                     // Gin's, below httplimit's
	w                  http.ResponseWriter // httplimit's
	told               bool                // whether httplimit's was told the status
}

// commit tells httplimit's writer the status Gin has, once.
func (t *through) commit() {
	if !t.told {
		t.told = true
		t.w.WriteHeader(t.ResponseWriter.Status())
	}
}

func (t *through) WriteHeader(status int) { t.ResponseWriter.WriteHeader(status) }
func (t *through) WriteHeaderNow()        { t.commit(); t.ResponseWriter.WriteHeaderNow() }
func (t *through) Header() http.Header    { return t.w.Header() }
func (t *through) Write(p []byte) (int, error) {
	t.commit()
	return t.w.Write(p)
}
func (t *through) WriteString(s string) (int, error) {
	t.commit()
	return io.WriteString(t.w, s)
}
func (t *through) Flush() {
	t.commit()
	_ = http.NewResponseController(t.w).Flush()
}
func (t *through) Unwrap() http.ResponseWriter { return t.w }
func (t *through) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	t.commit()
	return http.NewResponseController(t.w).Hijack()
}
