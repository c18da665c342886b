// Command httpserver serves an API behind chanlimit's HTTP middleware:
// each client IP is under two policies at once (5 requests a second, 60
// a minute), and a tenant that names itself in the X-Tenant header is
// under its own quota instead, with the tenant "acme" given a larger one
// by an override. Every response carries the RateLimit-Policy and
// RateLimit fields of the IETF draft; a refusal is a 429 with Retry-After
// and a problem+json body.
//
// It first sends itself a few requests and prints what came back, then
// serves until interrupted, so that you can try it with curl:
//
//	go run ./examples/httpserver
//	curl -i http://127.0.0.1:8080/hello
//	curl -i -H 'X-Tenant: acme' http://127.0.0.1:8080/hello
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
	"github.com/chanlimit/chanlimit/httplimit"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "the address to serve on (port 0: any free one)")
	demoOnly := flag.Bool("demo-only", false, "exit after the demo's own requests")
	flag.Parse()
	if err := run(*addr, *demoOnly); err != nil {
		log.Fatal(err)
	}
}

// key keys a request by its tenant if it names one, and by its client IP
// otherwise; the prefixes keep the two kinds of key apart.
func key(r *http.Request) (string, error) {
	if tenant := r.Header.Get("X-Tenant"); tenant != "" {
		return "tenant:" + tenant, nil
	}
	ip, err := httplimit.KeyByIP(r)
	return "ip:" + ip, err
}

func run(addr string, demoOnly bool) error {
	r, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "per-second", Limit: 5, Window: time.Second},
		{Name: "per-minute", Algorithm: "sliding_window_counter", Limit: 60, Window: time.Minute},
	}})
	if err != nil {
		return err
	}
	defer r.Close()
	// acme pays for more: 50 a second, 2,000 a minute.
	err = r.SetOverride(context.Background(), "tenant:acme",
		chanlimit.Policy{Name: "acme-per-second", Limit: 50, Window: time.Second},
		chanlimit.Policy{Name: "acme-per-minute", Algorithm: "sliding_window_counter", Limit: 2000, Window: time.Minute})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") })
	handler := httplimit.Middleware(r, httplimit.Options{Key: key})(mux)

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
		fmt.Printf("\nserving on %s until interrupted; try:\n  curl -i %s\n  curl -i -H 'X-Tenant: acme' %s\n", ln.Addr(), url, url)
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

// demo sends 7 requests as a client with no tenant (only 5 pass in one
// second) and 2 as the tenant acme, and prints the status and fields of
// each.
func demo(url string) {
	for i := range 9 {
		tenant := ""
		if i >= 7 {
			tenant = "acme"
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			log.Fatal(err)
		}
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		who := "client 127.0.0.1"
		if tenant != "" {
			who = "tenant " + tenant
		}
		fmt.Printf("%-17s %s\n", who, resp.Status)
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
