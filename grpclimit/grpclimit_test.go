package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
	"github.com/chanlimit/chanlimit/grpclimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The tests go through a real grpc.Server on 127.0.0.1 and a real
// grpc.ClientConn, with gRPC's health service as the service limited:
// Check a unary method, Watch a server stream.

const (
	check = "/grpc.health.v1.Health/Check"
	watch = "/grpc.health.v1.Health/Watch"
)

// countingHealth is the health service, counting the calls it serves.
type countingHealth struct {
	*health.Server
	checks, watches atomic.Int64
	fail            atomic.Bool // Check answers codes.Internal
}

func (h *countingHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.checks.Add(1)
	if h.fail.Load() {
		return nil, status.Error(codes.Internal, "backend down")
	}
	return h.Server.Check(ctx, req)
}

func (h *countingHealth) Watch(req *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	h.watches.Add(1)
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// serve starts a server on 127.0.0.1 with the interceptors, and returns
// its health service and a client of it, dialled with clientOpts; both
// stop when the test ends.
func serve(t *testing.T, serverOpts []grpc.ServerOption, clientOpts ...grpc.DialOption) (*countingHealth, healthpb.HealthClient) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(serverOpts...)
	h := &countingHealth{Server: health.NewServer()}
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append(clientOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return h, healthpb.NewHealthClient(conn)
}

func newRouter(t *testing.T, cfg chanlimit.Config) (*chanlimit.Router, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	cfg.Clock = clk
	r, err := chanlimit.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r, clk
}

// member is one member of a RateLimit or RateLimit-Policy value.
type member struct {
	name   string
	params map[string]int64
}

// parse parses a metadata value as a Structured Fields List of policies.
func parse(t *testing.T, values []string) []member {
	t.Helper()
	require.NotEmpty(t, values)
	list, err := httpsfv.UnmarshalList(values)
	require.NoError(t, err, "%q", values)
	var out []member
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		require.True(t, ok)
		name, ok := item.Value.(string)
		require.True(t, ok)
		params := map[string]int64{}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			params[k] = v.(int64)
		}
		out = append(out, member{name, params})
	}
	return out
}

// TestServerUnary: calls are allowed while the key has quota, each with
// its header metadata; the refusal is ResourceExhausted with the exact
// RetryAfter in RetryInfo, the deciding policy in QuotaFailure, and the
// metadata too; the handler never sees it.
func TestServerUnary(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
		{Name: "hour", Limit: 2, Window: time.Hour},
		{Name: "shadow", Limit: 1, Window: time.Hour, DryRun: true},
	}})
	h, client := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(r, grpclimit.Options{}))})
	ctx := context.Background()
	policy := []member{{"hour", map[string]int64{"q": 2, "w": 3600}}}
	for i := range 2 {
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		require.NoError(t, err, "call %d", i)
		assert.Equal(t, policy, parse(t, header.Get("ratelimit-policy")), "a dry-run policy is never advertised")
		assert.Equal(t, []member{{"hour", map[string]int64{"r": int64(1 - i), "t": 1800}}}, parse(t, header.Get("ratelimit")))
	}
	var header metadata.MD
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
	assert.Equal(t, "rate limit exceeded", st.Message())
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	require.NotNil(t, retry)
	assert.Equal(t, 30*time.Minute, retry.GetRetryDelay().AsDuration(), "the exact wait for one unit of 2 an hour")
	require.NotNil(t, quota)
	assertViolations(t, quota, &errdetails.QuotaFailure_Violation{QuotaId: "hour", QuotaValue: 2, Description: `rate limit "hour" reached: 0 of 2 left`})
	assert.Equal(t, []member{{"hour", map[string]int64{"r": 0, "t": 1800}}}, parse(t, header.Get("ratelimit")), "the refusal's metadata")
	assert.EqualValues(t, 2, h.checks.Load(), "the refused call never reached the handler")
}

// refusalDetails returns the RetryInfo and QuotaFailure of err, a call's
// refusal: codes.ResourceExhausted, with one of each in its details.
func refusalDetails(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			require.Nil(t, retry, "one RetryInfo")
			retry = d
		case *errdetails.QuotaFailure:
			require.Nil(t, quota, "one QuotaFailure")
			quota = d
		default:
			t.Fatalf("a detail of type %T: %v", d, d)
		}
	}
	require.NotNil(t, retry)
	require.NotNil(t, quota)
	return retry, quota
}

