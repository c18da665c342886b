package chanlimit_test

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit"
)

// keysMsg is the end of the error for a key a policy does not have.
const keysMsg = `: a policy's keys are "name", "algorithm", "limit", "window", "burst" and "dry_run"`

// untouched is the Policy the UnmarshalJSON steps start from, to see that
// a refusal leaves it as it was and that an acceptance sets every field.
var untouched = chanlimit.Policy{Name: "before", Algorithm: "gcra", Limit: 7, Window: time.Hour, Burst: 3, DryRun: true}

// unmarshalStep is one UnmarshalJSON of give into untouched.
type unmarshalStep struct {
	give string
	want chanlimit.Policy // acceptUnmarshal's
	err  string           // refuseUnmarshal's: the whole message
}

// acceptUnmarshal runs steps that UnmarshalJSON accepts, each setting
// every field of untouched.
func acceptUnmarshal(t *testing.T, steps []unmarshalStep) {
	t.Helper()
	for i, st := range steps {
		p := untouched
		err := p.UnmarshalJSON([]byte(st.give))
		assert.NoError(t, err, "step %d: UnmarshalJSON(%s)", i, st.give)
		assert.Equal(t, st.want, p, "step %d: UnmarshalJSON(%s) = %+v, want %+v", i, st.give, p, st.want)
	}
}

// refuseUnmarshal runs steps that UnmarshalJSON refuses, each leaving
// untouched as it was.
func refuseUnmarshal(t *testing.T, steps []unmarshalStep) {
	t.Helper()
	for i, st := range steps {
		p := untouched
		err := p.UnmarshalJSON([]byte(st.give))
		assert.ErrorIs(t, err, chanlimit.ErrInvalidConfig, "step %d: UnmarshalJSON(%s)", i, st.give)
		assert.EqualError(t, err, st.err, "step %d: UnmarshalJSON(%s)", i, st.give)
		assert.Equal(t, untouched, p, "step %d: UnmarshalJSON(%s) changed the policy to %+v", i, st.give, p)
	}
}

func TestPolicyUnmarshalJSON(t *testing.T) {
	acceptUnmarshal(t, []unmarshalStep{
		{give: `{}`, want: chanlimit.Policy{}},
		{give: ` { } `, want: chanlimit.Policy{}},
		{
			give: `{"name":"minute","algorithm":"sliding_window_log","limit":100,"window":"1m30s","burst":0,"dry_run":true}`,
			want: chanlimit.Policy{Name: "minute", Algorithm: "sliding_window_log", Limit: 100, Window: 90 * time.Second, DryRun: true},
		},
		{give: "{\n\t\"dry_run\": false,\n\t\"window\": \"1s\",\n\t\"limit\": 5\n}", want: chanlimit.Policy{Limit: 5, Window: time.Second}},
		{give: `{"n\u0061me":"\u00e9t\u00e9"}`, want: chanlimit.Policy{Name: "été"}}, // the form only: New wants ASCII
		{give: `{"name":"","algorithm":"","limit":0,"window":"0s","burst":0,"dry_run":false}`, want: chanlimit.Policy{}},
		{give: `{"burst":-3,"limit":-1,"window":"-1ns"}`, want: chanlimit.Policy{Limit: -1, Window: -1, Burst: -3}}, // New refuses it
		{give: `{"window":"1.000000001s"}`, want: chanlimit.Policy{Window: time.Second + 1}},
		{give: `{"window":"1µs"}`, want: chanlimit.Policy{Window: time.Microsecond}},
		{give: `{"window":"1us"}`, want: chanlimit.Policy{Window: time.Microsecond}},
		{give: `{"window":"2562047h47m16.854775807s"}`, want: chanlimit.Policy{Window: math.MaxInt64}},
		{give: `{"window":"-2562047h47m16.854775808s"}`, want: chanlimit.Policy{Window: math.MinInt64}},
		{give: `{"limit":-0}`, want: chanlimit.Policy{}},
		{give: `{"limit":9223372036854775807}`, want: chanlimit.Policy{Limit: math.MaxInt64}},
		{give: `{"limit":-9223372036854775808}`, want: chanlimit.Policy{Limit: math.MinInt64}},
	})
}

