package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// A Transport that listens: the tests here send through a real server
// on 127.0.0.1 that answers as it is told, each request in turn.

// answer is how the scripted server answers one request.
type answer struct {
	status int
	header []string // name, value, ...
}

// scripted is a real server that answers its requests in the order of
// its script (the last answer again past its end), and notes what it got.
type scripted struct {
	*httptest.Server
	mu     sync.Mutex
	script []answer
	got    []string // each request's method and body
	before func()   // if set, called before each answer
}

func newScripted(t *testing.T, script ...answer) *scripted {
	t.Helper()
	s := &scripted{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		a := s.script[min(len(s.got), len(s.script)-1)]
		s.got = append(s.got, r.Method+" "+string(body))
		before := s.before
		s.mu.Unlock()
		if before != nil {
			before()
		}
		for i := 0; i+1 < len(a.header); i += 2 {
			w.Header().Add(a.header[i], a.header[i+1])
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, http.StatusText(a.status))
	}))
	t.Cleanup(s.Close)
	return s
}

// requests returns what the server got, in order.
func (s *scripted) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

var (
	tooMany = func(header ...string) answer { return answer{http.StatusTooManyRequests, header} }
	ok      = answer{status: http.StatusOK}
)

// send sends a request through client and returns its status and body.
func send(t *testing.T, client *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func newReq(t *testing.T, method, url, body string, header ...string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return req
}

// heldFor returns how long r holds key, from now: the wait of a Peek
// that its policies would allow.
func heldFor(t *testing.T, r *chanlimit.Router, key string) time.Duration {
	t.Helper()
	d, err := r.Peek(context.Background(), key, 1)
	require.NoError(t, err)
	if d.Allowed {
		return 0
	}
	return d.RetryAfter
}

// TestTransportHoldsOnTheServersWord: a refusal's wait holds the key, so
// the next request waits for it, and the server sees nothing meanwhile;
// the refusal itself comes back as it came.
func TestTransportHoldsOnTheServersWord(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
	srv := newScripted(t, tooMany("Retry-After", "2"), ok)
	client := &http.Client{Transport: &httplimit.Transport{Router: r}}
	key := strings.TrimPrefix(srv.URL, "http://")

	status, body := send(t, client, newReq(t, "GET", srv.URL, ""))
	assert.Equal(t, 429, status, "returned as it came")
	assert.Equal(t, "Too Many Requests", body)
	assert.Equal(t, 2*time.Second, heldFor(t, r, key))

	done := make(chan int, 1)
	go func() {
		status, _ := send(t, client, newReq(t, "GET", srv.URL, ""))
		done <- status
	}()
	waitingOn(t, r, 1)
	clk.Advance(2*time.Second - time.Nanosecond)
	assert.Equal(t, 1, waitingFor(t, r), "1ns before the hold's end it still waits")
	assert.Len(t, srv.requests(), 1, "the server saw nothing while the key was held")
	clk.Advance(time.Nanosecond)
	assert.Equal(t, 200, <-done)
	assert.Len(t, srv.requests(), 2)
}

// waitingFor returns Stats.Waiting.
func waitingFor(t *testing.T, r *chanlimit.Router) int {
	t.Helper()
	st, err := r.Stats(context.Background())
	require.NoError(t, err)
	return st.Waiting
}

// TestTransportWhatHolds: which answers hold, for how long, and which
// do not.
func TestTransportWhatHolds(t *testing.T) {
	date := "Sun, 06 Dec 2026 20:00:00 GMT"
	for _, c := range []struct {
		name    string
		answer  answer
		maxHold time.Duration
		ignore  bool
		want    time.Duration
	}{
		{"429 Retry-After seconds", tooMany("Retry-After", "7"), 0, false, 7 * time.Second},
		{"429 Retry-After date", tooMany("Date", date, "Retry-After", "Sun, 06 Dec 2026 20:01:30 GMT"), 0, false, 90 * time.Second},
		{"503 Retry-After", answer{503, []string{"Retry-After", "3"}}, 0, false, 3 * time.Second},
		{"503 bare", answer{status: 503}, 0, false, 0},
		{"429 bare", tooMany(), 0, false, 0},
		{"RateLimit r=0 on a 200", answer{200, []string{"RateLimit", `"day";r=0;t=40, "second";r=5;t=1`}}, 0, false, 40 * time.Second},
		{"the longest of them", tooMany("Retry-After", "2", "RateLimit", `"minute";r=0;t=50`), 0, false, 50 * time.Second},
		{"malformed", tooMany("Retry-After", "soon", "RateLimit", `"minute";r=0;t=-5`), 0, false, 0},
		{"Retry-After twice", tooMany("Retry-After", "2", "Retry-After", "3"), 0, false, 0},
		{"capped by the default MaxHold", tooMany("Retry-After", "86400"), 0, false, httplimit.DefaultMaxHold},
		{"capped by MaxHold", tooMany("Retry-After", "60"), 10 * time.Second, false, 10 * time.Second},
		{"MaxHold capped at MaxServerHold", tooMany("Retry-After", "86400"), 48 * time.Hour, false, httplimit.MaxServerHold},
		{"IgnoreServer", tooMany("Retry-After", "7"), 0, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
			srv := newScripted(t, c.answer)
			retries := 0 // a refusal that holds would be sent again at the hold's end, on a clock that never moves here
			if c.want == 0 || c.answer.status == 200 {
				retries = 3 // none is: nothing to wait for, or no refusal
			}
			client := &http.Client{Transport: &httplimit.Transport{Router: r, MaxHold: c.maxHold, IgnoreServer: c.ignore, Retries: retries}}
			status, _ := send(t, client, newReq(t, "GET", srv.URL, ""))
			assert.Equal(t, c.answer.status, status)
			assert.Equal(t, c.want, heldFor(t, r, strings.TrimPrefix(srv.URL, "http://")))
			if c.want == 0 {
				assert.Len(t, srv.requests(), 1, "no wait asked for: not sent again")
			}
		})
	}
}

