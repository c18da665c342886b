package grpclimit

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What a client reads of a server's refusal: how long the server asks it
// to wait before its next call on the same key.

// maxServerWait is the longest wait a server's word is taken for, as in
// httplimit: a RetryInfo beyond it (a broken or hostile server's) counts
// as a day. A client holds a key for less than that (MaxHold).
const maxServerWait = 24 * time.Hour

// serverWait returns how long err, a call's error, asks its client to
// wait before it calls again on the same key, and whether it asks: the
// RetryDelay of its google.rpc.RetryInfo, at most maxServerWait, if err
// is a status with codes.ResourceExhausted and exactly one RetryInfo
// whose delay is a valid Duration of 0 or more. Anything else asks
// nothing: a status of another code, no RetryInfo or several, a delay
// that is negative or not a valid Duration (nanos out of range, or of
// another sign than its seconds), or details that do not decode.
func serverWait(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	var info *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			if info != nil {
				return 0, false // which one? neither
			}
			info = ri
		}
	}
	delay := info.GetRetryDelay()
	if delay == nil || delay.CheckValid() != nil {
		return 0, false
	}
	if d := delay.AsDuration(); d >= 0 {
		return min(d, maxServerWait), true
	}
	return 0, false
}