func TestPolicyUnmarshalJSONRefuses(t *testing.T) {
	const invalid = "chanlimit: invalid config: "
	refuseUnmarshal(t, []unmarshalStep{
		// Keys: exactly these six, each once.
		{give: `{"Window":"1s"}`, err: invalid + `"Window": no such key (keys are spelled exactly: "window")` + keysMsg},
		{give: `{"Name":"x"}`, err: invalid + `"Name": no such key (keys are spelled exactly: "name")` + keysMsg},
		{give: `{"DryRun":true}`, err: invalid + `"DryRun": no such key (keys are spelled exactly: "dry_run")` + keysMsg},
		{give: `{"period":"1s"}`, err: invalid + `"period": no such key` + keysMsg},
		{give: `{"limit":1,"limit":2}`, err: invalid + `limit: the key is given twice`},
		{give: `{"window":"1s","limit":1,"window":"1s"}`, err: invalid + `window: the key is given twice`},
		// window: a duration string, never a number.
		{give: `{"window":90}`, err: invalid + `window: the number 90 is not a duration, for it has no unit: write a string such as "1m30s"`},
		{give: `{"window":1e9}`, err: invalid + `window: the number 1e9 is not a duration, for it has no unit: write a string such as "1m30s"`},
		{give: `{"window":"90"}`, err: invalid + `window: time: missing unit in duration "90": write a duration such as "1m30s", "500ms" or "2h"`},
		{give: `{"window":""}`, err: invalid + `window: time: invalid duration "": write a duration such as "1m30s", "500ms" or "2h"`},
		{give: `{"window":"1 m"}`, err: invalid + `window: time: unknown unit " m" in duration "1 m": write a duration such as "1m30s", "500ms" or "2h"`},
		{give: `{"window":"2562047h47m16.854775808s"}`, err: invalid + `window: time: invalid duration "2562047h47m16.854775808s": write a duration such as "1m30s", "500ms" or "2h"`},
		{give: `{"window":null}`, err: invalid + `window: a duration string such as "1m30s" is needed (got null: leave the key out for the zero value)`},
		{give: `{"window":true}`, err: invalid + `window: a duration string such as "1m30s" is needed (got true)`},
		{give: `{"window":["1s"]}`, err: invalid + `window: a duration string such as "1m30s" is needed (got an array)`},
		// limit and burst: integers an int holds.
		{give: `{"limit":1e3}`, err: invalid + `limit: an integer written with digits alone is needed (got the number 1e3)`},
		{give: `{"limit":1000.0}`, err: invalid + `limit: an integer written with digits alone is needed (got the number 1000.0)`},
		{give: `{"limit":1.5}`, err: invalid + `limit: an integer written with digits alone is needed (got the number 1.5)`},
		{give: `{"limit":1e-3}`, err: invalid + `limit: an integer written with digits alone is needed (got the number 1e-3)`},
		{give: `{"limit":1e-99999999999}`, err: invalid + `limit: an integer written with digits alone is needed (got the number 1e-99999999999)`},
		{give: `{"burst":10.000000001}`, err: invalid + `burst: an integer written with digits alone is needed (got the number 10.000000001)`},
		{give: `{"limit":"10"}`, err: invalid + `limit: an integer is needed (got the string "10")`},
		{give: `{"limit":true}`, err: invalid + `limit: an integer is needed (got true)`},
		{give: `{"limit":{}}`, err: invalid + `limit: an integer is needed (got an object)`},
		{give: `{"burst":null}`, err: invalid + `burst: an integer is needed (got null: leave the key out for the zero value)`},
		{give: `{"limit":9223372036854775808}`, err: invalid + `limit: out of the range of an int (-9223372036854775808 to 9223372036854775807) (got the number 9223372036854775808)`},
		{give: `{"limit":-9223372036854775809}`, err: invalid + `limit: out of the range of an int (-9223372036854775808 to 9223372036854775807) (got the number -9223372036854775809)`},
		{give: `{"limit":1e19}`, err: invalid + `limit: an integer written with digits alone is needed (got the number 1e19)`},
		{give: `{"limit":9.3e18}`, err: invalid + `limit: an integer written with digits alone is needed (got the number 9.3e18)`},
		{give: `{"burst":1e99999999999}`, err: invalid + `burst: an integer written with digits alone is needed (got the number 1e99999999999)`},
		// name, algorithm: strings; dry_run: a bool.
		{give: `{"name":1}`, err: invalid + `name: a string is needed (got the number 1)`},
		{give: `{"algorithm":null}`, err: invalid + `algorithm: a string is needed (got null: leave the key out for the zero value)`},
		{give: `{"dry_run":"true"}`, err: invalid + `dry_run: true or false is needed (got the string "true")`},
		{give: `{"dry_run":1}`, err: invalid + `dry_run: true or false is needed (got the number 1)`},
		// Not an object, or not JSON.
		{give: `[]`, err: invalid + `a policy is a JSON object (got an array)`},
		{give: `"1m"`, err: invalid + `a policy is a JSON object (got the string "1m")`},
		{give: ``, err: invalid + `JSON: unexpected EOF`},
		{give: `{"limit":1`, err: invalid + `JSON: unexpected EOF`},
		{give: `{"limit":1,}`, err: invalid + `JSON: invalid character '}' looking for beginning of object key string`},
		{give: `{"limit" 1}`, err: invalid + `JSON: invalid character '1' after object key`},
		{give: `{} {}`, err: invalid + `JSON: more after the policy: an object`},
		{give: `{} x`, err: invalid + `JSON: invalid character 'x' looking for beginning of value`},
		// encoding/json's own form of a Policy before it had MarshalJSON.
		{give: `{"Name":"a","Algorithm":"","Limit":1,"Window":90000000000,"Burst":0,"DryRun":false}`, err: invalid + `"Name": no such key (keys are spelled exactly: "name")` + keysMsg},
	})
}