// TestTransportRetriesAfterTheHold: a request that may be sent again is,
// at the hold's end and not before, each body sent whole and closed once;
// one that may not comes back refused, sent once.
func TestTransportRetriesAfterTheHold(t *testing.T) {
	for _, c := range []struct {
		name    string
		method  string
		body    string
		header  []string
		getBody bool // the request can make its body again
		resent  bool
	}{
		{"GET", "GET", "", nil, false, true},
		{"PUT with GetBody", "PUT", "put", nil, true, true},
		{"POST with an Idempotency-Key", "POST", "post", []string{"Idempotency-Key", `"8e03978e"`}, true, true},
		{"POST", "POST", "post", nil, true, false},
		{"PUT whose body cannot be had again", "PUT", "put", nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, clk := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
			srv := newScripted(t, tooMany("Retry-After", "3"), ok)
			client := &http.Client{Transport: &httplimit.Transport{Router: r, Retries: 2}}
			req := newReq(t, c.method, srv.URL, "", c.header...)
			var bodies []*closeCount
			if c.body != "" {
				body := func() (io.ReadCloser, error) {
					b := &closeCount{Reader: strings.NewReader(c.body)}
					bodies = append(bodies, b)
					return b, nil
				}
				req.Body, _ = body()
				if c.getBody {
					req.GetBody = body
				}
			}
			done := make(chan int, 1)
			go func() {
				status, _ := send(t, client, req)
				done <- status
			}()
			if !c.resent {
				assert.Equal(t, 429, <-done, "returned as it came")
				assert.Len(t, srv.requests(), 1)
			} else {
				waitingOn(t, r, 1)
				clk.Advance(3*time.Second - time.Nanosecond)
				assert.Len(t, srv.requests(), 1, "not before the hold's end")
				clk.Advance(time.Nanosecond)
				assert.Equal(t, 200, <-done)
				want := c.method + " " + c.body
				assert.Equal(t, []string{want, want}, srv.requests())
			}
			for i, b := range bodies {
				assert.Equal(t, int32(1), b.closed.Load(), "body %d closed once", i)
			}
		})
	}
}

