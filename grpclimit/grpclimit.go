// Package grpclimit is chanlimit for gRPC, on both sides of a call.
//
// On a server, UnaryServerInterceptor and StreamServerInterceptor decide
// each call (a stream once, when it opens) on a chanlimit.Router, keyed by
// the peer's address or by metadata, before the handler sees it. A refusal
// follows Google's API conventions (AIP-193): codes.ResourceExhausted,
// with google.rpc.RetryInfo carrying the exact wait and
// google.rpc.QuotaFailure naming the policies the call exceeded (each
// violation's quota_id and quota_value) in the status details, so that
// clients that honour RetryInfo back off as they should.
// A limited call carries the ratelimit-policy and ratelimit header
// metadata, with the values package httplimit writes in the HTTP fields.
//
// On a client, UnaryClientInterceptor and StreamClientInterceptor make
// each call wait its turn (WaitN) before it is sent, keyed by its method
// unless Key says otherwise: a call whose wait would pass MaxWait or its
// deadline fails without being sent.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/httplimit"
)

// Options configure the interceptors. The zero Options key a server's
// calls by peer (KeyByPeer) and a client's by method, cost 1 each, limit
// every method, and never wait on a server.
type Options struct {
	// Key returns the call's key: whose quota it uses. nil means KeyByPeer
	// on a server, and the call's full method on a client. Its error
	// fails the call with codes.InvalidArgument (server) or the error
	// itself (client).
	Key func(ctx context.Context, fullMethod string) (string, error)

	// Cost returns the units the call takes; nil means 1.
	Cost func(ctx context.Context, fullMethod string) int

	// Skip, if set and true for a call, lets it through unlimited: health
	// checks, reflection.
	Skip func(ctx context.Context, fullMethod string) bool

	// MaxWait is the longest a call waits for its turn (WaitN). On a
	// server, 0 means never: the call is allowed or refused at once
	// (AllowN); a call whose turn would come after MaxWait is refused at
	// once. On a client, 0 means the call waits as long as its context
	// lets it.
	MaxWait time.Duration

	// Refund, if set, runs on a server after the handler of an allowed
	// call has returned, with its error; true gives the call's Cost back
	// (chanlimit.Router.Refund): count only what should count.
	Refund func(fullMethod string, err error) bool

	// Clients that listen (UnaryClientInterceptor): IgnoreServer holds no
	// key on the server's word; Retries is how many times a call the
	// server refused with a RetryInfo is made again (0: none), and only
	// if RetrySafe says its method may be (nil: none may); MaxHold is the
	// longest hold a RetryInfo can set (0 means httplimit.DefaultMaxHold).
	IgnoreServer bool
	Retries      int
	RetrySafe    func(fullMethod string) bool
	MaxHold      time.Duration

	// SubjectKey, on a server, sets the Subject of each violation in a
	// refusal's google.rpc.QuotaFailure to the call's key: whose quota
	// the call exceeded. It is off by default, and Subject empty, because
	// a key may be a secret (an API key) or personal data (an address, a
	// user's name) that a status, logged by clients and proxies on its
	// way, should not carry.
	SubjectKey bool
}

// The header metadata a limited call carries: the values of the HTTP
// fields of the same names (httplimit.Fields).
const (
	MetadataPolicy    = "ratelimit-policy"
	MetadataRateLimit = "ratelimit"
)

// The fixed messages of the statuses the interceptors answer with: no
// text of a Go error, a key function's error or an internal name reaches
// the client.
const (
	msgLimited     = "rate limit exceeded"
	msgBadRequest  = "the call cannot be rate-limited as it is: it has no key the server accepts, or it costs more than its limits ever allow at once"
	msgUnavailable = "the rate limiter cannot decide the call now"
	msgInternal    = "the rate limiter could not decide the call"
)

// UnaryServerInterceptor decides each unary call on r before its handler
// runs: an allowed call goes on with its header metadata set; a refused
// one never reaches the handler (Refusal says what it gets).
func UnaryServerInterceptor(r *chanlimit.Router, opts Options) grpc.UnaryServerInterceptor {
	s := newServer(r, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if s.skip(ctx, info.FullMethod) {
			return handler(ctx, req)
		}
		key, n, err := s.admit(ctx, info.FullMethod, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) })
		if err != nil {
			return nil, err
		}
		resp, err := handler(ctx, req)
		s.refund(info.FullMethod, key, n, err)
		return resp, err
	}
}

// StreamServerInterceptor decides each stream once, when it opens, as
// UnaryServerInterceptor decides a unary call.
func StreamServerInterceptor(r *chanlimit.Router, opts Options) grpc.StreamServerInterceptor {
	s := newServer(r, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if s.skip(ctx, info.FullMethod) {
			return handler(srv, ss)
		}
		key, n, err := s.admit(ctx, info.FullMethod, ss.SetHeader)
		if err != nil {
			return err
		}
		err = handler(srv, ss)
		s.refund(info.FullMethod, key, n, err)
		return err
	}
}

