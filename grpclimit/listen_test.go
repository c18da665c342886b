package grpclimit

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// refusal returns a status error of code with details, each packed as an
// Any (a []byte: an Any of RetryInfo's type holding those bytes, which
// need not decode).
func refusal(t testing.TB, code codes.Code, details ...any) error {
	p := &spb.Status{Code: int32(code), Message: "refused"}
	for _, d := range details {
		var a *anypb.Any
		switch d := d.(type) {
		case []byte:
			a = &anypb.Any{TypeUrl: "type.googleapis.com/google.rpc.RetryInfo", Value: d}
		case proto.Message:
			var err error
			if a, err = anypb.New(d); err != nil {
				t.Fatal(err)
			}
		}
		p.Details = append(p.Details, a)
	}
	return status.ErrorProto(p)
}

func retryInfo(seconds int64, nanos int32) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: seconds, Nanos: nanos}}
}

// TestServerWait: what a client reads of a server's refusal: the waits it
// takes, and the RetryInfos it ignores.
func TestServerWait(t *testing.T) {
	quota := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{QuotaId: "x", QuotaValue: 1}}}
	for _, c := range []struct {
		name string
		err  error
		wait time.Duration
		asks bool
	}{
		{"a delay", refusal(t, codes.ResourceExhausted, retryInfo(3, 500_000_000)), 3500 * time.Millisecond, true},
		{"beside a QuotaFailure", refusal(t, codes.ResourceExhausted, quota, retryInfo(2, 0)), 2 * time.Second, true},
		{"zero", refusal(t, codes.ResourceExhausted, retryInfo(0, 0)), 0, true},
		{"a day", refusal(t, codes.ResourceExhausted, retryInfo(86400, 0)), 24 * time.Hour, true},
		{"past a day: a day", refusal(t, codes.ResourceExhausted, retryInfo(86400, 1)), 24 * time.Hour, true},
		{"centuries: a day", refusal(t, codes.ResourceExhausted, retryInfo(3_000_000_000, 0)), 24 * time.Hour, true},
		{"ten thousand years, the most a Duration holds: a day", refusal(t, codes.ResourceExhausted, retryInfo(315_576_000_000, 0)), 24 * time.Hour, true},
		{"past what a Duration holds: invalid", refusal(t, codes.ResourceExhausted, retryInfo(315_576_000_001, 0)), 0, false},
		{"negative", refusal(t, codes.ResourceExhausted, retryInfo(-1, 0)), 0, false},
		{"nanos out of range", refusal(t, codes.ResourceExhausted, retryInfo(1, 1_000_000_000)), 0, false},
		{"nanos of the other sign", refusal(t, codes.ResourceExhausted, retryInfo(1, -1)), 0, false},
		{"no delay", refusal(t, codes.ResourceExhausted, &errdetails.RetryInfo{}), 0, false},
		{"no RetryInfo", refusal(t, codes.ResourceExhausted, quota), 0, false},
		{"two RetryInfos", refusal(t, codes.ResourceExhausted, retryInfo(1, 0), retryInfo(9, 0)), 0, false},
		{"one that does not decode", refusal(t, codes.ResourceExhausted, []byte{0xff, 0xff}), 0, false},
		{"another code", refusal(t, codes.Unavailable, retryInfo(3, 0)), 0, false},
		{"not a status", errors.New("refused"), 0, false},
		{"a status wrapped", fmt.Errorf("call: %w", refusal(t, codes.ResourceExhausted, retryInfo(4, 0))), 4 * time.Second, true},
		{"no error", nil, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			wait, asks := serverWait(c.err)
			assert.Equal(t, c.wait, wait)
			assert.Equal(t, c.asks, asks)
		})
	}
}

// FuzzServerWait: whatever a server's refusal holds, reading it never
// panics, asks for a wait in [0, a day] or none, and asks exactly when it
// holds one RetryInfo with a valid delay in that range.
func FuzzServerWait(f *testing.F) {
	f.Add(uint32(codes.ResourceExhausted), int64(3), int32(0), uint8(1), []byte(nil))
	f.Add(uint32(codes.ResourceExhausted), int64(86400), int32(1), uint8(1), []byte{0x0a, 0x02, 0x08, 0x05})
	f.Add(uint32(codes.Aborted), int64(-5), int32(-7), uint8(2), []byte{0xff})
	f.Fuzz(func(t *testing.T, code uint32, seconds int64, nanos int32, infos uint8, raw []byte) {
		var details []any
		for range infos % 3 {
			details = append(details, retryInfo(seconds, nanos))
		}
		if raw != nil {
			details = append(details, raw) // decoding may fail, or make a second RetryInfo
		}
		err := refusal(t, codes.Code(code%17), details...)
		wait, asks := serverWait(err)
		if wait < 0 || wait > maxServerWait || (!asks && wait != 0) {
			t.Fatalf("wait %v, asks %v", wait, asks)
		}
		if raw == nil {
			d := &durationpb.Duration{Seconds: seconds, Nanos: nanos}
			valid := d.CheckValid() == nil && d.AsDuration() >= 0
			want := codes.Code(code%17) == codes.ResourceExhausted && infos%3 == 1 && valid
			if asks != want || (asks && wait != min(d.AsDuration(), maxServerWait)) {
				t.Fatalf("code %d, %d RetryInfos of %ds %dns: wait %v, asks %v", code%17, infos%3, seconds, nanos, wait, asks)
			}
		}
	})
}
