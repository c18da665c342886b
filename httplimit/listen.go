package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What a client reads of a server's answer: how long the server asks it
// to wait before its next request on the same key.

// maxServerWait is the longest wait a server's word is taken for: a
// Retry-After or a RateLimit member's t beyond it is absurd (a server
// that says so is broken or hostile) and is ignored, as a value that does
// not parse is. A client holds a key for less than that (MaxHold).
const maxServerWait = 24 * time.Hour

// serverWait returns how long resp asks its client to wait before it
// sends again on the same key, and whether it asks: the longest of
//   - Retry-After, on a 429 or a 503 (RFC 9110, 10.2.3): delay-seconds,
//     or an HTTP-date, measured against resp's Date field if it holds a
//     valid one, else against now (a date past asks for no wait);
//   - the t (seconds) of each member of its RateLimit field with r=0
//     (draft-ietf-httpapi-ratelimit-headers): its quota is spent until
//     then, whatever the status.
//
// What does not parse is ignored, as is a value that is negative, longer
// than maxServerWait, or given more than once (Retry-After in several
// fields); a RateLimit field that is not a Structured Fields List is
// ignored whole, and a member whose r or t is not an Integer alone.
func serverWait(resp *http.Response, now time.Time) (time.Duration, bool) {
	wait, asks := time.Duration(0), false
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if vs := resp.Header.Values("Retry-After"); len(vs) == 1 {
			if d, ok := retryAfter(vs[0], resp.Header.Get("Date"), now); ok {
				wait, asks = d, true
			}
		}
	}
	if vs := resp.Header.Values("RateLimit"); len(vs) > 0 {
		list, _ := parseList(strings.Join(vs, ", ")) // nil if it does not parse
		for _, m := range list {
			r, hasR := m.ints["r"]
			t, hasT := m.ints["t"]
			if m.inner || !hasR || r != 0 || !hasT || t < 0 || t > int64(maxServerWait/time.Second) {
				continue
			}
			wait, asks = max(wait, time.Duration(t)*time.Second), true
		}
	}
	return wait, asks
}

// retryAfter reads a Retry-After value v, a date measured against the
// Date field's value date if it is a valid HTTP-date, else against now.
func retryAfter(v, date string, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if v != "" && strings.Trim(v, "0123456789") == "" { // delay-seconds: 1*DIGIT
		if len(v) > 9 { // past maxServerWait, whatever its digits
			return 0, false
		}
		s, _ := strconv.Atoi(v)
		d := time.Duration(s) * time.Second
		return d, d <= maxServerWait
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if base, err := http.ParseTime(date); err == nil {
		now = base
	}
	d := max(at.Sub(now), 0)
	return d, d <= maxServerWait
}
