package httplimit

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// A reader of Structured Field Lists (RFC 9651), for the RateLimit field
// a server answers with. It keeps of each member what a client acts on:
// whether it is an Item (not an Inner List), and its Integer parameters.
// It parses the whole grammar, so that a field it accepts is one every
// parser accepts alike, and a field that breaks it is ignored whole, as
// RFC 9651 asks of a List that fails to parse.

// sfMember is a member of a List: an Item, or an Inner List (inner), and
// the Integer parameters of that member, by key (a parameter given twice
// counts as its last value; one of another type is left out).
type sfMember struct {
	inner bool
	ints  map[string]int64
}

// parseList parses s, a List field's combined value, and reports whether
// it parsed.
func parseList(s string) ([]sfMember, bool) {
	p := sfParser{s: strings.Trim(s, " ")}
	var list []sfMember
	for p.i < len(p.s) {
		m, ok := p.member()
		if !ok {
			return nil, false
		}
		list = append(list, m)
		p.skipOWS()
		if p.i == len(p.s) {
			return list, true
		}
		if p.s[p.i] != ',' {
			return nil, false
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return nil, false // a trailing comma
		}
	}
	return list, true
}

// sfParser reads s from i on.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) skipSP() {
	for p.peek() == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for c := p.peek(); c == ' ' || c == '\t'; c = p.peek() {
		p.i++
	}
}

// member reads an Item or an Inner List, with its parameters.
func (p *sfParser) member() (sfMember, bool) {
	var m sfMember
	if p.peek() == '(' {
		m.inner = true
		p.i++
		for {
			p.skipSP()
			if p.peek() == ')' {
				p.i++
				break
			}
			if _, ok := p.bareItem(); !ok {
				return m, false
			}
			if _, ok := p.params(); !ok {
				return m, false
			}
			if c := p.peek(); c != ' ' && c != ')' {
				return m, false
			}
		}
	} else if _, ok := p.bareItem(); !ok {
		return m, false
	}
	ints, ok := p.params()
	m.ints = ints
	return m, ok
}

// params reads parameters, and returns those whose value is an Integer.
func (p *sfParser) params() (map[string]int64, bool) {
	var ints map[string]int64
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		var v sfBare
		if p.peek() == '=' {
			p.i++
			if v, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		delete(ints, key) // the last value counts, whatever its type
		if v.isInt {
			if ints == nil {
				ints = map[string]int64{}
			}
			ints[key] = v.n
		}
	}
	if len(ints) == 0 {
		return nil, true // none, or none left
	}
	return ints, true
}

// key reads a key: lcalpha or '*', then lcalpha, DIGIT, '_', '-', '.',
// '*'.
func (p *sfParser) key() (string, bool) {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z' || c == '*') {
		return "", false
	}
	for c := p.peek(); c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*'; c = p.peek() {
		p.i++
	}
	return p.s[start:p.i], true
}

// sfBare is a bare item, as much of it as a client uses: whether it is
// an Integer, and which.
type sfBare struct {
	isInt bool
	n     int64
}

// bareItem reads a bare item of any type.
func (p *sfParser) bareItem() (sfBare, bool) {
	switch c := p.peek(); {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		p.i++
		return sfBare{}, p.str()
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		for p.i++; p.i < len(p.s) && isTokenChar(p.s[p.i]); p.i++ {
		}
		return sfBare{}, true
	case c == ':': // base64, its '=' padding optional (RFC 9651, 4.2.7)
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return sfBare{}, false
		}
		b64 := p.s[p.i+1 : p.i+1+end]
		p.i += end + 2
		for i := 0; i < len(b64); i++ {
			if c := b64[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
				return sfBare{}, false
			}
		}
		_, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(b64, "="))
		return sfBare{}, err == nil
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return sfBare{}, true
		}
		return sfBare{}, false
	case c == '@':
		p.i++
		b, ok := p.number()
		return sfBare{}, ok && b.isInt
	case c == '%':
		p.i++
		if p.peek() != '"' {
			return sfBare{}, false
		}
		p.i++
		return sfBare{}, p.displayString()
	}
	return sfBare{}, false
}

// number reads an Integer (at most 15 digits) or a Decimal (at most 12
// digits, '.', and 1 to 3).
func (p *sfParser) number() (sfBare, bool) {
	neg := p.peek() == '-'
	if neg {
		p.i++
	}
	var n int64
	digits, dot := 0, -1
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch {
		case c >= '0' && c <= '9':
			digits++
			if dot < 0 {
				n = 10*n + int64(c-'0')
			}
		case c == '.' && dot < 0 && digits > 0 && digits <= 12:
			dot = digits
			continue
		default:
			goto done
		}
		if dot < 0 && digits > 15 || dot >= 0 && digits-dot > 3 {
			return sfBare{}, false
		}
	}
done:
	switch {
	case digits == 0 || dot >= 0 && digits == dot:
		return sfBare{}, false // no digits, or none after '.'
	case dot >= 0:
		return sfBare{}, true
	case neg:
		n = -n
	}
	return sfBare{isInt: true, n: n}, true
}

// str reads the rest of a String, after its '"'.
func (p *sfParser) str() bool {
	for ; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '\\':
			p.i++
			if p.i == len(p.s) || p.s[p.i] != '"' && p.s[p.i] != '\\' {
				return false
			}
		case c == '"':
			p.i++
			return true
		case c < 0x20 || c > 0x7e:
			return false
		}
	}
	return false
}

// displayString reads the rest of a Display String, after its '%"':
// printable ASCII but '%' and '"', and '%' with two lower-case hex
// digits, whose bytes are UTF-8.
func (p *sfParser) displayString() bool {
	var b []byte
	for ; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '%':
			if p.i+2 >= len(p.s) || !isLowerHex(p.s[p.i+1]) || !isLowerHex(p.s[p.i+2]) {
				return false
			}
			b = append(b, unhex(p.s[p.i+1])<<4|unhex(p.s[p.i+2]))
			p.i += 2
		case c == '"':
			p.i++
			return utf8.Valid(b)
		case c < 0x20 || c > 0x7e:
			return false
		default:
			b = append(b, c)
		}
	}
	return false
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// isTokenChar reports whether c may follow a Token's first character:
// tchar (RFC 9110), ':' or '/'.
func isTokenChar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}