// TestPolicyUnmarshalJSONNull: a JSON null leaves the Policy as it was,
// as encoding/json does with null.
func TestPolicyUnmarshalJSONNull(t *testing.T) {
	p := untouched
	require.NoError(t, p.UnmarshalJSON([]byte(" null ")))
	assert.Equal(t, untouched, p)
}

// TestPolicyUnmarshalJSONSyntaxError: JSON that is not JSON is an
// ErrInvalidConfig with the decoder's *json.SyntaxError.
func TestPolicyUnmarshalJSONSyntaxError(t *testing.T) {
	var p chanlimit.Policy
	err := p.UnmarshalJSON([]byte(`{"limit":1,}`))
	require.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
	var syntax *json.SyntaxError
	assert.ErrorAs(t, err, &syntax)

	for _, short := range []string{`[{"limit": 1, "window": "1s"}`, `[{`, ``} { // JSON that ends too soon
		_, err := chanlimit.ParsePolicies([]byte(short))
		require.ErrorIs(t, err, chanlimit.ErrInvalidConfig, "%q", short)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "%q", short)
	}
}

func TestPolicyMarshalJSON(t *testing.T) {
	steps := []struct {
		give chanlimit.Policy
		want string
	}{
		{chanlimit.Policy{}, `{}`},
		{
			chanlimit.Policy{Name: "minute", Algorithm: "sliding_window_log", Limit: 100, Window: 90 * time.Second, Burst: 5, DryRun: true},
			`{"name":"minute","algorithm":"sliding_window_log","limit":100,"window":"1m30s","burst":5,"dry_run":true}`,
		},
		{chanlimit.Policy{Limit: 10, Window: time.Second}, `{"limit":10,"window":"1s"}`},
		{chanlimit.Policy{Window: time.Second + 1}, `{"window":"1.000000001s"}`},
		{chanlimit.Policy{Window: 1500 * time.Nanosecond}, `{"window":"1.5µs"}`},
		{chanlimit.Policy{Window: -1}, `{"window":"-1ns"}`},
		{chanlimit.Policy{Window: math.MinInt64}, `{"window":"-2562047h47m16.854775808s"}`},
		{chanlimit.Policy{Limit: math.MinInt64, Burst: -1}, `{"limit":-9223372036854775808,"burst":-1}`},
		{chanlimit.Policy{Name: `a "b" \ <c>`}, `{"name":"a \"b\" \\ \u003cc\u003e"}`},
		{chanlimit.Policy{Name: "x\x7f\n"}, `{"name":"x` + "\x7f" + `\n"}`},
		{chanlimit.Policy{DryRun: true}, `{"dry_run":true}`},
	}
	for i, st := range steps {
		got, err := st.give.MarshalJSON()
		require.NoError(t, err, "step %d: MarshalJSON(%+v)", i, st.give)
		assert.Equal(t, st.want, string(got), "step %d: MarshalJSON(%+v) = %s, want %s", i, st.give, got, st.want)
	}
}

