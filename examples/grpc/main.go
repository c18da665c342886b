// Command grpc shows chanlimit on both sides of a gRPC call, in one
// program on 127.0.0.1: a server that limits each client to 2 calls a
// second (gRPC's health service stands for any service), whose refusal
// carries the exact wait in a google.rpc.RetryInfo and the policy the call
// exceeded in a google.rpc.QuotaFailure; and a client that waits its turn
// (2 a second, one at a time) before it sends each call, so that it is
// never refused.
//
// The server registers gRPC server reflection, so that tools such as
// grpcurl can list and describe its services. With -serve, after its
// demo, it serves until interrupted (SIGINT or SIGTERM), so that you can
// point grpcurl at it, as you point curl at examples/httpserver:
//
//	cd examples/grpc && go run .    (a module of its own: the demo alone)
//	cd examples/grpc && go run . -serve -addr 127.0.0.1:50051
//	grpcurl -plaintext 127.0.0.1:50051 list
//	grpcurl -plaintext 127.0.0.1:50051 describe grpc.health.v1.Health
//	for i in 1 2 3; do grpcurl -plaintext 127.0.0.1:50051 grpc.health.v1.Health/Check; done
//
// It serves on 127.0.0.1 only: reflection tells anyone who reaches it
// what it serves, and its limits are a demo's.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/grpclimit"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "the address to serve on, on 127.0.0.1 only (port 0: any free one)")
	serveOn := flag.Bool("serve", false, "after the demo, serve until interrupted (for grpcurl)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout, *addr, *serveOn)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// run starts the server on addr, runs the demo against it, printing to
// out, and with serveOn serves on until ctx ends.
func run(ctx context.Context, out io.Writer, addr string, serveOn bool) error {
	s, err := start(addr, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := demo(ctx, out, s.Addr()); err != nil {
		return err
	}
	if !serveOn {
		return nil
	}
	fmt.Fprintf(out, "\nserving on %s until interrupted; try:\n", s.Addr())
	fmt.Fprintf(out, "  grpcurl -plaintext %s list\n", s.Addr())
	fmt.Fprintf(out, "  grpcurl -plaintext %s describe grpc.health.v1.Health\n", s.Addr())
	fmt.Fprintf(out, "  for i in 1 2 3; do grpcurl -plaintext %s grpc.health.v1.Health/Check; done\n", s.Addr())
	select {
	case <-ctx.Done():
		return nil
	case <-s.done:
		return s.err
	}
}

// server is the example's gRPC server, serving on a listener of its own
// until Close.
type server struct {
	srv  *grpc.Server
	r    *chanlimit.Router
	ln   net.Listener
	done chan struct{} // closed once Serve has returned
	err  error         // Serve's error, once done is closed
}

// start starts the example's server on addr, which must be on 127.0.0.1,
// with its router on clk (nil: the real clock): 2 calls a second per
// client address, each unary call decided by grpclimit's interceptor, its
// refusals' QuotaFailure without the key (Options.SubjectKey unset: the
// key is the client's address). Streams are not limited, which leaves
// reflection (a stream) and the health service's Watch free.
func start(addr string, clk clock.Clock) (*server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-addr %q: %w", addr, err)
	}
	if host != "127.0.0.1" {
		return nil, fmt.Errorf("-addr %q: the example serves on 127.0.0.1 only", addr)
	}
	r, err := chanlimit.New(chanlimit.Config{Clock: clk, Policies: []chanlimit.Policy{{Name: "per-second", Limit: 2, Window: time.Second}}})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("%w (pick another with -addr, or -addr 127.0.0.1:0 for any free port)", err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(r, grpclimit.Options{})))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	s := &server{srv: srv, r: r, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = srv.Serve(ln)
	}()
	return s, nil
}

// Addr returns the address s serves on.
func (s *server) Addr() string { return s.ln.Addr().String() }

// Close stops s, ending its calls, and closes its router.
func (s *server) Close() {
	s.srv.Stop()
	<-s.done
	s.r.Close()
}

// demo calls the server at addr as a client that does not wait, then as
// one that waits its turn, and prints what each call got.
func demo(ctx context.Context, out io.Writer, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	fmt.Fprintln(out, "A client that does not wait: 3 calls at once")
	for i := 1; i <= 3; i++ {
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		fmt.Fprintf(out, "  call %d: %s; ratelimit: %s\n", i, describe(err), header.Get("ratelimit"))
	}

	// A client that waits its turn: the server's rate, 2 a second, one
	// call at a time, so that the server never refuses it.
	clientLimit, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Burst: 1})
	if err != nil {
		return err
	}
	defer clientLimit.Close()
	paced, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(clientLimit, grpclimit.Options{MaxWait: time.Second})))
	if err != nil {
		return err
	}
	defer paced.Close()
	select { // the demo's own pause: the first client's second passes
	case <-time.After(time.Second):
	case <-ctx.Done():
		return nil
	}
	fmt.Fprintln(out, "A client that waits its turn, 2 a second, one at a time: 4 calls")
	start := time.Now()
	for i := 1; i <= 4; i++ {
		_, err := healthpb.NewHealthClient(paced).Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Fprintf(out, "  call %d after %3d ms: %s\n", i, time.Since(start).Round(100*time.Millisecond).Milliseconds(), describe(err))
	}
	return nil
}

// describe says what a call's error was, with its RetryInfo and the
// quotas its QuotaFailure names.
func describe(err error) string {
	if err == nil {
		return "OK"
	}
	st := status.Convert(err)
	s := fmt.Sprintf("%s (%s)", st.Code(), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			s += fmt.Sprintf(", retry in %v", d.GetRetryDelay().AsDuration().Round(time.Millisecond))
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				s += fmt.Sprintf(", quota %q of %d exceeded", v.GetQuotaId(), v.GetQuotaValue())
			}
		}
	}
	return s
}