// assertViolations asserts that quota has exactly the violations want,
// in that order, every field of each.
func assertViolations(t *testing.T, quota *errdetails.QuotaFailure, want ...*errdetails.QuotaFailure_Violation) {
	t.Helper()
	got := quota.GetViolations()
	if !assert.Len(t, got, len(want), "violations: %v", got) {
		return
	}
	for i := range want {
		assert.True(t, proto.Equal(want[i], got[i]), "violation %d:\n got %v\nwant %v", i, got[i], want[i])
	}
}

// TestQuotaFailure: each violation of a refusal's QuotaFailure is a
// policy the call exceeded, the deciding one first, then the others in
// the key's order, each with its name as QuotaId and its Limit as
// QuotaValue (never a dry-run policy, never one that would allow the
// call); Subject is the key with SubjectKey, else empty. A refusal by a
// hold has no violation.
func TestQuotaFailure(t *testing.T) {
	for _, c := range []struct {
		name        string
		give        bool // SubjectKey
		wantSubject string
	}{
		{"no subject by default", false, ""},
		{"SubjectKey", true, "acme"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, clk := newRouter(t, chanlimit.Config{Policies: []chanlimit.Policy{
				{Name: "second", Limit: 3, Window: time.Second},
				{Name: "minute", Limit: 4, Window: time.Minute},
				{Name: "hour", Limit: 100, Window: time.Hour},
				{Name: "shadow", Limit: 1, Window: time.Hour, DryRun: true},
			}})
			opts := grpclimit.Options{
				Key: grpclimit.KeyByMetadata("x-tenant"),
				Cost: func(ctx context.Context, _ string) int {
					return len(metadata.ValueFromIncomingContext(ctx, "x-cost")) + 1
				},
				SubjectKey: c.give,
			}
			_, client := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(r, opts))})
			call := func(tenant string, cost int) error {
				ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", tenant)
				for range cost - 1 {
					ctx = metadata.AppendToOutgoingContext(ctx, "x-cost", "1")
				}
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
				return err
			}
			violation := func(policy string, limit, left int) *errdetails.QuotaFailure_Violation {
				return &errdetails.QuotaFailure_Violation{
					Subject:     c.wantSubject,
					QuotaId:     policy,
					QuotaValue:  int64(limit),
					Description: fmt.Sprintf("rate limit %q reached: %d of %d left", policy, left, limit),
				}
			}

			for i := range 3 {
				require.NoError(t, call("acme", 1), "call %d", i)
			}
			// second is spent, minute has 1 left: second alone refuses.
			retry, quota := refusalDetails(t, call("acme", 1))
			assert.Equal(t, time.Second/3+1, retry.GetRetryDelay().AsDuration(), "a third of a second, rounded up to the nanosecond")
			assertViolations(t, quota, violation("second", 3, 0))

			// A second later: second is whole again, minute has 1 left
			// (and a fifteenth of one), which the next call takes.
			clk.Advance(time.Second)
			require.NoError(t, call("acme", 1))
			_, quota = refusalDetails(t, call("acme", 1))
			assertViolations(t, quota, violation("minute", 4, 0))

			// A call of 3: second (2 left) and minute (none) refuse it,
			// minute deciding (its wait is the longer); hour (95 left)
			// would allow it.
			_, quota = refusalDetails(t, call("acme", 3))
			assertViolations(t, quota, violation("minute", 4, 0), violation("second", 3, 2))

			// A key held: refused by no policy, so no violation.
			require.NoError(t, r.Hold(context.Background(), "globex", time.Minute))
			retry, quota = refusalDetails(t, call("globex", 1))
			assert.Equal(t, time.Minute, retry.GetRetryDelay().AsDuration())
			assertViolations(t, quota)
		})
	}
}

// TestRefusal: Refusal, with no quota at hand, names the deciding policy
// alone, and no subject; a hold's decision, none.
func TestRefusal(t *testing.T) {
	retry, quota := refusalDetails(t, grpclimit.Refusal(chanlimit.Decision{RetryAfter: 1500 * time.Millisecond, Limit: 10, Remaining: 0, Policy: "per-minute"}))
	assert.Equal(t, 1500*time.Millisecond, retry.GetRetryDelay().AsDuration())
	assertViolations(t, quota, &errdetails.QuotaFailure_Violation{QuotaId: "per-minute", QuotaValue: 10, Description: `rate limit "per-minute" reached: 0 of 10 left`})

	_, quota = refusalDetails(t, grpclimit.Refusal(chanlimit.Decision{RetryAfter: time.Second}))
	assertViolations(t, quota)
}

