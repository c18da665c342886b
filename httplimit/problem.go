package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/chanlimit/chanlimit"
)

// The answers the middleware writes itself: a refusal's, and an error's,
// each an RFC 9457 problem.

// violated returns the names of the policies that refused d, a denial of
// n units, with q its key's quota (Quota.Refusing): the problem body's
// "violated-policies", the deciding policy first. q telling nothing of
// the deciding policy, it is that policy alone.
func violated(d chanlimit.Decision, q *chanlimit.Quota, n int) []string {
	refusing := q.Refusing(d, n)
	if len(refusing) == 0 {
		return []string{d.Policy}
	}
	names := make([]string, len(refusing))
	for k, pq := range refusing {
		names[k] = q.Policies[pq.Policy].Name
	}
	return names
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Detail     string   `json:"detail"`
	Violated   []string `json:"violated-policies,omitempty"` // 429: the policies that refused
	Policy     string   `json:"policy,omitempty"`            // 429: the policy that decided
	RetryAfter int64    `json:"retry_after,omitempty"`       // 429: Retry-After, in seconds
}

// The problem type of a refusal by the key's policies, defined by the
// IETF draft draft-ietf-httpapi-ratelimit-headers (from its revision 12),
// with its title.
const (
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	quotaExceededTitle   = "Request cannot be satisfied as assigned quota has been exceeded"
)

// WriteLimited writes the default refusal of r, which OnLimited is
// answering: 429 Too Many Requests with an RFC 9457
// application/problem+json body for the Decision DecisionFrom(r) returns
// (the RateLimit-Policy, RateLimit and Retry-After fields are already
// set). A refusal by the key's policies has the draft's problem type
// ProblemQuotaExceeded, with its "violated-policies" member (the deciding policy
// first, then any other that would not have allowed the request either),
// and, as before it, "policy" (the deciding one) and "retry_after" (the
// seconds to wait); one by a hold (chanlimit.Router.Hold), which no
// policy made, is "about:blank" with "retry_after". An OnLimited can log
// the refusal, then call it. Called for a request that carries no
// refusal (outside OnLimited), it answers as WriteError does an internal
// error: 500.
func WriteLimited(w http.ResponseWriter, r *http.Request) {
	info, ok := infoFrom(r)
	if !ok || info.d.Allowed {
		WriteError(w, r, errNoRefusal)
		return
	}
	writeLimited(w, info)
}

// errNoRefusal is WriteLimited's error for a request that carries no
// refusal.
var errNoRefusal = errors.New("httplimit: WriteLimited was called for a request the middleware did not refuse")

// writeLimited writes the default refusal of info's request: 429, with a
// problem body.
func writeLimited(w http.ResponseWriter, info *requestInfo) {
	d := info.d
	secs := untilMore(d, 0)
	p := problem{
		Type:       ProblemQuotaExceeded,
		Title:      quotaExceededTitle,
		Status:     http.StatusTooManyRequests,
		Detail:     fmt.Sprintf("rate limit %q reached: retry in %d s", d.Policy, secs),
		Violated:   info.violated,
		Policy:     d.Policy,
		RetryAfter: secs,
	}
	if byHold(d) {
		p.Type, p.Title = "", ""
		p.Detail = fmt.Sprintf("requests on this key are held: retry in %d s", secs)
	}
	writeProblem(w, p)
}

// writeProblem writes p as the response: its status, and its body as
// application/problem+json; a p of no type is "about:blank", titled by
// its status.
func writeProblem(w http.ResponseWriter, p problem) {
	if p.Type == "" {
		p.Type, p.Title = "about:blank", http.StatusText(p.Status)
	}
	body, err := json.Marshal(p)
	if err != nil { // strings and numbers always marshal
		body = []byte(`{"type":"about:blank"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// The details of WriteError's answers, one per status: a key function's
// error can carry anything (a database's error, a token), so none of an
// error's text reaches the client.
const (
	detailBadRequest  = "the request cannot be rate-limited as it is: it has no key the server accepts, or it costs more than its limits ever allow at once"
	detailUnavailable = "the rate limiter cannot decide the request now"
	detailInternal    = "the rate limiter could not decide the request"
)

// WriteError is the default OnError: it answers err with the status
// ErrorStatus gives it and an RFC 9457 application/problem+json body
// whose detail is fixed for each status, so that nothing of err reaches
// the client (an OnError of your own can log err, then call WriteError).
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	p := problem{Status: ErrorStatus(r, err)}
	switch p.Status {
	case http.StatusBadRequest:
		p.Detail = detailBadRequest
	case http.StatusServiceUnavailable:
		p.Detail = detailUnavailable
	default:
		p.Detail = detailInternal
	}
	writeProblem(w, p)
}

// ErrorStatus returns the status WriteError answers err with, for the
// request r (nil: a request whose context has not ended), so that a
// middleware of another framework answers as this one does:
//
//   - 400 Bad Request for a key the request does not give (ErrNoKey), a
//     key longer than the router's MaxKeyBytes, and a cost above what the
//     key's policies ever allow (chanlimit.ErrExceedsCapacity);
//   - 503 Service Unavailable for a router that is closed
//     (chanlimit.ErrClosed) or holds as many keys as it may
//     (chanlimit.ErrTooManyKeys), whose Store cannot answer
//     (chanlimit.ErrStoreUnavailable: Redis down, with FailClosed), and
//     for a request whose context ended first (the client went away, or a
//     server deadline passed);
//   - 500 Internal Server Error for anything else: a key function's own
//     error, a Cost below 1, a panic in an algorithm or the clock.
func ErrorStatus(r *http.Request, err error) int {
	switch {
	case errors.Is(err, ErrNoKey), errors.Is(err, chanlimit.ErrKeyTooLong), errors.Is(err, chanlimit.ErrExceedsCapacity):
		return http.StatusBadRequest
	case errors.Is(err, chanlimit.ErrClosed), errors.Is(err, chanlimit.ErrTooManyKeys), errors.Is(err, chanlimit.ErrStoreUnavailable),
		r != nil && r.Context().Err() != nil:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
