package chanlimit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The keys of a Policy in JSON (UnmarshalJSON has the rules). Policy
// reads them with a json.Decoder, token by token, not through a struct
// with tags: encoding/json matches a key to a field whatever its case, and
// keeps the last of a key given twice, and a configuration must say
// "window" and say it once.
const (
	keyName      = "name"
	keyAlgorithm = "algorithm"
	keyLimit     = "limit"
	keyWindow    = "window"
	keyBurst     = "burst"
	keyDryRun    = "dry_run"
)

// policyKeys are the keys of a Policy in JSON, in the order MarshalJSON
// writes them.
var policyKeys = [...]string{keyName, keyAlgorithm, keyLimit, keyWindow, keyBurst, keyDryRun}

// MarshalJSON writes p as a JSON object with the keys "name",
// "algorithm", "limit", "window", "burst" and "dry_run", in that order,
// leaving out each whose field is zero: Window as the string
// time.Duration.String gives ("1m30s", "1.000000001s", "-1ns"), exact for
// every Duration; Limit and Burst as integers. UnmarshalJSON reads what it
// writes back into the same Policy, whatever its values: MarshalJSON
// checks none, and returns an error (wrapping ErrInvalidConfig) only for a
// Name or Algorithm that is not valid UTF-8, which a JSON string cannot
// hold.
func (p Policy) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 96)
	b = append(b, '{')
	key := func(k string) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
	}
	for _, f := range [...]struct{ key, field, s string }{{keyName, "Name", p.Name}, {keyAlgorithm, "Algorithm", p.Algorithm}} {
		if f.s == "" {
			continue
		}
		if !utf8.ValidString(f.s) {
			return nil, fmt.Errorf("%w: %s: %q is not valid UTF-8, which a JSON string cannot hold", ErrInvalidConfig, f.field, f.s)
		}
		s, err := json.Marshal(f.s)
		if err != nil {
			return nil, err
		}
		key(f.key)
		b = append(b, s...)
	}
	if p.Limit != 0 {
		key(keyLimit)
		b = strconv.AppendInt(b, int64(p.Limit), 10)
	}
	if p.Window != 0 {
		key(keyWindow)
		b = append(b, '"') // digits, '.', '-', and the units' letters (µ too): nothing to escape
		b = append(b, p.Window.String()...)
		b = append(b, '"')
	}
	if p.Burst != 0 {
		key(keyBurst)
		b = strconv.AppendInt(b, int64(p.Burst), 10)
	}
	if p.DryRun {
		key(keyDryRun)
		b = append(b, "true"...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads a JSON object with the keys "name", "algorithm",
// "limit", "window", "burst" and "dry_run", each optional (a key left out
// is a zero field), and sets *p to the Policy it describes: all its
// fields, not only those given. The keys are spelled exactly so ("Window"
// is not "window"); window is a duration string ("1m30s", "500ms", "-1ns":
// time.ParseDuration), and a JSON number there is refused, for it has no
// unit; limit and burst are numbers whose value is an integer an int holds
// (10 is; 1.5, 1e3 and "10" are not); name and algorithm strings;
// dry_run true or false. An unknown key, a key given twice, a null value
// or a value of another type is an error wrapping ErrInvalidConfig that
// names the key, and leaves *p as it was. A JSON null as the whole value
// leaves *p as it was too, as encoding/json does for null.
//
// UnmarshalJSON checks the form, not the values: {"limit": -1} is a
// Policy, which New refuses. ParsePolicies does both.
func (p *Policy) UnmarshalJSON(data []byte) error {
	dec := newPolicyDecoder(data)
	q, isNull, err := decodePolicy(dec, "", true)
	if err != nil {
		return err
	}
	if err := decodedAll(dec, "the policy"); err != nil {
		return err
	}
	if !isNull {
		*p = q
	}
	return nil
}

// ParsePolicies reads data, a JSON array of policies, each an object as
// Policy's UnmarshalJSON reads it:
//
//	[
//		{"name": "second", "limit": 10, "window": "1s"},
//		{"name": "minute", "algorithm": "sliding_window_log", "limit": 100, "window": "1m"}
//	]
//
// and checks them as New checks Config.Policies, with the same errors
// (the algorithms are looked up then: Register yours before). It returns
// the policies as written, in order, for Config.Policies, SetPolicies or
// SetOverride. Every error wraps ErrInvalidConfig and names the policy by
// its index and the key or field at fault ("Policies[1]: window: ...",
// "Policies[1] (\"minute\"): Limit: must be > 0 (got 0)"); data that is
// not an array (null included), a policy that is not an object and an
// empty array (at least one policy is needed, as in New) are errors too.
func ParsePolicies(data []byte) ([]Policy, error) {
	dec := newPolicyDecoder(data)
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonError("", err)
	}
	if tok != json.Delim('[') {
		return nil, fmt.Errorf("%w: Policies: a JSON array of policies is needed (got %s)", ErrInvalidConfig, describeToken(tok))
	}
	var ps []Policy
	for dec.More() {
		p, _, err := decodePolicy(dec, fmt.Sprintf("Policies[%d]: ", len(ps)), false)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if _, err := dec.Token(); err != nil { // the ']': More said so, or this is the error
		return nil, jsonError("", err)
	}
	if err := decodedAll(dec, "the array"); err != nil {
		return nil, err
	}
	if _, err := compile("Policies", ps); err != nil {
		return nil, err
	}
	return ps, nil
}

// newPolicyDecoder returns a decoder of data's tokens that leaves numbers
// as written.
func newPolicyDecoder(data []byte) *json.Decoder {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec
}

// decodePolicy reads a policy, one JSON object, from dec: UnmarshalJSON's
// rules. A null is isNull if nullOK, and an error if not. where prefixes
// the key in errors.
func decodePolicy(dec *json.Decoder, where string, nullOK bool) (p Policy, isNull bool, err error) {
	tok, err := dec.Token()
	switch {
	case err != nil:
		return Policy{}, false, jsonError(where, err)
	case tok == nil && nullOK:
		return Policy{}, true, nil
	case tok != json.Delim('{'):
		return Policy{}, false, fmt.Errorf("%w: %sa policy is a JSON object (got %s)", ErrInvalidConfig, where, describeToken(tok))
	}
	var seen [len(policyKeys)]bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Policy{}, false, jsonError(where, err)
		}
		k, ok := tok.(string) // in an object, Token reads a key or fails
		i := indexOfKey(k)
		switch {
		case !ok:
			return Policy{}, false, fmt.Errorf("%w: %sJSON: %s where a key is needed", ErrInvalidConfig, where, describeToken(tok))
		case i < 0:
			return Policy{}, false, unknownKey(where, k)
		case seen[i]:
			return Policy{}, false, fmt.Errorf("%w: %s%s: the key is given twice", ErrInvalidConfig, where, k)
		}
		seen[i] = true
		v, err := dec.Token()
		if err != nil {
			return Policy{}, false, jsonError(where, err)
		}
		if err := setField(&p, k, v); err != nil {
			return Policy{}, false, fmt.Errorf("%w: %s%s: %w", ErrInvalidConfig, where, k, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the '}'
		return Policy{}, false, jsonError(where, err)
	}
	return p, false, nil
}

// setField sets the field of p whose key is k to v, a token of a JSON
// value (a json.Delim: an array or object, which no field is).
func setField(p *Policy, k string, v json.Token) error {
	switch k {
	case keyName, keyAlgorithm:
		s, ok := v.(string)
		if !ok {
			return wrongType("a string", v)
		}
		if k == keyName {
			p.Name = s
		} else {
			p.Algorithm = s
		}
	case keyLimit, keyBurst:
		num, ok := v.(json.Number)
		if !ok {
			return wrongType("an integer", v)
		}
		n, err := jsonInt(string(num))
		if err != nil {
			return err
		}
		if k == keyLimit {
			p.Limit = n
		} else {
			p.Burst = n
		}
	case keyWindow:
		switch v := v.(type) {
		case string:
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf(`%w: write a duration such as "1m30s", "500ms" or "2h"`, err)
			}
			p.Window = d
		case json.Number:
			return fmt.Errorf(`the number %s is not a duration, for it has no unit: write a string such as "1m30s"`, v)
		default:
			return wrongType(`a duration string such as "1m30s"`, v)
		}
	case keyDryRun:
		b, ok := v.(bool)
		if !ok {
			return wrongType("true or false", v)
		}
		p.DryRun = b
	}
	return nil
}

// jsonInt returns the int that num, a JSON number as written, stands
// for: an integer written with digits alone, as a configuration writes a
// count (10, not 1e1 or 10.0), which an int holds.
func jsonInt(num string) (int, error) {
	n, err := strconv.Atoi(num)
	switch {
	case err == nil:
		return n, nil
	case strings.ContainsAny(num, ".eE"):
		return 0, fmt.Errorf("an integer written with digits alone is needed (got the number %s)", num)
	}
	return 0, fmt.Errorf("out of the range of an int (%d to %d) (got the number %s)", math.MinInt, math.MaxInt, num)
}

// indexOfKey returns the index of k in policyKeys, or -1.
func indexOfKey(k string) int {
	for i, key := range policyKeys {
		if k == key {
			return i
		}
	}
	return -1
}

// unknownKey is the error for a key Policy does not have, with the one
// meant when only its case differs.
func unknownKey(where, k string) error {
	hint := ""
	for _, key := range policyKeys {
		if strings.EqualFold(k, key) || strings.EqualFold(strings.ReplaceAll(k, "_", ""), strings.ReplaceAll(key, "_", "")) {
			hint = fmt.Sprintf(" (keys are spelled exactly: %q)", key)
			break
		}
	}
	return fmt.Errorf(`%w: %s%q: no such key%s: a policy's keys are "name", "algorithm", "limit", "window", "burst" and "dry_run"`, ErrInvalidConfig, where, k, hint)
}

// wrongType is the error for v where want is needed.
func wrongType(want string, v json.Token) error {
	if v == nil {
		return fmt.Errorf("%s is needed (got null: leave the key out for the zero value)", want)
	}
	return fmt.Errorf("%s is needed (got %s)", want, describeToken(v))
}

// describeToken says what tok, a token of dec, is.
func describeToken(tok json.Token) string {
	switch tok := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		if tok == '[' {
			return "an array"
		}
		return "an object"
	case string:
		return fmt.Sprintf("the string %q", tok)
	case json.Number:
		return "the number " + string(tok)
	case bool:
		return strconv.FormatBool(tok)
	}
	return fmt.Sprint(tok)
}

// decodedAll checks that nothing but white space follows what was read
// from dec, what.
func decodedAll(dec *json.Decoder, what string) error {
	tok, err := dec.Token()
	switch {
	case err == io.EOF:
		return nil
	case err != nil:
		return jsonError("", err)
	}
	return fmt.Errorf("%w: JSON: more after %s: %s", ErrInvalidConfig, what, describeToken(tok))
}

// jsonError is the error for err, the decoder's: JSON that is not JSON.
func jsonError(where string, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %sJSON: %w", ErrInvalidConfig, where, err)
}
