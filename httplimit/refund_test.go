package httplimit_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// TestRefundThroughARealServer: the server's own failures are given back,
// so only the requests that succeed count against the client.
func TestRefundThroughARealServer(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Hour})
	var statuses []int
	mw := httplimit.Middleware(r, httplimit.Options{
		Cost: func(*http.Request) int { return 1 },
		Refund: func(_ *http.Request, status int) bool {
			statuses = append(statuses, status) // one request at a time: no race
			return status >= 500
		},
	})
	mux := http.NewServeMux()
	mux.Handle("GET /fail", mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "upstream down", http.StatusBadGateway)
	})))
	mux.Handle("GET /ok", mw(hello))
	mux.Handle("GET /silent", mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := srv.Client()

	for i := range 5 {
		resp, _ := get(t, client, srv.URL+"/fail")
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, "failure %d: given back, never limited", i)
	}
	resp, _ := get(t, client, srv.URL+"/silent")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, body := get(t, client, srv.URL+"/ok")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "hello\n", string(body))
	resp, _ = get(t, client, srv.URL+"/ok")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the two that succeeded counted")
	assert.Equal(t, []int{502, 502, 502, 502, 502, 200, 200}, statuses, "Refund is told each allowed request's status, 200 when none was written; not the refusal's")
}

// TestRefundPassesFlushAndHijack: with Refund set, a handler still finds
// the http.Flusher and http.Hijacker of the server's ResponseWriter.
func TestRefundPassesFlushAndHijack(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Hour})
	statuses := make(chan int, 2)
	mw := httplimit.Middleware(r, httplimit.Options{Refund: func(_ *http.Request, status int) bool {
		statuses <- status
		return true
	}})
	mux := http.NewServeMux()
	mux.Handle("GET /stream", mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "one\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "two\n")
	})))
	mux.Handle("GET /raw", mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if !assert.NoError(t, err) {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
		_ = buf.Flush()
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, body := get(t, srv.Client(), srv.URL+"/stream")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "one\ntwo\n", string(body))
	assert.Equal(t, http.StatusOK, <-statuses)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /raw HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1 204 No Content\r\n", line)
	assert.Equal(t, http.StatusOK, <-statuses, "a hijacked connection wrote no status through the ResponseWriter")
}

// TestWriteLimited: an OnLimited that notes the refusal and delegates
// answers exactly as the default does; outside OnLimited, WriteLimited
// answers 500.
func TestWriteLimited(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
	var noted []string
	answers := map[string]*httptest.ResponseRecorder{}
	for _, name := range []string{"default", "delegating"} {
		opts := httplimit.Options{Key: func(*http.Request) (string, error) { return name, nil }}
		if name == "delegating" {
			opts.OnLimited = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				d, _ := httplimit.DecisionFrom(req)
				noted = append(noted, d.Policy)
				httplimit.WriteLimited(w, req)
			})
		}
		h := httplimit.Middleware(r, opts)(hello)
		h.ServeHTTP(httptest.NewRecorder(), request("192.0.2.1:1"))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, request("192.0.2.1:1"))
		answers[name] = w
	}
	assert.Equal(t, []string{"default"}, noted)
	assert.Equal(t, http.StatusTooManyRequests, answers["default"].Code)
	assert.Equal(t, answers["default"].Code, answers["delegating"].Code)
	assert.Equal(t, answers["default"].Header(), answers["delegating"].Header())
	assert.Equal(t, answers["default"].Body.String(), answers["delegating"].Body.String())

	w := httptest.NewRecorder()
	httplimit.WriteLimited(w, request("192.0.2.1:1"))
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.True(t, strings.HasPrefix(w.Header().Get("Content-Type"), "application/problem+json"))
}