// TestPolicyMarshalJSONInvalidUTF8: a name JSON cannot hold is an error,
// not a name changed on the way.
func TestPolicyMarshalJSONInvalidUTF8(t *testing.T) {
	_, err := chanlimit.Policy{Name: "a\xffb", Limit: 1}.MarshalJSON()
	require.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
	assert.EqualError(t, err, `chanlimit: invalid config: Name: "a\xffb" is not valid UTF-8, which a JSON string cannot hold`)
	_, err = json.Marshal(chanlimit.Policy{Algorithm: "\xc3"})
	assert.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
	assert.ErrorContains(t, err, "Algorithm: ")
}

// roundTrips are policies whose JSON must read back as themselves.
var roundTrips = []chanlimit.Policy{
	{},
	{Name: "second", Limit: 10, Window: time.Second},
	{Name: "minute", Algorithm: "sliding_window_log", Limit: 100, Window: time.Minute, DryRun: true},
	{Name: "b", Algorithm: "gcra", Limit: 3, Window: 90*time.Second + 1, Burst: 9},
	{Window: 1}, {Window: -1}, {Window: -90 * time.Second}, {Window: 999 * time.Microsecond}, {Window: 1001 * time.Millisecond},
	{Window: math.MaxInt64}, {Window: math.MinInt64}, {Window: math.MinInt64 + 1},
	{Limit: math.MaxInt64, Burst: math.MinInt64}, {Limit: -1, Burst: 1},
	{Name: "é \x00 \u2028 <&> \"\\", Algorithm: "\t"},
	{Name: "\ufffd"},
}

// TestPolicyJSONRoundTrip: Unmarshal(Marshal(p)) == p, by the methods and
// by encoding/json, which compacts and escapes what MarshalJSON writes.
func TestPolicyJSONRoundTrip(t *testing.T) {
	for i, p := range roundTrips {
		b, err := p.MarshalJSON()
		require.NoError(t, err, "step %d: MarshalJSON(%+v)", i, p)
		var got chanlimit.Policy
		require.NoError(t, got.UnmarshalJSON(b), "step %d: UnmarshalJSON(%s)", i, b)
		assert.Equal(t, p, got, "step %d: UnmarshalJSON(MarshalJSON(%+v)) = %+v", i, p, got)

		b, err = json.Marshal(p)
		require.NoError(t, err, "step %d: json.Marshal(%+v)", i, p)
		got = chanlimit.Policy{}
		require.NoError(t, json.Unmarshal(b, &got), "step %d: json.Unmarshal(%s)", i, b)
		assert.Equal(t, p, got, "step %d: json.Unmarshal(json.Marshal(%+v)) = %+v", i, p, got)
	}
	b, err := json.Marshal(roundTrips)
	require.NoError(t, err)
	var got []chanlimit.Policy
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, roundTrips, got)
}

// appConfig is a program's own configuration, with its policies among
// its other settings, read with encoding/json alone.
type appConfig struct {
	Listen   string             `json:"listen"`
	Policies []chanlimit.Policy `json:"policies"`
	Admin    *chanlimit.Policy  `json:"admin,omitempty"`
}

