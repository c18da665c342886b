package httplimit

import (
	"bufio"
	"net"
	"net/http"
)

// statusWriter is the ResponseWriter a handler gets when Options.Refund
// is set: it notes the status written, for Refund.
type statusWriter struct {
	http.ResponseWriter
	status int // the first final status written; 0 while none is
}

// written returns the status the handler wrote, 200 if none.
func (w *statusWriter) written() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 && status >= 200 { // 1xx informational answers come before the final one
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap returns the ResponseWriter below, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes the ResponseWriter below, if it can: for handlers that
// stream, and ask for an http.Flusher.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands over the connection of the ResponseWriter below, if it
// can: for handlers that take it (WebSockets), and ask for an
// http.Hijacker.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}
