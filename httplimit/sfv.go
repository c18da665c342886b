package httplimit

import (
	"strings"
	"unicode/utf8"
)

// A reader of Structured Field Lists (RFC 9651), for the RateLimit field
// a server answers with. It hands over each member as it reads it, with
// what a client acts on: whether it is an Item (and of which type) or an
// Inner List, and its parameters' keys and Integer values. It parses the
// whole grammar, so that a field it accepts is one every parser accepts
// alike, and a field that breaks it is to be ignored whole, as RFC 9651
// asks of a List that fails to parse. It makes nothing for each member: a
// hostile server's large field costs its length in time, and no memory.

// sfKind is the type of a bare item, as far as a client tells them apart.
type sfKind uint8

const (
	sfOther   sfKind = iota // a Decimal, Token, Byte Sequence, Boolean, Date or Display String
	sfInteger               // an Integer
	sfString                // a String
)

// sfMember is a member of a List: an Inner List, or an Item of type kind,
// and its parameters, in order (a key given twice is there twice). It is
// good only during the call parseList hands it to.
type sfMember struct {
	inner  bool
	kind   sfKind
	params []sfParam
}

// sfParam is a parameter: its key, and its value's type, and value if an
// Integer.
type sfParam struct {
	key  string
	kind sfKind
	n    int64
}

// integer returns the value of m's parameter key, if it is an Integer: a
// key given twice counts as its last value.
func (m *sfMember) integer(key string) (int64, bool) {
	for i := len(m.params) - 1; i >= 0; i-- {
		if m.params[i].key == key {
			return m.params[i].n, m.params[i].kind == sfInteger
		}
	}
	return 0, false
}

// parseList parses s, a List field's combined value, handing each member
// to each as it is read, and reports whether the whole of s parsed: if it
// did not, what each was handed is to be let go.
func parseList(s string, each func(*sfMember)) bool {
	p := sfParser{s: strings.Trim(s, " ")}
	for p.i < len(p.s) {
		if !p.member() {
			return false
		}
		each(&p.m)
		p.skipOWS()
		if p.i == len(p.s) {
			return true
		}
		if p.s[p.i] != ',' {
			return false
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return false // a trailing comma
		}
	}
	return true
}

// sfParser reads s from i on; m is the member it read last.
type sfParser struct {
	s string
	i int
	m sfMember
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

// member reads an Item or an Inner List, with its parameters, into m.
func (p *sfParser) member() bool {
	p.m = sfMember{params: p.m.params[:0]}
	if p.peek() != '(' {
		k, _, ok := p.bareItem()
		p.m.kind = k
		return ok && p.params(true)
	}
	p.m.inner = true
	p.i++
	for {
		p.skipSP()
		if p.peek() == ')' {
			p.i++
			return p.params(true)
		}
		if _, _, ok := p.bareItem(); !ok || !p.params(false) {
			return false
		}
		if c := p.peek(); c != ' ' && c != ')' {
			return false
		}
	}
}

// params reads parameters, noting them in m's if keep (a member's, not
// an Inner List's item's).
func (p *sfParser) params(keep bool) bool {
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return false
		}
		kind, n := sfOther, int64(0) // a key alone is a Boolean true
		if p.peek() == '=' {
			p.i++
			if kind, n, ok = p.bareItem(); !ok {
				return false
			}
		}
		if keep {
			p.m.params = append(p.m.params, sfParam{key: key, kind: kind, n: n})
		}
	}
	return true
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

// bareItem reads a bare item of any type: its type, and its value if an
// Integer.
func (p *sfParser) bareItem() (sfKind, int64, bool) {
	switch c := p.peek(); {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		p.i++
		return sfString, 0, p.str()
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		for p.i++; p.i < len(p.s) && isTokenChar(p.s[p.i]); p.i++ {
		}
		return sfOther, 0, true
	case c == ':':
		p.i++
		return sfOther, 0, p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return sfOther, 0, true
		}
	case c == '@':
		p.i++
		kind, _, ok := p.number()
		return sfOther, 0, ok && kind == sfInteger
	case c == '%':
		p.i++
		if p.peek() == '"' {
			p.i++
			return sfOther, 0, p.displayString()
		}
	}
	return sfOther, 0, false
}

// bytes reads the rest of a Byte Sequence, after its ':': base64, whose
// '=' padding may be left out, but not be wrong (RFC 9651, 4.2.7); as
// encoding/base64 reads it, checked without decoding it.
func (p *sfParser) bytes() bool {
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return false
	}
	b64 := p.s[p.i : p.i+end]
	p.i += end + 1
	data := strings.TrimRight(b64, "=")
	for i := 0; i < len(data); i++ {
		if c := data[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/') {
			return false // '=' too: only at the end
		}
	}
	if pad := len(b64) - len(data); pad > 0 {
		return pad <= 2 && len(b64)%4 == 0 && len(data)%4 != 1
	}
	return len(data)%4 != 1
}

// number reads an Integer (at most 15 digits) or a Decimal (at most 12
// digits, '.', and 1 to 3).
func (p *sfParser) number() (sfKind, int64, bool) {
	neg := p.peek() == '-'
	if neg {
		p.i++
	}
	var n int64
	digits, dot := 0, -1
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		if c == '.' && dot < 0 && digits > 0 && digits <= 12 {
			dot = digits
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		digits++
		if dot < 0 {
			n = 10*n + int64(c-'0')
		}
		if dot < 0 && digits > 15 || dot >= 0 && digits-dot > 3 {
			return sfOther, 0, false
		}
	}
	switch {
	case digits == 0 || dot >= 0 && digits == dot:
		return sfOther, 0, false // no digits, or none after '.'
	case dot >= 0:
		return sfOther, 0, true
	case neg:
		n = -n
	}
	return sfInteger, n, true
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