// server is a server interceptor's router and options.
type server struct {
	r    *chanlimit.Router
	opts Options
	key  func(ctx context.Context, fullMethod string) (string, error)
}

func newServer(r *chanlimit.Router, opts Options) *server {
	s := &server{r: r, opts: opts, key: opts.Key}
	if s.key == nil {
		s.key = KeyByPeer
	}
	return s
}

func (s *server) skip(ctx context.Context, method string) bool {
	return s.opts.Skip != nil && s.opts.Skip(ctx, method)
}

// admit decides the call to method: it returns the key and cost of an
// allowed call, having set its header metadata with setHeader, or the
// status error a refused or undecided call gets.
func (s *server) admit(ctx context.Context, method string, setHeader func(metadata.MD) error) (string, int, error) {
	if s.r == nil {
		return "", 0, status.Error(codes.Internal, msgInternal)
	}
	key, err := s.key(ctx, method)
	if err != nil {
		return "", 0, status.Error(codes.InvalidArgument, msgBadRequest)
	}
	n := cost(ctx, s.opts.Cost, method)
	var q chanlimit.Quota
	d, err := s.decide(ctx, key, n, &q)
	if errors.Is(err, chanlimit.ErrTooManyWaiters) {
		d, err = s.r.PeekQuota(ctx, key, n, &q) // a refusal like any other: the key's line has no room
		d.Allowed = false
	}
	if err != nil {
		return "", 0, statusOf(ctx, err)
	}
	policy, rate, _ := httplimit.Fields(d, &q)
	if policy != "" {
		_ = setHeader(metadata.Pairs(MetadataPolicy, policy, MetadataRateLimit, rate)) // fails only once headers are sent, which nothing has done yet
	}
	if !d.Allowed {
		subject := ""
		if s.opts.SubjectKey {
			subject = key
		}
		return "", 0, refusalOf(d, n, &q, subject)
	}
	return key, n, nil
}

// decide asks the router for n units on key: AllowN, or WaitN up to
// MaxWait (and httplimit.WaitGrace for a grant a little late), with the
// key's quota in q. A wait MaxWait cuts short is a refusal.
func (s *server) decide(ctx context.Context, key string, n int, q *chanlimit.Quota) (chanlimit.Decision, error) {
	if s.opts.MaxWait <= 0 {
		return s.r.AllowQuota(ctx, key, n, q)
	}
	wctx, cancel := httplimit.WaitContext(ctx, s.opts.MaxWait)
	defer cancel()
	d, err := s.r.WaitQuota(wctx, key, n, q)
	switch {
	case err == nil:
		return d, nil
	case ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded):
		return d, err
	case d.RetryAfter > 0:
		d.Allowed = false
		return d, nil // refused at once: WaitN says how long the wait would be
	}
	// The grant came later than foreseen, past the grace: as it stands now.
	if d, err = s.r.PeekQuota(ctx, key, n, q); err == nil && d.Allowed {
		return s.r.AllowQuota(ctx, key, n, q)
	}
	d.Allowed = false
	return d, err
}

// refund gives an allowed call's cost back if Refund says so, after its
// handler returned err. Not the call's context, which has ended: the
// router takes nothing but when to give up from one.
func (s *server) refund(method, key string, n int, err error) {
	if s.opts.Refund != nil && s.opts.Refund(method, err) {
		_ = s.r.Refund(context.Background(), key, n) // an error leaves the call counted
	}
}

// Refusal returns the status error of a call that d refused:
// codes.ResourceExhausted, with a google.rpc.RetryInfo of d's RetryAfter
// (exact, to the nanosecond) and a google.rpc.QuotaFailure in the status
// details, whose one violation is the deciding policy's: its QuotaId the
// policy's name (d.Policy), its QuotaValue the policy's Limit (d.Limit),
// its Subject empty. A refusal by a hold (chanlimit.Router.Hold), which
// no policy decided, has a QuotaFailure with no violation. The server
// interceptors, which have the key's quota at hand, also name the other
// policies the call exceeded, and the key if Options.SubjectKey.
func Refusal(d chanlimit.Decision) error {
	return refusalOf(d, 0, nil, "")
}

// refusalOf returns the status error of a call of n units that d refused,
// on a key whose quota is q (as AllowQuota, PeekQuota or WaitQuota wrote
// it with d; nil or empty if unknown), with subject as each violation's
// Subject. The QuotaFailure's violations are the deciding policy's first,
// then, in the key's order of its policies, those of each other policy
// of q that would deny the call taken alone: one whose Remaining is below
// n. q, if it tells nothing of the deciding policy, is not read: the
// violation is d's alone.
func refusalOf(d chanlimit.Decision, n int, q *chanlimit.Quota, subject string) error {
	st := status.New(codes.ResourceExhausted, msgLimited)
	failure := new(errdetails.QuotaFailure)
	if d.Policy != "" { // else a hold's (chanlimit.Router.Hold): no policy refused
		failure.Violations = violations(d, n, q, subject)
	}
	withDetails, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}, failure)
	if err != nil { // the details always marshal
		return st.Err()
	}
	return withDetails.Err()
}

