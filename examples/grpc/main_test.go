package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/chanlimit/chanlimit/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startFake starts the example's server on 127.0.0.1:0 with its router on
// a frozen fake clock, and returns a client connection to it; both end
// with the test.
func startFake(t *testing.T) (*server, *grpc.ClientConn) {
	t.Helper()
	s, err := start("127.0.0.1:0", clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return s, conn
}

// TestReflection: a reflection client, as grpcurl is, lists the server's
// services, the health service among them, and describes it (grpcurl's
// describe): the file that defines it has its Check method. It describes
// the messages of a refusal's details as well.
func TestReflection(t *testing.T) {
	_, conn := startFake(t)
	ctx := context.Background()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)

	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	assert.Contains(t, names, "grpc.health.v1.Health")
	assert.Contains(t, names, "grpc.reflection.v1.ServerReflection")

	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "grpc.health.v1.Health"},
	}))
	resp, err = stream.Recv()
	require.NoError(t, err)
	var methods []string
	for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		var fd descriptorpb.FileDescriptorProto
		require.NoError(t, proto.Unmarshal(raw, &fd))
		for _, svc := range fd.GetService() {
			if fd.GetPackage()+"."+svc.GetName() == "grpc.health.v1.Health" {
				for _, m := range svc.GetMethod() {
					methods = append(methods, m.GetName())
				}
			}
		}
	}
	assert.Contains(t, methods, "Check")

	// The details of a refusal are described too, so that grpcurl
	// prints them as JSON.
	for _, symbol := range []string{"google.rpc.QuotaFailure", "google.rpc.RetryInfo"} {
		require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol},
		}))
		resp, err = stream.Recv()
		require.NoError(t, err)
		assert.NotEmpty(t, resp.GetFileDescriptorResponse().GetFileDescriptorProto(), symbol)
	}

	require.NoError(t, stream.CloseSend())
	_, err = stream.Recv()
	assert.Equal(t, io.EOF, err)
}

// TestRefusal: the server allows a client 2 calls a second; the third,
// on the frozen clock, is refused with the exact wait in its RetryInfo
// and the policy in its QuotaFailure: its name, its limit, no subject
// (the key is the client's address, kept to the server). Reflection, a
// stream, is never limited.
func TestRefusal(t *testing.T) {
	_, conn := startFake(t)
	ctx := context.Background()
	client := healthpb.NewHealthClient(conn)
	for i := range 2 {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "call %d", i)
	}
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
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
	assert.Equal(t, 500*time.Millisecond, retry.GetRetryDelay().AsDuration())
	require.NotNil(t, quota)
	want := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		QuotaId:     "per-second",
		QuotaValue:  2,
		Description: `rate limit "per-second" reached: 0 of 2 left`,
	}}}
	assert.True(t, proto.Equal(want, quota), "QuotaFailure:\n got %v\nwant %v", quota, want)
	assert.Equal(t, "ResourceExhausted (rate limit exceeded), retry in 500ms, quota \"per-second\" of 2 exceeded", describe(err))

	for i := range 3 {
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		require.NoError(t, err)
		require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
		}))
		_, err = stream.Recv()
		require.NoError(t, err, "reflection call %d, the key's quota spent", i)
		require.NoError(t, stream.CloseSend())
	}
}

// TestOnlyLoopback: the example serves on 127.0.0.1 only.
func TestOnlyLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "example.com:50051", "127.0.0.1"} {
		_, err := start(addr, nil)
		assert.Error(t, err, addr)
	}
}