// TestPoliciesInAUserStruct: a []Policy field of a program's own
// configuration reads and writes with plain encoding/json, keys spelled
// exactly, and what it reads New takes.
func TestPoliciesInAUserStruct(t *testing.T) {
	const file = `{
		"listen": ":8080",
		"policies": [
			{"name": "second", "limit": 10, "window": "1s"},
			{"name": "minute", "algorithm": "sliding_window_log", "limit": 100, "window": "1m30s", "dry_run": true}
		],
		"admin": {"limit": 1, "window": "1h"}
	}`
	var cfg appConfig
	require.NoError(t, json.Unmarshal([]byte(file), &cfg))
	want := appConfig{
		Listen: ":8080",
		Policies: []chanlimit.Policy{
			{Name: "second", Limit: 10, Window: time.Second},
			{Name: "minute", Algorithm: "sliding_window_log", Limit: 100, Window: 90 * time.Second, DryRun: true},
		},
		Admin: &chanlimit.Policy{Limit: 1, Window: time.Hour},
	}
	assert.Equal(t, want, cfg)

	r, err := chanlimit.New(chanlimit.Config{Policies: cfg.Policies})
	require.NoError(t, err)
	require.NoError(t, r.Close())

	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	assert.Equal(t, `{"listen":":8080","policies":[{"name":"second","limit":10,"window":"1s"},{"name":"minute","algorithm":"sliding_window_log","limit":100,"window":"1m30s","dry_run":true}],"admin":{"limit":1,"window":"1h0m0s"}}`, string(b))
	var again appConfig
	require.NoError(t, json.Unmarshal(b, &again))
	assert.Equal(t, cfg, again)
}

// TestPoliciesInAUserStructRefused: encoding/json hands on Policy's
// errors as they are: an ErrInvalidConfig naming the key. The values are
// New's to check.
func TestPoliciesInAUserStructRefused(t *testing.T) {
	steps := []struct {
		give string
		err  string
	}{
		{`{"policies":[{"limit":1,"Window":"1s"}]}`, `chanlimit: invalid config: "Window": no such key (keys are spelled exactly: "window")` + keysMsg},
		{`{"policies":[{"limit":1,"window":90}]}`, `chanlimit: invalid config: window: the number 90 is not a duration, for it has no unit: write a string such as "1m30s"`},
		{`{"policies":[{"limit":1.5,"window":"1s"}]}`, `chanlimit: invalid config: limit: an integer written with digits alone is needed (got the number 1.5)`},
		{`{"policies":[{"limit":1,"limit":1}]}`, `chanlimit: invalid config: limit: the key is given twice`},
		{`{"admin":[]}`, `chanlimit: invalid config: a policy is a JSON object (got an array)`},
	}
	for i, st := range steps {
		var cfg appConfig
		err := json.Unmarshal([]byte(st.give), &cfg)
		assert.ErrorIs(t, err, chanlimit.ErrInvalidConfig, "step %d: json.Unmarshal(%s)", i, st.give)
		assert.EqualError(t, err, st.err, "step %d: json.Unmarshal(%s)", i, st.give)
	}

	var cfg appConfig
	require.NoError(t, json.Unmarshal([]byte(`{"policies":[{"name":"m","window":"1m"}]}`), &cfg))
	_, err := chanlimit.New(chanlimit.Config{Policies: cfg.Policies})
	assert.EqualError(t, err, `chanlimit: invalid config: Policies[0] ("m"): Limit: must be > 0 (got 0)`)
}

// TestPoliciesInAUserStructNull: encoding/json's custom for null: a null
// policy in a program's own array is the zero Policy, which New refuses
// (ParsePolicies refuses the null itself).
func TestPoliciesInAUserStructNull(t *testing.T) {
	var cfg appConfig
	require.NoError(t, json.Unmarshal([]byte(`{"policies":[{"limit":1,"window":"1s"},null],"admin":null}`), &cfg))
	assert.Equal(t, appConfig{Policies: []chanlimit.Policy{{Limit: 1, Window: time.Second}, {}}}, cfg)
	_, err := chanlimit.New(chanlimit.Config{Policies: cfg.Policies})
	assert.EqualError(t, err, `chanlimit: invalid config: Policies[1] ("default"): Name: Policies[0] has that name too: names are unique`)
}

// parseStep is one ParsePolicies of give.
type parseStep struct {
	give string
	want []chanlimit.Policy // acceptParse's
	err  string             // refuseParse's: the whole message
}

// acceptParse runs steps that ParsePolicies accepts.
func acceptParse(t *testing.T, steps []parseStep) {
	t.Helper()
	for i, st := range steps {
		got, err := chanlimit.ParsePolicies([]byte(st.give))
		assert.NoError(t, err, "step %d: ParsePolicies(%s)", i, st.give)
		assert.Equal(t, st.want, got, "step %d: ParsePolicies(%s) = %+v, want %+v", i, st.give, got, st.want)
	}
}

