package chanlimit_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chanlimit/chanlimit"
)

// FuzzPolicyJSON: whatever the bytes, UnmarshalJSON never panics; it
// refuses with an ErrInvalidConfig and leaves the Policy as it was, or
// accepts only JSON, and then what it read marshals to JSON that reads
// back as the same Policy, and marshals again to the same bytes. The same
// bytes as the one policy of an array: ParsePolicies reads them as
// UnmarshalJSON does (and then checks them as New).
func FuzzPolicyJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`, `null`, `[]`, ``, `{"limit":1,}`, `{} {}`,
		`{"name":"minute","algorithm":"sliding_window_log","limit":100,"window":"1m30s","burst":0,"dry_run":true}`,
		`{"limit":1e3,"window":"-2562047h47m16.854775808s","burst":-9223372036854775808}`,
		`{"limit":1.5}`, `{"limit":1e-99999999999}`, `{"limit":9223372036854775808}`,
		`{"window":90}`, `{"window":"1.000000001s"}`, `{"window":"1µs"}`, `{"window":null}`,
		`{"Window":"1s"}`, `{"limit":1,"limit":2}`, `{"n\u0061me":"\ud800\u00e9"}`, "{\"name\":\"\xff\"}",
		`{"Name":"a","Algorithm":"","Limit":1,"Window":90000000000,"Burst":0,"DryRun":false}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		before := chanlimit.Policy{Name: "before", Limit: 7, Window: time.Hour, DryRun: true}
		p := before
		if err := p.UnmarshalJSON(data); err != nil {
			if !errors.Is(err, chanlimit.ErrInvalidConfig) {
				t.Fatalf("UnmarshalJSON(%q) = %v: not an ErrInvalidConfig", data, err)
			}
			if p != before {
				t.Fatalf("UnmarshalJSON(%q) = %v, and changed the policy to %+v", data, err, p)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("UnmarshalJSON(%q) accepted what is not JSON: %+v", data, p)
		}
		b, err := p.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON(%+v), read from %q: %v", p, data, err)
		}
		var q chanlimit.Policy
		if err := q.UnmarshalJSON(b); err != nil || q != p {
			t.Fatalf("UnmarshalJSON(%s) = %+v, %v; want %+v, read from %q", b, q, err, p, data)
		}
		if b2, err := q.MarshalJSON(); err != nil || string(b2) != string(b) {
			t.Fatalf("MarshalJSON(%+v) = %s, %v; want %s", q, b2, err, b)
		}
		if p == before { // null: nothing to check as an element, which null is not
			return
		}
		ps, err := chanlimit.ParsePolicies(append(append([]byte("[\n"), data...), "\n]"...))
		if err == nil && (len(ps) != 1 || ps[0] != p) {
			t.Fatalf("ParsePolicies([%s]) = %+v, want [%+v]", data, ps, p)
		}
		if !errors.Is(err, chanlimit.ErrInvalidConfig) && err != nil {
			t.Fatalf("ParsePolicies([%s]) = %v: not an ErrInvalidConfig", data, err)
		}
	})
}

// FuzzPolicyRoundTrip: every Policy whose strings JSON can hold (valid
// UTF-8) marshals, by MarshalJSON and by encoding/json, to JSON that reads
// back as itself; one whose strings it cannot is an ErrInvalidConfig.
func FuzzPolicyRoundTrip(f *testing.F) {
	f.Add("second", "", 10, int64(time.Second), 0, false)
	f.Add("minute", "sliding_window_log", 100, int64(90*time.Second+1), 5, true)
	f.Add("", "", math.MinInt, int64(math.MinInt64), math.MaxInt, false)
	f.Add("é<&>\"\\\x00", "\u2028", -1, int64(-1), -1, true)
	f.Add("\xff", "", 1, int64(1), 0, false)
	f.Fuzz(func(t *testing.T, name, algorithm string, limit int, window int64, burst int, dryRun bool) {
		p := chanlimit.Policy{Name: name, Algorithm: algorithm, Limit: limit, Window: time.Duration(window), Burst: burst, DryRun: dryRun}
		b, err := p.MarshalJSON()
		holdable := utf8.ValidString(name) && utf8.ValidString(algorithm)
		if holdable != (err == nil) || err != nil && !errors.Is(err, chanlimit.ErrInvalidConfig) {
			t.Fatalf("MarshalJSON(%+v) = %s, %v", p, b, err)
		}
		if err != nil {
			return
		}
		var q chanlimit.Policy
		if err := q.UnmarshalJSON(b); err != nil || q != p {
			t.Fatalf("UnmarshalJSON(%s) = %+v, %v; want %+v", b, q, err, p)
		}
		b, err = json.Marshal(p)
		if err != nil {
			t.Fatalf("json.Marshal(%+v): %v", p, err)
		}
		q = chanlimit.Policy{}
		if err := json.Unmarshal(b, &q); err != nil || q != p {
			t.Fatalf("json.Unmarshal(%s) = %+v, %v; want %+v", b, q, err, p)
		}
	})
}
