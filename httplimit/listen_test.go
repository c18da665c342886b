package httplimit

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServerWait: what a client reads of a server's answer, field by
// field: the waits it takes, and the values it ignores.
func TestServerWait(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	date := now.Add(-10 * time.Second).Format(http.TimeFormat) // the server's clock, 10 s behind
	for _, c := range []struct {
		name   string
		status int
		fields [][2]string
		wait   time.Duration
		asks   bool
	}{
		{"429, delay-seconds", 429, [][2]string{{"Retry-After", "30"}}, 30 * time.Second, true},
		{"503, delay-seconds", 503, [][2]string{{"Retry-After", " 7 "}}, 7 * time.Second, true},
		{"429, zero", 429, [][2]string{{"Retry-After", "0"}}, 0, true},
		{"429, a date by the server's Date", 429, [][2]string{{"Retry-After", now.Add(20 * time.Second).Format(http.TimeFormat)}, {"Date", date}}, 30 * time.Second, true},
		{"429, a date by the client's clock", 429, [][2]string{{"Retry-After", now.Add(20 * time.Second).Format(http.TimeFormat)}}, 20 * time.Second, true},
		{"429, a date by an unreadable Date", 429, [][2]string{{"Retry-After", now.Add(20 * time.Second).Format(http.TimeFormat)}, {"Date", "yesterday"}}, 20 * time.Second, true},
		{"429, a date past", 429, [][2]string{{"Retry-After", now.Add(-time.Minute).Format(http.TimeFormat)}}, 0, true},
		{"429, nothing said", 429, nil, 0, false},
		{"503, nothing said", 503, nil, 0, false},
		{"200, Retry-After is not a refusal's", 200, [][2]string{{"Retry-After", "30"}}, 0, false},
		{"429, negative", 429, [][2]string{{"Retry-After", "-5"}}, 0, false},
		{"429, a fraction", 429, [][2]string{{"Retry-After", "1.5"}}, 0, false},
		{"429, signed", 429, [][2]string{{"Retry-After", "+5"}}, 0, false},
		{"429, text", 429, [][2]string{{"Retry-After", "soon"}}, 0, false},
		{"429, empty", 429, [][2]string{{"Retry-After", ""}}, 0, false},
		{"429, a day", 429, [][2]string{{"Retry-After", "86400"}}, 24 * time.Hour, true},
		{"429, past a day: a day", 429, [][2]string{{"Retry-After", "86401"}}, 24 * time.Hour, true},
		{"429, a hostile number of digits: a day", 429, [][2]string{{"Retry-After", "99999999999999999999999"}}, 24 * time.Hour, true},
		{"429, leading zeros", 429, [][2]string{{"Retry-After", "0000000000005"}}, 5 * time.Second, true},
		{"429, a date in a year: a day", 429, [][2]string{{"Retry-After", now.AddDate(1, 0, 0).Format(http.TimeFormat)}}, 24 * time.Hour, true},
		{"429, a date before the server's Date", 429, [][2]string{{"Retry-After", now.Add(-time.Minute).Format(http.TimeFormat)}, {"Date", date}}, 0, true},
		{"429, an RFC 850 date", 429, [][2]string{{"Retry-After", "Sunday, 06-Dec-26 12:00:30 GMT"}}, 30 * time.Second, true},
		{"429, an RFC 850 date 50 years on", 429, [][2]string{{"Retry-After", "Tuesday, 06-Dec-70 12:00:30 GMT"}}, 24 * time.Hour, true},
		{"429, an RFC 850 date in another zone", 429, [][2]string{{"Retry-After", "Sunday, 06-Dec-26 12:00:30 EST"}}, 0, false},
		{"429, an asctime date", 429, [][2]string{{"Retry-After", "Sun Dec  6 12:00:45 2026"}}, 45 * time.Second, true},
		{"429, an IMF-fixdate in another zone", 429, [][2]string{{"Retry-After", "Sun, 06 Dec 2026 12:00:30 EST"}}, 0, false},
		{"429, a Date in RFC 850 form", 429, [][2]string{{"Retry-After", now.Add(20 * time.Second).Format(http.TimeFormat)}, {"Date", "Sunday, 06-Dec-26 11:59:50 GMT"}}, 30 * time.Second, true},
		{"429, twice", 429, [][2]string{{"Retry-After", "5"}, {"Retry-After", "50"}}, 0, false},
		{"200, RateLimit spent", 200, [][2]string{{"RateLimit", `"default";r=0;t=12`}}, 12 * time.Second, true},
		{"200, RateLimit not spent", 200, [][2]string{{"RateLimit", `"default";r=3;t=12`}}, 0, false},
		{"200, RateLimit spent, no t", 200, [][2]string{{"RateLimit", `"default";r=0`}}, 0, false},
		{"200, the longest spent member", 200, [][2]string{{"RateLimit", `"a";r=0;t=4, "b";r=1;t=90, "c";r=0;t=9`}}, 9 * time.Second, true},
		{"200, members across fields", 200, [][2]string{{"RateLimit", `"a";r=0;t=4`}, {"RateLimit", `"c";r=0;t=9`}}, 9 * time.Second, true},
		{"429, the longer of both", 429, [][2]string{{"Retry-After", "5"}, {"RateLimit", `"a";r=0;t=8`}}, 8 * time.Second, true},
		{"429, the longer of both, Retry-After", 429, [][2]string{{"Retry-After", "15"}, {"RateLimit", `"a";r=0;t=8`}}, 15 * time.Second, true},
		{"200, r and t not Integers", 200, [][2]string{{"RateLimit", `"a";r=0.0;t=8, "b";r=0;t="8", "c";r;t=8`}}, 0, false},
		{"200, the last r counts", 200, [][2]string{{"RateLimit", `"a";r=0;t=8;r=2`}}, 0, false},
		{"200, negative t", 200, [][2]string{{"RateLimit", `"a";r=0;t=-8`}}, 0, false},
		{"200, spent now", 200, [][2]string{{"RateLimit", `"a";r=0;t=0`}}, 0, true},
		{"200, t past a day: a day", 200, [][2]string{{"RateLimit", `"a";r=0;t=999999999999999, "b";r=0;t=3`}}, 24 * time.Hour, true},
		{"200, a member not a String", 200, [][2]string{{"RateLimit", `a;r=0;t=8, 5;r=0;t=8, :YWJj:;r=0;t=8`}}, 0, false},
		{"200, an over-padded Byte Sequence elsewhere", 200, [][2]string{{"RateLimit", `"a";r=0;t=8;k=:YWJj==:`}}, 0, false},
		{"200, an inner list", 200, [][2]string{{"RateLimit", `("a" "b");r=0;t=8`}}, 0, false},
		{"200, a List that does not parse", 200, [][2]string{{"RateLimit", `"a";r=0;t=8, "b";r=0;t=9,`}}, 0, false},
		{"200, another List that does not parse", 200, [][2]string{{"RateLimit", `"a";r=0;t=8 "b"`}}, 0, false},
		{"429, a broken RateLimit, Retry-After read", 429, [][2]string{{"Retry-After", "6"}, {"RateLimit", `"a";R=0;t=60`}}, 6 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: c.status, Header: http.Header{}}
			for _, f := range c.fields {
				resp.Header.Add(f[0], f[1])
			}
			wait, asks := serverWait(resp, now)
			assert.Equal(t, c.wait, wait)
			assert.Equal(t, c.asks, asks)
		})
	}
}

