package grpclimit_test

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/grpclimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// Clients that listen: the server here refuses its first calls as a
// limited server does (grpclimit.Refusal, with a RetryInfo), then serves.

// refusing is the health service refusing its first refuse calls with a
// RetryInfo of wait, counting every call.
type refusing struct {
	*health.Server
	refuse int64
	wait   time.Duration
	before func() // if set, called before each refusal
	calls  atomic.Int64
}

func (h *refusing) refusal() error {
	if h.calls.Add(1) <= h.refuse {
		if h.before != nil {
			h.before()
		}
		return grpclimit.Refusal(chanlimit.Decision{RetryAfter: h.wait, Limit: 1, Policy: "upstream"})
	}
	return nil
}

func (h *refusing) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := h.refusal(); err != nil {
		return nil, err
	}
	return h.Server.Check(ctx, req)
}

func (h *refusing) Watch(_ *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	if err := h.refusal(); err != nil {
		return err
	}
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// serveRefusing starts h on 127.0.0.1 and returns a client of it with
// the client interceptors of r and opts.
func serveRefusing(t *testing.T, h *refusing, r *chanlimit.Router, opts grpclimit.Options) healthpb.HealthClient {
	t.Helper()
	h.Server = health.NewServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(r, opts)),
		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(r, opts)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// heldFor returns how long r holds key, from now.
func heldFor(t *testing.T, r *chanlimit.Router, key string) time.Duration {
	t.Helper()
	d, err := r.Peek(context.Background(), key, 1)
	require.NoError(t, err)
	if d.Allowed {
		return 0
	}
	return d.RetryAfter
}

// TestClientHoldsOnRetryInfo: a refusal's RetryInfo holds the call's key,
// so the next call waits for the hold's end, unsent meanwhile; the
// refusal itself comes back as it came.
func TestClientHoldsOnRetryInfo(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
	h := &refusing{refuse: 1, wait: 3 * time.Second}
	client := serveRefusing(t, h, r, grpclimit.Options{})
	ctx := context.Background()

	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, 3*time.Second, heldFor(t, r, check))
	assert.Zero(t, heldFor(t, r, watch), "another method is another key")

	done := make(chan error, 1)
	go func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	waitFor(t, r, 1)
	clk.Advance(3*time.Second - time.Nanosecond)
	assert.Equal(t, 1, waiting(t, r), "1ns before the hold's end it waits")
	assert.EqualValues(t, 1, h.calls.Load(), "unsent while held")
	clk.Advance(time.Nanosecond)
	require.NoError(t, <-done)
	assert.EqualValues(t, 2, h.calls.Load())
}

// waiting returns Stats.Waiting.
func waiting(t *testing.T, r *chanlimit.Router) int {
	t.Helper()
	st, err := r.Stats(context.Background())
	require.NoError(t, err)
	return st.Waiting
}

// TestClientHoldBounds: MaxHold caps the hold, by default at
// httplimit.DefaultMaxHold and never past httplimit.MaxServerHold;
// IgnoreServer holds nothing.
func TestClientHoldBounds(t *testing.T) {
	for _, c := range []struct {
		name string
		opts grpclimit.Options
		wait time.Duration
		want time.Duration
	}{
		{"as asked", grpclimit.Options{}, 40 * time.Second, 40 * time.Second},
		{"default MaxHold", grpclimit.Options{}, 20 * time.Hour, httplimit.DefaultMaxHold},
		{"MaxHold", grpclimit.Options{MaxHold: 10 * time.Second}, time.Minute, 10 * time.Second},
		{"MaxServerHold", grpclimit.Options{MaxHold: 48 * time.Hour}, 20 * time.Hour, httplimit.MaxServerHold},
		{"IgnoreServer", grpclimit.Options{IgnoreServer: true}, time.Minute, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
			client := serveRefusing(t, &refusing{refuse: 1, wait: c.wait}, r, c.opts)
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.Equal(t, c.want, heldFor(t, r, check))
		})
	}
}