// violations returns the violations of refusalOf's QuotaFailure, the
// deciding policy's first.
func violations(d chanlimit.Decision, n int, q *chanlimit.Quota, subject string) []*errdetails.QuotaFailure_Violation {
	var refusing []chanlimit.PolicyQuota
	if q != nil {
		refusing = q.Refusing(d, n)
	}
	if len(refusing) == 0 { // q tells nothing of it: d tells it all
		return []*errdetails.QuotaFailure_Violation{violation(d.Policy, d.Limit, d.Remaining, subject)}
	}
	out := make([]*errdetails.QuotaFailure_Violation, len(refusing))
	for k, pq := range refusing {
		p := q.Policies[pq.Policy]
		out[k] = violation(p.Name, p.Limit, pq.Remaining, subject)
	}
	return out
}

// violation returns the violation of the policy named name, whose Limit
// is limit, with remaining left.
func violation(name string, limit, remaining int, subject string) *errdetails.QuotaFailure_Violation {
	return &errdetails.QuotaFailure_Violation{
		Subject:     subject,
		Description: fmt.Sprintf("rate limit %q reached: %d of %d left", name, max(remaining, 0), limit),
		QuotaId:     name,
		QuotaValue:  int64(limit),
	}
}

// statusOf returns the status error of a call the router could not
// decide with err, with the code codeOf gives and a message fixed for
// each code.
func statusOf(ctx context.Context, err error) error {
	code := codeOf(ctx, err)
	if code == codes.Canceled || code == codes.DeadlineExceeded {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(code, messages[code])
}

// messages are the fixed messages of the codes codeOf gives.
var messages = map[codes.Code]string{
	codes.InvalidArgument:   msgBadRequest,
	codes.Unavailable:       msgUnavailable,
	codes.Internal:          msgInternal,
	codes.ResourceExhausted: msgLimited,
}

// codeOf returns the code of a call the router could not decide with
// err: codes.InvalidArgument for a key too long or a cost above what the
// key's policies ever allow at once; codes.ResourceExhausted for a key
// whose line of waiters is full; codes.Unavailable for a closed router,
// one full of keys, or a Store that cannot answer; the context's code if
// the call's context ended; codes.Internal for anything else, a Cost
// below 1 (the Cost function is wrong) included.
func codeOf(ctx context.Context, err error) codes.Code {
	switch {
	case errors.Is(err, chanlimit.ErrKeyTooLong), errors.Is(err, chanlimit.ErrExceedsCapacity), errors.Is(err, ErrNoKey):
		return codes.InvalidArgument
	case errors.Is(err, chanlimit.ErrTooManyWaiters):
		return codes.ResourceExhausted
	case errors.Is(err, chanlimit.ErrClosed), errors.Is(err, chanlimit.ErrTooManyKeys), errors.Is(err, chanlimit.ErrStoreUnavailable):
		return codes.Unavailable
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Code()
	}
	return codes.Internal
}

// cost returns the call's cost: 1, or what f says.
func cost(ctx context.Context, f func(context.Context, string) int, method string) int {
	if f == nil {
		return 1
	}
	return f(ctx, method)
}

// ErrNoKey is matched (errors.Is) by the error of a key function when the
// call lacks what the key is made of: a peer that is not an IP address,
// missing metadata.
var ErrNoKey = errors.New("grpclimit: the call has no key")

// KeyByPeer keys a call by its peer's IP address, as httplimit.KeyByIP
// keys a request: an IPv4 address as itself, an IPv6 address by its /64.
// A peer that is not on IP (a Unix socket, bufconn) is an ErrNoKey.
func KeyByPeer(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", fmt.Errorf("%w: no peer", ErrNoKey)
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok && a != nil {
		if addr, ok := netip.AddrFromSlice(a.IP); ok {
			return httplimit.KeyOfIP(addr), nil
		}
	}
	if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
		return httplimit.KeyOfIP(ap.Addr()), nil
	}
	return "", fmt.Errorf("%w: peer %q is not an IP address", ErrNoKey, p.Addr.String())
}

// KeyByMetadata keys a call by the first value of its incoming metadata
// name (an API key, a tenant). A call without it, or with it empty, is an
// ErrNoKey: it never shares the empty key with every other such call.
func KeyByMetadata(name string) func(ctx context.Context, fullMethod string) (string, error) {
	return func(ctx context.Context, _ string) (string, error) {
		if vs := metadata.ValueFromIncomingContext(ctx, name); len(vs) > 0 && vs[0] != "" {
			return vs[0], nil
		}
		return "", fmt.Errorf("%w: no %s metadata", ErrNoKey, name)
	}
}