// member is what parseList hands over of a member, kept.
type member struct {
	inner bool
	kind  sfKind
	ints  map[string]int64 // its Integer parameters (their last values), or nil
}

// members parses s, keeping each member parseList hands over.
func members(s string) ([]member, bool) {
	var list []member
	ok := parseList(s, func(m *sfMember) {
		k := member{inner: m.inner, kind: m.kind}
		for _, p := range m.params {
			if n, ok := m.integer(p.key); ok {
				if k.ints == nil {
					k.ints = map[string]int64{}
				}
				k.ints[p.key] = n
			}
		}
		list = append(list, k)
	})
	return list, ok
}

// TestParseList: Lists of every type of bare item, parsed or refused as
// RFC 9651 says, and the Integer parameters of their members.
func TestParseList(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		ints []map[string]int64
	}{
		{``, true, nil},
		{`"a";r=0;t=12`, true, []map[string]int64{{"r": 0, "t": 12}}},
		{`tok;r=-3, 4.5;t=1, ?1, @1700000000;x=2, :YWJj:, %"caf%c3%a9", *star;a;b=?0`, true,
			[]map[string]int64{{"r": -3}, {"t": 1}, nil, {"x": 2}, nil, nil, nil}},
		{`(1 "two" three);r=1, ()`, true, []map[string]int64{{"r": 1}, nil}},
		{`a;r=1;r=2`, true, []map[string]int64{{"r": 2}}},
		{`a;r=1;r="x"`, true, []map[string]int64{nil}},
		{`a,	b`, true, []map[string]int64{nil, nil}},
		{`a;x=999999999999999`, true, []map[string]int64{{"x": 999999999999999}}},
		{`a;x=1000000000000000`, false, nil}, // 16 digits
		{`a;x=123456789012.123`, true, []map[string]int64{nil}},
		{`a;x=1234567890123.1`, false, nil}, // 13 digits before '.'
		{`a;x=1.1234`, false, nil},
		{`a;x=1.`, false, nil},
		{`a;x=-`, false, nil},
		{`a;X=1`, false, nil},
		{`a; x=1`, true, []map[string]int64{{"x": 1}}},
		{`a ;x=1`, false, nil},
		{`a,`, false, nil},
		{`,a`, false, nil},
		{`a b`, false, nil},
		{`"unterminated`, false, nil},
		{`"bad \n escape"`, false, nil},
		{`?2`, false, nil},
		{`@1.5`, false, nil},
		{`%"bad %C3%A9"`, false, nil},
		{`%"bad utf-8 %c3"`, false, nil},
		{`:not base64!:`, false, nil},
		{`:YWI:;x=1, :YWI=:, ::`, true, []map[string]int64{{"x": 1}, nil, nil}}, // padding optional
		{`:Y=WI:`, false, nil},
		{`:YWJj=:`, false, nil}, // padding, but wrong
		{`:YWI==:`, false, nil},
		{`:=:`, false, nil},
		{`(a b`, false, nil},
		{`(a,b)`, false, nil},
		{"\x00", false, nil},
	} {
		list, ok := members(c.in)
		require.Equal(t, c.ok, ok, "%q", c.in)
		if !ok {
			continue
		}
		require.Len(t, list, len(c.ints), "%q", c.in)
		for i, m := range list {
			assert.Equal(t, c.ints[i], m.ints, "%q, member %d", c.in, i)
		}
	}
	list, ok := members(`"name";r=0, (1 "two");r=1, tok, "x"`)
	require.True(t, ok)
	assert.Equal(t, []member{
		{kind: sfString, ints: map[string]int64{"r": 0}},
		{inner: true, ints: map[string]int64{"r": 1}},
		{kind: sfOther},
		{kind: sfString},
	}, list, "Items' types, and Inner Lists")
}