// refuseParse runs steps that ParsePolicies refuses.
func refuseParse(t *testing.T, steps []parseStep) {
	t.Helper()
	for i, st := range steps {
		got, err := chanlimit.ParsePolicies([]byte(st.give))
		assert.ErrorIs(t, err, chanlimit.ErrInvalidConfig, "step %d: ParsePolicies(%s)", i, st.give)
		assert.EqualError(t, err, st.err, "step %d: ParsePolicies(%s)", i, st.give)
		assert.Nil(t, got, "step %d: ParsePolicies(%s)", i, st.give)
	}
}

func TestParsePolicies(t *testing.T) {
	acceptParse(t, []parseStep{
		{
			give: `[{"limit": 3, "window": "1s"}]`,
			want: []chanlimit.Policy{{Limit: 3, Window: time.Second}}, // as written: Name "" is "default" in New
		},
		{
			give: `[
				{"name": "second", "limit": 10, "window": "1s", "burst": 20},
				{"name": "minute", "algorithm": "sliding_window_log", "limit": 100, "window": "1m30s"},
				{"name": "shadow", "algorithm": "gcra", "limit": 5, "window": "1s", "dry_run": true}
			]`,
			want: []chanlimit.Policy{
				{Name: "second", Limit: 10, Window: time.Second, Burst: 20},
				{Name: "minute", Algorithm: "sliding_window_log", Limit: 100, Window: 90 * time.Second},
				{Name: "shadow", Algorithm: "gcra", Limit: 5, Window: time.Second, DryRun: true},
			},
		},
	})
}

func TestParsePoliciesRefuses(t *testing.T) {
	const (
		invalid = "chanlimit: invalid config: "
		ok      = `{"name": "ok", "limit": 1, "window": "1s"}`
	)
	refuseParse(t, []parseStep{
		// Not an array of objects.
		{give: `null`, err: invalid + `Policies: a JSON array of policies is needed (got null)`},
		{give: `{"limit": 1, "window": "1s"}`, err: invalid + `Policies: a JSON array of policies is needed (got an object)`},
		{give: `"[]"`, err: invalid + `Policies: a JSON array of policies is needed (got the string "[]")`},
		{give: `[]`, err: invalid + `Policies: at least one policy is needed`},
		{give: ` [ ] `, err: invalid + `Policies: at least one policy is needed`},
		{give: `[null]`, err: invalid + `Policies[0]: a policy is a JSON object (got null)`},
		{give: `[` + ok + `, 1]`, err: invalid + `Policies[1]: a policy is a JSON object (got the number 1)`},
		{give: `[` + ok + `, [` + ok + `]]`, err: invalid + `Policies[1]: a policy is a JSON object (got an array)`},
		// A policy's form: as UnmarshalJSON, with its index.
		{give: `[` + ok + `, {"name": "m", "Limit": 2}]`, err: invalid + `Policies[1]: "Limit": no such key (keys are spelled exactly: "limit")` + keysMsg},
		{give: `[{"limit": 1, "window": 90}]`, err: invalid + `Policies[0]: window: the number 90 is not a duration, for it has no unit: write a string such as "1m30s"`},
		{give: `[{"limit": 1, "window": "1s", "window": "2s"}]`, err: invalid + `Policies[0]: window: the key is given twice`},
		{give: `[{"limit": 2.5, "window": "1s"}]`, err: invalid + `Policies[0]: limit: an integer written with digits alone is needed (got the number 2.5)`},
		// Its values: as New.
		{give: `[` + ok + `, {"name": "m", "window": "1m"}]`, err: invalid + `Policies[1] ("m"): Limit: must be > 0 (got 0)`},
		{give: `[{"limit": 1, "window": "-1s"}]`, err: invalid + `Policies[0] ("default"): Window: must be > 0 (got -1s)`},
		{give: `[` + ok + `, ` + ok + `]`, err: invalid + `Policies[1] ("ok"): Name: Policies[0] has that name too: names are unique`},
		{give: `[{"limit": 1, "window": "1s"}, {"name": "default", "limit": 1, "window": "1s"}]`, err: invalid + `Policies[1] ("default"): Name: Policies[0] has that name too: names are unique`},
		{give: `[{"name": "é", "limit": 1, "window": "1s"}]`, err: invalid + `Policies[0] ("é"): Name: "é": a name is printable ASCII (byte 0 is 0xc3)`},
		{give: `[{"algorithm": "sliding_window_log", "limit": 1, "window": "1s", "burst": 2}]`, err: invalid + `Policies[0] ("default"): Algorithm "sliding_window_log": algorithms: Burst: sliding_window_log takes no burst: its capacity is Limit (got Burst 2)`},
		// Not JSON.
		{give: ``, err: invalid + `JSON: unexpected EOF`},
		{give: `[` + ok, err: invalid + `JSON: unexpected EOF`},
		{give: `[` + ok + `,]`, err: invalid + `Policies[1]: JSON: invalid character ']' looking for beginning of value`},
		{give: `[` + ok + ` ` + ok + `]`, err: invalid + `Policies[1]: JSON: invalid character '{' after array element`},
		{give: `[` + ok + `] []`, err: invalid + `JSON: more after the array: an array`},
	})
}

