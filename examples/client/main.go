// Command client sends requests to a rate-limited API through an
// httplimit.Transport that listens to the server. The API (a server on
// 127.0.0.1, behind httplimit.Middleware) allows each client IP 2 requests
// a second; the client's own router guesses 10 a second, too generous, and
// learns the real pace from the server's answers:
//
//   - A neighbour (another program on this machine, the same client IP to
//     the server) has just spent this second's quota, so the client's
//     first request is refused: 429 with Retry-After. The Transport holds
//     its key (Router.Hold) for that wait and, Retries being set and a GET
//     being safe to send again, sends the request again once the hold is
//     over. The caller sees only the 200.
//   - From then on, each answer whose RateLimit field says the quota is
//     spent (a member with r=0) holds the key until the quota has more, so
//     the next request waits before it is sent, and the server has no
//     cause to refuse it.
//
// It prints each request: when it was sent (and sent again), what came
// back, and whether it waited for a hold first; then how the client paced
// itself. It runs on the real clock, in about 4 seconds:
//
//	go run ./examples/client
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/httplimit"
)

func main() {
	if _, err := run(context.Background(), clock.Real(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// requests is how many requests the client sends, one after another.
const requests = 8

// report is what a run saw.
type report struct {
	requests      int           // sent by the caller
	ok            int           // answered 200 to the caller
	refused       int           // answered otherwise to the caller
	serverRefused int           // refusals the server sent, retries' included
	held          int           // requests that waited for a hold before they were sent
	took          time.Duration // from the client's first request to its last answer
}

// run serves the API on 127.0.0.1, lets the neighbour spend its quota,
// then sends the client's requests, printing to out. Both routers read
// clk.
func run(ctx context.Context, clk clock.Clock, out io.Writer) (report, error) {
	var rep report
	api, err := chanlimit.New(chanlimit.Config{Clock: clk, Policies: []chanlimit.Policy{
		{Name: "per-second", Limit: 2, Window: time.Second},
	}})
	if err != nil {
		return rep, err
	}
	defer api.Close()
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello\n") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	srv := &http.Server{Handler: httplimit.Middleware(api, httplimit.Options{})(hello), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-served
	}()
	url := "http://" + ln.Addr().String() + "/hello"

	// One connection pool for both programs, closed at the end; no proxy.
	conns := &http.Transport{}
	defer conns.CloseIdleConnections()

	neighbour := &http.Client{Transport: conns}
	for range 2 {
		if _, err := get(ctx, neighbour, url); err != nil {
			return rep, err
		}
	}

	mine, err := chanlimit.New(chanlimit.Config{Clock: clk, Limit: 10, Window: time.Second})
	if err != nil {
		return rep, err
	}
	defer mine.Close()
	start := clk.Now()
	sends := &recorder{base: conns, clk: clk, start: start, sent: make(chan send, 4*requests)}
	client := &http.Client{Transport: &httplimit.Transport{
		Base:    sends,
		Router:  mine,
		Retries: 2, // GET is idempotent: a refused one may be sent again
	}}
	key := ln.Addr().String() // the Transport's key: the URL's host

	fmt.Fprintln(out, "server: 2 requests a second per client IP; client: 10 a second of its own")
	fmt.Fprintln(out, "a neighbour on this machine has just spent the server's quota for this second")
	fmt.Fprintln(out)
	const row = "%-9s  %-8s  %-7s  %-6v  %-11s  %s\n" // printed as each answer comes
	fmt.Fprintf(out, row, "request", "held for", "sent at", "answer", "Retry-After", "RateLimit")
	for i := 1; i <= requests; i++ {
		held := ""
		if d, err := mine.Peek(ctx, key, 1); err == nil && !d.Allowed && d.Policy == "" {
			// A denial no policy decided: the key is held on the server's word.
			held = seconds(d.RetryAfter)
			rep.held++
		}
		status, err := get(ctx, client, url)
		if err != nil {
			return rep, err
		}
		rep.requests++
		if status == http.StatusOK {
			rep.ok++
		} else {
			rep.refused++
		}
		for k, s := range sends.drain() {
			name := fmt.Sprint("#", i)
			if k > 0 { // sent again, once the hold its refusal set was over
				name += " again"
			}
			if s.status != http.StatusOK {
				rep.serverRefused++
			}
			fmt.Fprintf(out, row, name, held, seconds(s.at), s.status, s.retryAfter, s.rateLimit)
			held = ""
		}
	}
	rep.took = clk.Since(start)

	fmt.Fprintf(out, "\n%d requests in %s, %d refused to the caller: the server refused %d (each sent again after its Retry-After), and %d waited out a hold its RateLimit field set (r=0)\n",
		rep.requests, seconds(rep.took), rep.refused, rep.serverRefused, rep.held)
	return rep, nil
}

// seconds formats d in seconds, to a tenth.
func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// get sends a GET of url with client and returns the status it got, having
// read and closed the body.
func get(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// send is one request as it went to the server, and what came back.
type send struct {
	at         time.Duration // since the client's first request
	status     int
	retryAfter string
	rateLimit  string
}

// recorder is the Transport's Base: it notes each request it sends, the
// sends again included, on sent, then hands it to base. The requests go
// one after another, and each call's sends are all noted by the time it
// returns, for drain.
type recorder struct {
	base  http.RoundTripper
	clk   clock.Clock
	start time.Time
	sent  chan send // room for every send of a run: never full
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	at := r.clk.Since(r.start)
	resp, err := r.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	r.sent <- send{at, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit")}
	return resp, nil
}

// drain returns the sends noted since it was last called.
func (r *recorder) drain() []send {
	var out []send
	for {
		select {
		case s := <-r.sent:
			out = append(out, s)
		default:
			return out
		}
	}
}
