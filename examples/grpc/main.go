// Command grpc shows chanlimit on both sides of a gRPC call, in one
// program on 127.0.0.1: a server that limits each client to 2 calls a
// second (gRPC's health service stands for any service), whose refusal
// carries the exact wait in a google.rpc.RetryInfo; and a client that
// waits its turn (2 a second, one at a time) before it sends each call,
// so that it is never refused.
//
//	cd examples/grpc && go run .    (a module of its own)
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/grpclimit"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	// The server: 2 calls a second per client address.
	serverLimit, err := chanlimit.New(chanlimit.Config{Policies: []chanlimit.Policy{{Name: "per-second", Limit: 2, Window: time.Second}}})
	if err != nil {
		return err
	}
	defer serverLimit.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(serverLimit, grpclimit.Options{})))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()

	fmt.Println("A client that does not wait: 3 calls at once")
	for i := 1; i <= 3; i++ {
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		fmt.Printf("  call %d: %s; ratelimit: %s\n", i, describe(err), header.Get("ratelimit"))
	}

	// A client that waits its turn: the server's rate, 2 a second, one
	// call at a time, so that the server never refuses it.
	clientLimit, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Burst: 1})
	if err != nil {
		return err
	}
	defer clientLimit.Close()
	paced, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(clientLimit, grpclimit.Options{MaxWait: time.Second})))
	if err != nil {
		return err
	}
	defer paced.Close()
	time.Sleep(time.Second) // the demo's own pause: the first client's second passes
	fmt.Println("A client that waits its turn, 2 a second, one at a time: 4 calls")
	start := time.Now()
	for i := 1; i <= 4; i++ {
		_, err := healthpb.NewHealthClient(paced).Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Printf("  call %d after %3d ms: %s\n", i, time.Since(start).Round(100*time.Millisecond).Milliseconds(), describe(err))
	}
	return nil
}

// describe says what a call's error was, with its RetryInfo.
func describe(err error) string {
	if err == nil {
		return "OK"
	}
	st := status.Convert(err)
	for _, d := range st.Details() {
		if retry, ok := d.(*errdetails.RetryInfo); ok {
			return fmt.Sprintf("%s (%s), retry in %v", st.Code(), st.Message(), retry.GetRetryDelay().AsDuration().Round(time.Millisecond))
		}
	}
	return fmt.Sprintf("%s (%s)", st.Code(), st.Message())
}