// closeCount is a body that counts its closes.
type closeCount struct {
	*strings.Reader
	closed atomic.Int32
}

func (c *closeCount) Close() error { c.closed.Add(1); return nil }

// TestTransportRetriesWithinBounds: a request is not sent again if its
// turn would come past MaxWait or its context's deadline, nor more than
// Retries times; the last refusal comes back.
func TestTransportRetriesWithinBounds(t *testing.T) {
	t.Run("MaxWait", func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
		srv := newScripted(t, tooMany("Retry-After", "5"), ok)
		client := &http.Client{Transport: &httplimit.Transport{Router: r, Retries: 1, MaxWait: 4 * time.Second}}
		status, _ := send(t, client, newReq(t, "GET", srv.URL, ""))
		assert.Equal(t, 429, status)
		assert.Len(t, srv.requests(), 1)
	})
	t.Run("Deadline", func(t *testing.T) {
		r, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
		srv := newScripted(t, tooMany("Retry-After", "60"), ok)
		client := &http.Client{Transport: &httplimit.Transport{Router: r, Retries: 1}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		status, _ := send(t, client, newReq(t, "GET", srv.URL, "").WithContext(ctx))
		assert.Equal(t, 429, status)
		assert.Len(t, srv.requests(), 1)
	})
	t.Run("Retries", func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
		srv := newScripted(t, tooMany("Retry-After", "1", "X-Try", "last"))
		client := &http.Client{Transport: &httplimit.Transport{Router: r, Retries: 2}}
		done := make(chan int, 1)
		go func() {
			status, _ := send(t, client, newReq(t, "GET", srv.URL, ""))
			done <- status
		}()
		for range 2 {
			waitingOn(t, r, 1)
			clk.Advance(time.Second)
		}
		assert.Equal(t, 429, <-done)
		assert.Len(t, srv.requests(), 3, "the first, and two more")
	})
}

// TestTransportHoldSharedAcrossClients: a hold set by one client's
// refusal makes every client on the router wait, whatever they send.
func TestTransportHoldSharedAcrossClients(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
	srv := newScripted(t, tooMany("Retry-After", "2"), ok)
	one := &http.Client{Transport: &httplimit.Transport{Router: r}}
	other := &http.Client{Transport: &httplimit.Transport{Router: r}}
	status, _ := send(t, one, newReq(t, "GET", srv.URL, ""))
	require.Equal(t, 429, status)
	done := make(chan int, 1)
	go func() {
		status, _ := send(t, other, newReq(t, "POST", srv.URL, "x"))
		done <- status
	}()
	waitingOn(t, r, 1)
	clk.Advance(2 * time.Second)
	assert.Equal(t, 200, <-done)
	assert.Equal(t, []string{"GET ", "POST x"}, srv.requests())
}

// TestTransportRetriesOnlyAfterAHold: a request is sent again only after
// a hold that was made: if the router cannot hold the key, the refusal
// comes back as it came, sent once. (Here the key is new again when the
// refusal comes, Reset while the request was out, and the one hold
// MaxKeys leaves room for is another key's.)
func TestTransportRetriesOnlyAfterAHold(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second, MaxKeys: 1, Partitions: 1})
	require.NoError(t, r.Hold(context.Background(), "elsewhere", time.Hour))
	srv := newScripted(t, tooMany("Retry-After", "1"), ok)
	client := &http.Client{Transport: &httplimit.Transport{Router: r, Retries: 3}}
	key := strings.TrimPrefix(srv.URL, "http://")
	srv.mu.Lock()
	srv.before = func() { _ = r.Reset(context.Background(), key) }
	srv.mu.Unlock()
	status, _ := send(t, client, newReq(t, "GET", srv.URL, ""))
	assert.Equal(t, 429, status)
	assert.Len(t, srv.requests(), 1, "not sent again at once")
}