// TestServerStream: a stream is decided once, when it opens.
func TestServerStream(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Hour})
	h, client := serve(t, []grpc.ServerOption{grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(r, grpclimit.Options{}))})
	ctx := context.Background()
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	header, err := stream.Header()
	require.NoError(t, err)
	assert.Equal(t, []member{{"default", map[string]int64{"r": 0, "t": 3600}}}, parse(t, header.Get("ratelimit")))

	stream, err = client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	_, quota := refusalDetails(t, err)
	assertViolations(t, quota, &errdetails.QuotaFailure_Violation{QuotaId: "default", QuotaValue: 1, Description: `rate limit "default" reached: 0 of 1 left`})
	assert.EqualValues(t, 1, h.watches.Load())
}

// TestServerOptions: Skip, Cost, MaxWait hit and missed, Refund, keys by
// metadata, and the statuses of calls that cannot be decided.
func TestServerOptions(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 2, Window: time.Second})
	opts := grpclimit.Options{
		Key: grpclimit.KeyByMetadata("x-tenant"),
		Cost: func(ctx context.Context, _ string) int {
			return len(metadata.ValueFromIncomingContext(ctx, "x-cost")) + 1
		},
		Skip:    func(_ context.Context, method string) bool { return method == watch },
		MaxWait: 600 * time.Millisecond,
		Refund:  func(_ string, err error) bool { return status.Code(err) == codes.Internal },
	}
	h, client := serve(t, []grpc.ServerOption{
		grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(r, opts)),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(r, opts)),
	})
	call := func(tenant string, cost int) error {
		ctx := context.Background()
		if tenant != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant)
		}
		for range cost - 1 {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-cost", "1")
		}
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	assert.Equal(t, codes.InvalidArgument, status.Code(call("", 1)), "no key")
	assert.Equal(t, codes.InvalidArgument, status.Code(call("a", 3)), "a cost above the capacity")
	require.NoError(t, call("a", 2), "Cost: both units")

	// MaxWait: a unit comes in 500ms, within 600ms: the call waits for it.
	done := make(chan error, 1)
	go func() { done <- call("a", 1) }()
	require.NoError(t, clk.BlockUntilContext(context.Background(), 1))
	clk.Advance(500 * time.Millisecond)
	require.NoError(t, <-done)
	assert.Equal(t, codes.ResourceExhausted, status.Code(call("a", 2)), "a second's wait is past MaxWait: refused at once")

	// Refund: the server's own failures are given back.
	clk.Advance(time.Second)
	h.fail.Store(true)
	for range 4 {
		assert.Equal(t, codes.Internal, status.Code(call("b", 2)))
	}
	h.fail.Store(false)
	require.NoError(t, call("b", 2), "the failures took nothing")

	// Skip: Watch is not limited.
	for range 3 {
		stream, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = stream.Recv()
		require.NoError(t, err)
	}

	require.NoError(t, r.Close())
	st := status.Convert(call("c", 1))
	assert.Equal(t, codes.Unavailable, st.Code(), "a closed router")
	assert.NotContains(t, st.Message(), "chanlimit", "no internal error text reaches the client")
}

// TestClientWaits: the client interceptors make each call wait its turn
// before it is sent, and never send one they give up on: past MaxWait,
// or its context ended.
func TestClientWaits(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: 5 * time.Second})
	api := func(context.Context, string) (string, error) { return "api", nil } // both methods share the API's quota
	h, client := serve(t, nil,
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(r, grpclimit.Options{Key: api, MaxWait: 12 * time.Second})),
		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(r, grpclimit.Options{Key: api})))
	ctx := context.Background()
	checkIn := func(done chan<- error) {
		go func() {
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			done <- err
		}()
	}
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	done := make(chan error, 2)
	checkIn(done)
	require.NoError(t, clk.BlockUntilContext(ctx, 1))
	assert.EqualValues(t, 1, h.checks.Load(), "the second waits, unsent")
	clk.Advance(5 * time.Second)
	require.NoError(t, <-done)
	assert.EqualValues(t, 2, h.checks.Load())

	// Two calls queue, their turns 5s and 10s away; a third's would be
	// 15s away, past MaxWait: it fails at once, with the wait.
	checkIn(done)
	waitFor(t, r, 1)
	checkIn(done)
	waitFor(t, r, 2)
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
	require.NotEmpty(t, st.Details())
	assert.Equal(t, 15*time.Second, st.Details()[0].(*errdetails.RetryInfo).GetRetryDelay().AsDuration())

	// A stream whose context ends while it waits is never opened.
	sctx, cancel := context.WithCancel(ctx)
	streamed := make(chan error, 1)
	go func() {
		_, err := client.Watch(sctx, &healthpb.HealthCheckRequest{})
		streamed <- err
	}()
	waitFor(t, r, 3)
	cancel()
	assert.Equal(t, codes.Canceled, status.Code(<-streamed))

	clk.Advance(5 * time.Second)
	require.NoError(t, <-done)
	clk.Advance(5 * time.Second)
	require.NoError(t, <-done)
	assert.EqualValues(t, 4, h.checks.Load(), "what was given up was never sent")
	assert.Zero(t, h.watches.Load())
}