// TestClientRetriesWhatIsSafe: with Retries, a call RetrySafe names is
// made again at the hold's end, at most Retries times; one it does not
// name, or whose turn would pass MaxWait, comes back refused, made once.
func TestClientRetriesWhatIsSafe(t *testing.T) {
	safe := func(m string) bool { return m == check }
	t.Run("Safe", func(t *testing.T) {
		r, clk := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
		h := &refusing{refuse: 2, wait: 2 * time.Second}
		client := serveRefusing(t, h, r, grpclimit.Options{Retries: 2, RetrySafe: safe})
		done := make(chan error, 1)
		go func() {
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
			done <- err
		}()
		for i := int64(1); i <= 2; i++ {
			waitFor(t, r, 1)
			assert.Equal(t, i, h.calls.Load(), "not sent again before the hold's end")
			clk.Advance(2 * time.Second)
		}
		require.NoError(t, <-done, "the third try is served")
		assert.EqualValues(t, 3, h.calls.Load())
	})
	for _, c := range []struct {
		name string
		opts grpclimit.Options
	}{
		{"NoRetrySafe", grpclimit.Options{Retries: 2}},
		{"NotSafe", grpclimit.Options{Retries: 2, RetrySafe: func(string) bool { return false }}},
		{"PastMaxWait", grpclimit.Options{Retries: 2, RetrySafe: safe, MaxWait: time.Second}},
		{"NoRetries", grpclimit.Options{RetrySafe: safe}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
			h := &refusing{refuse: 1, wait: 2 * time.Second}
			client := serveRefusing(t, h, r, c.opts)
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.EqualValues(t, 1, h.calls.Load())
		})
	}
}

// TestClientStreamHolds: a stream the server refuses holds its key when
// its end is read; it is never opened again.
func TestClientStreamHolds(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
	h := &refusing{refuse: 1, wait: 4 * time.Second}
	client := serveRefusing(t, h, r, grpclimit.Options{Retries: 3, RetrySafe: func(string) bool { return true }})
	stream, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, 4*time.Second, heldFor(t, r, watch))
	assert.EqualValues(t, 1, h.calls.Load())
	assert.NotErrorIs(t, err, io.EOF)
}

// TestClientListensToALimitedServer: the loop closed. A client router of
// 10 a second calls a server that allows 1 per 2 s: the server's first
// refusal holds the client's key, so the client sends nothing more until
// the server would allow it, and what it retries is served.
func TestClientListensToALimitedServer(t *testing.T) {
	server, serverClk := newRouter(t, chanlimit.Config{Limit: 1, Window: 2 * time.Second})
	local, clk := newRouter(t, chanlimit.Config{Limit: 10, Window: time.Second})
	h, client := serve(t,
		[]grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(server, grpclimit.Options{}))},
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(local, grpclimit.Options{Retries: 1, RetrySafe: func(string) bool { return true }})))
	ctx := context.Background()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	waitFor(t, local, 1) // refused by the server, and waiting out the hold to try again
	assert.EqualValues(t, 1, h.checks.Load(), "the handler saw the first call alone")
	serverClk.Advance(2 * time.Second)
	clk.Advance(2 * time.Second)
	require.NoError(t, <-done, "the retry, at the server's word, is served")
	assert.EqualValues(t, 2, h.checks.Load())
}

// TestClientRetriesOnlyAfterAHold: a call is made again only after a hold
// that was made: if the router cannot hold the key, the refusal comes
// back as it came, made once. (Here the key is new again when the
// refusal comes, Reset while the call was out, and the one hold MaxKeys
// leaves room for is another key's.)
func TestClientRetriesOnlyAfterAHold(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second, MaxKeys: 1, Partitions: 1})
	require.NoError(t, r.Hold(context.Background(), "elsewhere", time.Hour))
	h := &refusing{refuse: 5, wait: time.Second, before: func() { _ = r.Reset(context.Background(), check) }}
	client := serveRefusing(t, h, r, grpclimit.Options{Retries: 3, RetrySafe: func(string) bool { return true }})
	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.EqualValues(t, 1, h.calls.Load())
}

// TestClientChainedHoldsOnlyOnTheServersWord: with two client
// interceptors chained, the inner one's own refusal (its wait past
// MaxWait) is not the server's word: the outer one holds nothing.
func TestClientChainedHoldsOnlyOnTheServersWord(t *testing.T) {
	outer, _ := newRouter(t, chanlimit.Config{Limit: 100, Window: time.Second})
	inner, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Minute})
	tenant := func(context.Context, string) (string, error) { return "tenant", nil }
	_, client := serve(t, nil, grpc.WithChainUnaryInterceptor(
		grpclimit.UnaryClientInterceptor(outer, grpclimit.Options{Key: tenant}),
		grpclimit.UnaryClientInterceptor(inner, grpclimit.Options{MaxWait: time.Second})))
	ctx := context.Background()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the inner router's refusal")
	assert.Zero(t, heldFor(t, outer, "tenant"), "the outer router holds nothing")
}