// FuzzParseList: parseList accepts what httpsfv, a parser of the whole of
// RFC 9651, accepts (and more only where a Byte Sequence lacks its '='
// padding, which RFC 9651 asks parsers to allow and httpsfv refuses: a
// base64 error of httpsfv's), and finds the same members, Inner Lists,
// Items' Strings and Integer parameters.
func FuzzParseList(f *testing.F) {
	for _, s := range []string{
		`"default";r=0;t=30`, `"a";r=5;t=1, "b";r=0;t=9`, `(1 2);q=3, x;y`, `4.5, ?1, @12;z=-1`,
		`:YWJj:, %"caf%c3%a9"`, `a;r=1;r="x"`, `a,  b`, `a;x=1.1234`, `:YWI:`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		list, ok := members(s)
		want, err := httpsfv.UnmarshalList([]string{s})
		if err != nil {
			if ok && !errors.As(err, new(base64.CorruptInputError)) {
				t.Fatalf("%q: parsed, where httpsfv says %v", s, err)
			}
			return
		}
		if !ok {
			t.Fatalf("%q: did not parse, where httpsfv parses it", s)
		}
		require.Len(t, list, len(want))
		for i, m := range want {
			var params *httpsfv.Params
			switch m := m.(type) {
			case httpsfv.Item:
				require.False(t, list[i].inner, "%q, member %d", s, i)
				_, isString := m.Value.(string)
				require.Equal(t, isString, list[i].kind == sfString, "%q, member %d", s, i)
				params = m.Params
			case httpsfv.InnerList:
				require.True(t, list[i].inner, "%q, member %d", s, i)
				params = m.Params
			}
			ints := map[string]int64{}
			for _, k := range params.Names() {
				v, _ := params.Get(k)
				if n, ok := v.(int64); ok {
					ints[k] = n
				}
			}
			if len(ints) == 0 {
				ints = nil
			}
			require.Equal(t, ints, list[i].ints, "%q, member %d", s, i)
		}
	})
}

// FuzzServerWait: whatever a server answers, reading it never panics,
// and never asks for a wait that is negative or past maxServerWait.
func FuzzServerWait(f *testing.F) {
	f.Add(429, "30", `"a";r=0;t=5`, "")
	f.Add(503, "Sun, 06 Dec 2026 12:00:30 GMT", "", "Sun, 06 Dec 2026 12:00:00 GMT")
	f.Add(200, "", `"a";r=0;t=86400, "b";r=0;t=-1`, "")
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status int, retry, rateLimit, date string) {
		resp := &http.Response{StatusCode: status, Header: http.Header{}}
		for k, v := range map[string]string{"Retry-After": retry, "RateLimit": rateLimit, "Date": date} {
			if v != "" {
				resp.Header.Set(k, v)
			}
		}
		wait, asks := serverWait(resp, now)
		if wait < 0 || wait > maxServerWait || (!asks && wait != 0) {
			t.Fatalf("status %d, Retry-After %q, RateLimit %q, Date %q: wait %v, asks %v", status, retry, rateLimit, date, wait, asks)
		}
	})
}

// TestServerWaitLargeField: a hostile server's large RateLimit field is
// read in one pass, making nothing for each of its members: a field of
// 60,000 members (900 kB) takes as few allocations as one of one.
func TestServerWaitLargeField(t *testing.T) {
	field := strings.Repeat(`"a";r=1;t=2;x=:YWJj:, (b c);r=0;t=7, `, 30_000) + `"z";r=0;t=4`
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Ratelimit": {field}}}
	wait, asks := serverWait(resp, time.Time{})
	require.True(t, asks)
	require.Equal(t, 4*time.Second, wait, "Inner Lists are not members a client reads")
	one := &http.Response{StatusCode: 200, Header: http.Header{"Ratelimit": {`"a";r=1;t=2;x=:YWJj:, (b c);r=0;t=7, "z";r=0;t=4`}}}
	assert.Equal(t, testing.AllocsPerRun(5, func() { serverWait(one, time.Time{}) }),
		testing.AllocsPerRun(5, func() { serverWait(resp, time.Time{}) }))
}