// waitFor returns once n callers wait in r's lines.
func waitFor(t *testing.T, r *chanlimit.Router, n int) {
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

// TestKeyByPeer: a call over TCP on 127.0.0.1 is keyed by that address;
// a context with no peer is an ErrNoKey.
func TestKeyByPeer(t *testing.T) {
	keys := make(chan string, 1)
	_, client := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		key, err := grpclimit.KeyByPeer(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		keys <- key
		return handler(ctx, req)
	})})
	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", <-keys)
	_, err = grpclimit.KeyByPeer(context.Background(), check)
	assert.True(t, errors.Is(err, grpclimit.ErrNoKey))
}

// TestKeyByPeerIPv6: an IPv6 peer is keyed by its /64, an IPv4-mapped one
// as its IPv4 address.
func TestKeyByPeerIPv6(t *testing.T) {
	for addr, want := range map[string]string{
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"::ffff:192.0.2.7":     "192.0.2.7",
		"192.0.2.7":            "192.0.2.7",
	} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(addr), Port: 5000}})
		got, err := grpclimit.KeyByPeer(ctx, check)
		require.NoError(t, err, addr)
		assert.Equal(t, want, got, addr)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "/tmp/sock", Net: "unix"}})
	_, err := grpclimit.KeyByPeer(ctx, check)
	assert.ErrorIs(t, err, grpclimit.ErrNoKey)
}

// TestServerFullLine: a call refused because the key's line of waiters is
// full is refused as any other, with its details and metadata; a Cost
// function that returns 0 is the server's fault: Internal.
func TestServerFullLine(t *testing.T) {
	r, clk := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second, MaxWaiters: 1})
	one := func(context.Context, string) (string, error) { return "one", nil }
	_, client := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(r, grpclimit.Options{Key: one, MaxWait: time.Minute}))})
	ctx := context.Background()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		waited <- err
	}()
	waitFor(t, r, 1)
	var header metadata.MD
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
	require.Len(t, st.Details(), 2)
	assert.NotEmpty(t, header.Get("ratelimit"))
	clk.Advance(time.Second)
	require.NoError(t, <-waited)

	zero, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
	_, client = serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(zero, grpclimit.Options{Cost: func(context.Context, string) int { return 0 }}))})
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.Internal, status.Code(err), "the Cost function is wrong, not the call")
}

// TestClientErrors: a call the client's router cannot decide fails with
// the code a server would answer, and the router's error.
func TestClientErrors(t *testing.T) {
	r, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
	costly := grpclimit.Options{Cost: func(context.Context, string) int { return 2 }}
	_, client := serve(t, nil, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(r, costly)))
	ctx := context.Background()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorIs(t, err, chanlimit.ErrExceedsCapacity)

	noKey := grpclimit.Options{Key: func(context.Context, string) (string, error) { return "", errors.New("no account") }}
	_, client = serve(t, nil, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(r, noKey)))
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))

	closed, _ := newRouter(t, chanlimit.Config{Limit: 1, Window: time.Second})
	require.NoError(t, closed.Close())
	_, client = serve(t, nil, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(closed, grpclimit.Options{})))
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.ErrorIs(t, err, chanlimit.ErrClosed)

	_, client = serve(t, nil, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(nil, grpclimit.Options{})))
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.Internal, status.Code(err), "no router")

	ctx = peer.NewContext(ctx, &peer.Peer{Addr: (*net.TCPAddr)(nil)})
	_, err = grpclimit.KeyByPeer(ctx, check)
	assert.ErrorIs(t, err, grpclimit.ErrNoKey, "a typed nil address")
}
