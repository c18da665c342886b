package httplimit

import (
	"net/http"
	"strings"
	"time"
)

// What a client reads of a server's answer: how long the server asks it
// to wait before its next request on the same key.

// maxServerWait is the longest wait a server's word is taken for: a longer
// one (a broken or hostile server's, or a quota that refills next month)
// counts as a day. A client holds a key for less than that (MaxHold).
const maxServerWait = 24 * time.Hour

// serverWait returns how long resp asks its client to wait before it
// sends again on the same key, and whether it asks: the longest of
//   - Retry-After, on a 429 or a 503 (RFC 9110, 10.2.3): delay-seconds,
//     or an HTTP-date, measured against resp's Date field if it holds a
//     valid one, else against now (a date past asks for no wait);
//   - the t (seconds) of each member of its RateLimit field whose r is 0
//     (draft-ietf-httpapi-ratelimit-headers): a policy, named by a
//     String, whose quota is spent until then, whatever the status;
//
// each at most maxServerWait. What does not parse is ignored, as is a
// value that is negative or given more than once (Retry-After in several
// fields); a RateLimit field that is not a Structured Fields List is
// ignored whole, a member that is not a String, or whose r or t is not an
// Integer, alone.
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
		spent, found := time.Duration(0), false // the longest t of a spent member
		ok := parseList(strings.Join(vs, ", "), func(m *sfMember) {
			r, hasR := m.integer("r")
			t, hasT := m.integer("t")
			if !m.inner && m.kind == sfString && hasR && r == 0 && hasT && t >= 0 {
				spent, found = max(spent, min(time.Duration(t), maxServerWait/time.Second)*time.Second), true
			}
		})
		if ok && found {
			wait, asks = max(wait, spent), true
		}
	}
	return wait, asks
}

// retryAfter reads a Retry-After value v, a date measured against the
// Date field's value date if it is a valid HTTP-date, else against now.
func retryAfter(v, date string, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if v != "" && strings.Trim(v, "0123456789") == "" { // delay-seconds: 1*DIGIT
		s := time.Duration(0)
		for i := 0; i < len(v) && s <= maxServerWait; i++ {
			s = 10*s + time.Duration(v[i]-'0')*time.Second
		}
		return min(s, maxServerWait), true
	}
	at, ok := httpDate(v, now)
	if !ok {
		return 0, false
	}
	if base, ok := httpDate(date, now); ok {
		now = base
	}
	return min(max(at.Sub(now), 0), maxServerWait), true
}

// httpDate parses v as an HTTP-date (RFC 9110, 5.6.7): IMF-fixdate, or
// one of the obsolete RFC 850 and asctime forms, all in GMT. RFC 850's
// two-digit year is the latest such year not more than 50 years after
// now, as RFC 9110 asks.
func httpDate(v string, now time.Time) (time.Time, bool) {
	for _, layout := range []string{http.TimeFormat, time.RFC850, time.ANSIC} {
		t, err := time.Parse(layout, v)
		switch {
		case err != nil:
			continue
		case layout != time.RFC850:
			return t.UTC(), true
		case !strings.HasSuffix(v, " GMT"):
			return time.Time{}, false // a zone other than GMT, which time.Parse reads by the machine's
		}
		for t.AddDate(100, 0, 0).Before(now.AddDate(50, 0, 1)) { // time.Parse reads 69 to 99 as 19xx, the rest as 20xx
			t = t.AddDate(100, 0, 0)
		}
		return t.UTC(), true
	}
	return time.Time{}, false
}
