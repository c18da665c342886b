// Command httpserver serves an API behind chanlimit's HTTP middleware:
// each client IP is under two policies at once (5 requests a second, 60
// a minute), and a request with an API key the server knows is under its
// tenant's quota instead, with the tenant "acme" given a larger one by an
// override. Every response carries the RateLimit-Policy and RateLimit
// fields of the IETF draft; a refusal is a 429 with Retry-After and a
// problem+json body. POST /login counts failed logins only: 3 per user in
// 15 minutes, a login that succeeds given back (Options.Refund).
//
// The tenant comes only from a credential the server checks (here, a map
// of demo API keys; in a real server, a key in its database or a signed
// token), never from what a client merely says: were the tenant taken
// from a header as it comes, any client could skip its per-IP limit by
// naming a fresh tenant with each request. A request with no key, or with
// one the server does not know, is keyed by its IP.
//
// It first sends itself a few requests and prints what came back, then
// serves until interrupted, so that you can try it with curl:
//
//	go run ./examples/httpserver
//	curl -i http://127.0.0.1:8080/hello
//	curl -i -H 'X-Api-Key: demo-key-acme' http://127.0.0.1:8080/hello
//	curl -i -d user=ann -d password=guess http://127.0.0.1:8080/login
//
// Meanwhile its operators' page (httplimit.DebugHandler) shows the API's
// router live, on an admin server of its own that only this machine
// reaches: open http://127.0.0.1:6060/debug/chanlimit in a browser.
//
// With -demo-only it exits after its own requests.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/httplimit"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "the address to serve on (port 0: any free one)")
	adminAddr := flag.String("admin", "127.0.0.1:6060", "the address to serve the operators' page on, never a public one (\"\": none)")
	demoOnly := flag.Bool("demo-only", false, "exit after the demo's own requests")
	flag.Parse()
	if err := run(*addr, *adminAddr, *demoOnly); err != nil {
		log.Fatal(err)
	}
}

// apiKeys are the API keys the server accepts, each with its tenant. A
// real server checks a key in its database, or a signed token.
var apiKeys = map[string]string{
	"demo-key-acme":   "acme",
	"demo-key-globex": "globex",
}

// key keys a request by the tenant of its API key if the server knows the
// key, and by its client IP otherwise (no key, or one the server does not
// know); the prefixes keep the two kinds of key apart.
func key(r *http.Request) (string, error) {
	if tenant, ok := apiKeys[r.Header.Get("X-Api-Key")]; ok {
		return "tenant:" + tenant, nil
	}
	ip, err := httplimit.KeyByIP(r)
	return "ip:" + ip, err
}

// passwords are the demo's users. A real server checks a password hash.
var passwords = map[string]string{"ann": "correct-horse"}

// login answers 204 No Content to a user's right password, and 401
// Unauthorized to anything else.
func login(w http.ResponseWriter, r *http.Request) {
	if want, ok := passwords[r.PostFormValue("user")]; ok && r.PostFormValue("password") == want {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Error(w, "wrong user or password", http.StatusUnauthorized)
}

// byUser keys a login by the user it is for.
func byUser(r *http.Request) (string, error) {
	user := r.PostFormValue("user")
	if user == "" {
		return "", httplimit.ErrNoKey
	}
	return "user:" + user, nil
}

// newHandler returns the server's handler, on routers that read clk
// (nil: the real clock), the handler of its operators' page, and a
// function that closes the routers.
func newHandler(clk clock.Clock) (api, admin http.Handler, closeAll func(), err error) {
	r, err := chanlimit.New(chanlimit.Config{Clock: clk, Policies: []chanlimit.Policy{
		{Name: "per-second", Limit: 5, Window: time.Second},
		{Name: "per-minute", Algorithm: "sliding_window_counter", Limit: 60, Window: time.Minute},
	}})
	if err != nil {
		return nil, nil, nil, err
	}
	// Logins have a router of their own: 3 failed logins per user in any
	// 15 minutes. Each login takes a unit, and one that succeeds gives it
	// back, so only the failures count.
	logins, err := chanlimit.New(chanlimit.Config{Clock: clk, Policies: []chanlimit.Policy{
		{Name: "failed-logins", Algorithm: "sliding_window_log", Limit: 3, Window: 15 * time.Minute},
	}})
	if err != nil {
		r.Close()
		return nil, nil, nil, err
	}
	closeAll = func() {
		r.Close()
		logins.Close()
	}
	// acme pays for more: 50 a second, 2,000 a minute.
	err = r.SetOverride(context.Background(), "tenant:acme",
		chanlimit.Policy{Name: "acme-per-second", Limit: 50, Window: time.Second},
		chanlimit.Policy{Name: "acme-per-minute", Algorithm: "sliding_window_counter", Limit: 2000, Window: time.Minute})
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") })
	failedOnly := httplimit.Middleware(logins, httplimit.Options{
		Key:    byUser,
		Refund: func(_ *http.Request, status int) bool { return status < 400 }, // a login that succeeds counts for nothing
	})
	mux.Handle("POST /login", failedOnly(http.HandlerFunc(login)))
	adminMux := http.NewServeMux()
	adminMux.Handle("GET /debug/chanlimit", httplimit.DebugHandler(r))
	return httplimit.Middleware(r, httplimit.Options{Key: key})(mux), localOnly(adminMux), closeAll, nil
}

// localOnly answers only the requests that name this machine in their
// Host field: a web page an operator opens elsewhere can have its own
// name lead to 127.0.0.1 (DNS rebinding), but not its requests name
// 127.0.0.1.
func localOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if host != "127.0.0.1" && host != "::1" && host != "localhost" {
			http.Error(w, "this server answers only requests for 127.0.0.1 or localhost", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func run(addr, adminAddr string, demoOnly bool) error {
	handler, admin, closeAll, err := newHandler(nil)
	if err != nil {
		return err
	}
	defer closeAll()

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w (pick another with -addr, or -addr 127.0.0.1:0 for any free port)", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/hello"

	demo(url)
	if !demoOnly {
		fmt.Printf("\nserving on %s until interrupted; try:\n  curl -i %s\n  curl -i -H 'X-Api-Key: demo-key-acme' %s\n", ln.Addr(), url, url)
		if adminAddr != "" {
			adminLn, err := net.Listen("tcp", adminAddr)
			if err != nil {
				return fmt.Errorf("%w (pick another with -admin, or -admin '' for none)", err)
			}
			adminSrv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = adminSrv.Serve(adminLn) }()
			defer adminSrv.Close()
			fmt.Printf("and the operators' page on http://%s/debug/chanlimit\n", adminLn.Addr())
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		select {
		case <-ctx.Done():
		case err := <-served:
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}

// demo sends 6 requests with no API key (only 5 pass in one second), 1
// with a key the server does not know (keyed by the client's IP too, so
// refused as well) and 2 with acme's key, and prints the status and
// fields of each.
func demo(url string) {
	for i := range 9 {
		apiKey, who := "", "no API key"
		switch {
		case i == 6:
			apiKey, who = "made-up", "an unknown key"
		case i >= 7:
			apiKey, who = "demo-key-acme", "acme's key"
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			log.Fatal(err)
		}
		if apiKey != "" {
			req.Header.Set("X-Api-Key", apiKey)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%-15s %s\n", who, resp.Status)
		for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := resp.Header.Get(name); v != "" {
				fmt.Printf("  %s: %s\n", name, v)
			}
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			fmt.Printf("  %s\n", strings.TrimSpace(string(body)))
		}
	}
}