// TestParsePoliciesUnknownAlgorithm: an algorithm not registered is an
// ErrUnknownAlgorithm too, as in New.
func TestParsePoliciesUnknownAlgorithm(t *testing.T) {
	_, err := chanlimit.ParsePolicies([]byte(`[{"algorithm": "leaky", "limit": 1, "window": "1s"}]`))
	assert.ErrorIs(t, err, chanlimit.ErrInvalidConfig)
	assert.ErrorIs(t, err, chanlimit.ErrUnknownAlgorithm)
	assert.ErrorContains(t, err, `Policies[0] ("default"): Algorithm: "leaky" is not registered (registered: `)
}

// TestParsePoliciesErrorsAreNews: ParsePolicies refuses well-formed
// policies with New's very error, and accepts what New accepts.
func TestParsePoliciesErrorsAreNews(t *testing.T) {
	good := chanlimit.Policy{Name: "ok", Limit: 1, Window: time.Second}
	sets := [][]chanlimit.Policy{
		{good},
		{good, {Name: "x", Window: time.Second}},
		{good, {Name: "x", Limit: -3, Window: time.Second}},
		{good, {Name: "x", Limit: 1}},
		{good, {Name: "x", Limit: 1, Window: time.Second, Burst: -1}},
		{good, {Name: "x", Algorithm: "sliding_window_log", Limit: 1, Window: time.Second, Burst: 2}},
		{good, {Name: "x", Algorithm: "nope", Limit: 1, Window: time.Second}},
		{good, {Name: "x\x7f", Limit: 1, Window: time.Second}},
		{good, {Name: "x", Algorithm: "test_refuses", Limit: 1, Window: time.Second}},
		{good, {Name: "x", Algorithm: "test_panics", Limit: 1, Window: time.Second}},
		{good, {Name: "x", Algorithm: "test_no_capacity", Limit: 1, Window: time.Second}},
		{good, good},
		{{Limit: 1, Window: time.Second}, {Name: "default", Limit: 2, Window: time.Second}},
		{good, {Name: "dry", Algorithm: "gcra", Limit: 5, Window: time.Minute, Burst: 1, DryRun: true}},
	}
	for i, ps := range sets {
		data, err := json.Marshal(ps)
		require.NoError(t, err)
		got, parseErr := chanlimit.ParsePolicies(data)
		r, newErr := chanlimit.New(chanlimit.Config{Policies: ps})
		if r != nil {
			require.NoError(t, r.Close())
		}
		assert.Equal(t, errString(newErr), errString(parseErr), "step %d: ParsePolicies(%s)", i, data)
		assert.Equal(t, errors.Is(newErr, chanlimit.ErrUnknownAlgorithm), errors.Is(parseErr, chanlimit.ErrUnknownAlgorithm), "step %d", i)
		assert.Equal(t, newErr == nil, got != nil, "step %d: ParsePolicies(%s) = %+v", i, data, got)
	}
}

// errString is err's message, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
