package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// countingServer is a real server on 127.0.0.1 that notes the requests it
// gets, by their "n" query value, in order.
func countingServer(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Query().Get("n"))
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// waitingOn returns once n callers wait in r's lines.
func waitingOn(t *testing.T, r *chanlimit.Router, n int) {
	t.Helper()
	for {
		st, err := r.Stats(context.Background())
		require.NoError(t, err)
		if st.Waiting == n {
			return
		}
		time.Sleep(time.Millisecond) // for the caller's goroutine to join the line: not the limiter's time
	}
}

// TestTransportWaitsInOrderPerHost: requests to one host go out at its
// rate, in the order they came, each sent once its turn has come; another
// host has a quota of its own.
func TestTransportWaitsInOrderPerHost(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
	srv, got := countingServer(t)
	other, otherGot := countingServer(t)
	client := &http.Client{Transport: &httplimit.Transport{Router: r}}
	get := func(url string) error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	require.NoError(t, get(srv.URL+"?n=0"))
	errs := make(chan error, 3)
	for i := 1; i <= 3; i++ {
		go func() { errs <- get(srv.URL + "?n=" + strconv.Itoa(i)) }()
		waitingOn(t, r, i) // each joins the line before the next is sent
	}
	require.NoError(t, get(other.URL+"?n=other"), "another host waits for nobody")
	assert.Equal(t, []string{"other"}, otherGot())
	assert.Equal(t, []string{"0"}, got(), "nothing is sent before its turn")
	for i := 1; i <= 3; i++ {
		clk.Advance(time.Second)
		require.NoError(t, <-errs)
		assert.Equal(t, strconv.Itoa(i), got()[i], "in the order they came")
	}
}

// TestTransportNeverSendsWhatItGivesUpOn: a request whose turn is past
// MaxWait fails at once, one whose context ends while it waits fails then,
// and neither is sent nor takes any quota; the body is closed.
func TestTransportNeverSendsWhatItGivesUpOn(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
	srv, got := countingServer(t)
	tr := &httplimit.Transport{Router: r, MaxWait: time.Second, Cost: func(req *http.Request) int {
		n, _ := strconv.Atoi(req.Header.Get("Cost"))
		return max(n, 1)
	}}
	client := &http.Client{Transport: tr}
	resp, err := client.Get(srv.URL + "?n=first")
	require.NoError(t, err)
	resp.Body.Close()

	body := &closeNoter{Reader: strings.NewReader("payload")}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"?n=late", body)
	require.NoError(t, err)
	_, err = client.Do(req)
	require.ErrorIs(t, err, httplimit.ErrNotSent)
	require.ErrorIs(t, err, context.DeadlineExceeded, "its turn is a minute away")
	assert.True(t, body.closed, "the body is closed, as a RoundTripper must")

	req, err = http.NewRequest(http.MethodGet, srv.URL+"?n=too-costly", nil)
	require.NoError(t, err)
	req.Header.Set("Cost", "2")
	_, err = client.Do(req)
	require.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)

	unbounded := &http.Client{Transport: &httplimit.Transport{Router: r}}
	ctx, cancel := context.WithCancel(context.Background())
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?n=cancelled", nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := unbounded.Do(req)
		done <- err
	}()
	waitingOn(t, r, 1)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	assert.Equal(t, []string{"first"}, got(), "nothing it gave up on was sent")
	clk.Advance(time.Minute)
	resp, err = client.Get(srv.URL + "?n=next")
	require.NoError(t, err, "what was given up took nothing: a minute on, the next has its unit")
	resp.Body.Close()
	assert.Equal(t, []string{"first", "next"}, got())

	_, err = (&http.Client{Transport: &httplimit.Transport{}}).Get(srv.URL)
	require.ErrorIs(t, err, httplimit.ErrNotSent)
	_, err = (&http.Client{Transport: &httplimit.Transport{Router: r, Key: func(*http.Request) (string, error) {
		return "", errors.New("no account")
	}}}).Get(srv.URL)
	require.ErrorIs(t, err, httplimit.ErrKey)
}

// closeNoter is a request body that notes whether it was closed.
type closeNoter struct {
	io.Reader
	closed bool
}

func (c *closeNoter) Close() error {
	c.closed = true
	return nil
}

// closeCounter is a RoundTripper that counts CloseIdleConnections.
type closeCounter struct {
	http.RoundTripper
	closed int
}

func (c *closeCounter) CloseIdleConnections() { c.closed++ }

// TestTransportClosesIdleConnections: an http.Client's
// CloseIdleConnections reaches Base through the Transport.
func TestTransportClosesIdleConnections(t *testing.T) {
	base := &closeCounter{RoundTripper: http.DefaultTransport}
	(&http.Client{Transport: &httplimit.Transport{Base: base}}).CloseIdleConnections()
	assert.Equal(t, 1, base.closed)
}
