package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
)

// ErrNoKey is matched (errors.Is) by the error of a key function when the
// request lacks what the key is made of: a RemoteAddr that is not an IP
// address, a missing header. The middleware answers it with 400 Bad
// Request unless Options.OnError says otherwise.
var ErrNoKey = errors.New("httplimit: the request has no key")

// ErrKey is matched (errors.Is) by every error of Options.Key that the
// middleware hands to OnError, with the key function's own error; one
// that is not an ErrNoKey is answered with 500 Internal Server Error by
// default.
var ErrKey = errors.New("httplimit: key")

// KeyByIP keys a request by the address of its peer, RemoteAddr: an IPv4
// address as itself ("192.0.2.7"), an IPv6 address by the /64 it lies in
// ("2001:db8:1:2::/64"), since one host is usually given a whole /64 and
// could otherwise take a fresh quota with each of its addresses. An
// IPv4-mapped IPv6 address counts as the IPv4 address, and a zone is
// dropped. A RemoteAddr that is no IP address (with or without a port)
// is an ErrNoKey.
//
// Behind a proxy every request has the proxy's address: use
// KeyByForwarded there.
func KeyByIP(r *http.Request) (string, error) {
	if host, ok := ipv4Host(r.RemoteAddr); ok {
		return host, nil // RemoteAddr holds the key already: no parsing, no allocation
	}
	addr, err := peer(r)
	if err != nil {
		return "", err
	}
	return ipKey(addr), nil
}

// ipv4Host returns the host of addr if addr is an IPv4 address in its
// canonical form (as netip.Addr writes it: no leading zeros) with a port,
// as net/http writes RemoteAddr: "192.0.2.7:51234". It reports false for
// anything else, which the caller parses the long way.
func ipv4Host(addr string) (string, bool) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 || !isPort(addr[i+1:]) {
		return "", false
	}
	host := addr[:i]
	parts, v, digits := 0, 0, 0
	for j := 0; j <= len(host); j++ {
		if j == len(host) || host[j] == '.' {
			if digits == 0 || v > 255 {
				return "", false
			}
			parts, v, digits = parts+1, 0, 0
			continue
		}
		c := host[j]
		if c < '0' || c > '9' || (digits == 1 && v == 0) || digits == 3 { // a leading zero, or a fourth digit
			return "", false
		}
		v, digits = v*10+int(c-'0'), digits+1
	}
	return host, parts == 4
}

// isPort reports whether s is a port: 1 to 5 digits, at most 65535.
func isPort(s string) bool {
	if len(s) == 0 || len(s) > 5 {
		return false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		v = v*10 + int(s[i]-'0')
	}
	return v <= 65535
}

// peer returns the address of the request's peer, from RemoteAddr.
func peer(r *http.Request) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return norm(ap.Addr()), nil
	}
	if addr, ok := parseAddr(r.RemoteAddr); ok {
		return addr, nil
	}
	return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q is not an IP address", ErrNoKey, r.RemoteAddr)
}

// parseAddr parses an address as a proxy may write it: "192.0.2.7",
// "2001:db8::1", "[2001:db8::1]", with or without a port.
func parseAddr(s string) (netip.Addr, bool) {
	if addr, err := netip.ParseAddr(s); err == nil {
		return norm(addr), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return norm(ap.Addr()), true
	}
	if inner, ok := strings.CutPrefix(s, "["); ok {
		if inner, ok = strings.CutSuffix(inner, "]"); ok {
			if addr, err := netip.ParseAddr(inner); err == nil {
				return norm(addr), true
			}
		}
	}
	return netip.Addr{}, false
}

// norm returns addr without its zone, and an IPv4-mapped IPv6 address as
// IPv4.
func norm(addr netip.Addr) netip.Addr { return addr.WithZone("").Unmap() }

// ipKey returns the key of addr (normalised): IPv4 as itself, IPv6 by its
// /64.
func ipKey(addr netip.Addr) string {
	if addr.Is4() {
		return addr.String()
	}
	return netip.PrefixFrom(addr, 64).Masked().String()
}

// KeyByHeader keys a request by the value of its header name (an API key,
// a tenant): the first value if the header is given more than once. A
// request without the header, or with an empty value, is an ErrNoKey: it
// never shares the empty key with every other such request.
func KeyByHeader(name string) func(*http.Request) (string, error) {
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if values := r.Header[canonical]; len(values) > 0 && values[0] != "" {
			return values[0], nil
		}
		return "", fmt.Errorf("%w: no %s header", ErrNoKey, canonical)
	}
}

// KeyByForwarded keys a request by the client's address behind proxies
// that the trusted prefixes hold, grouped as KeyByIP groups them (IPv6 by
// its /64). The X-Forwarded-For header is read only if the peer
// (RemoteAddr) itself is trusted; otherwise the peer is the client, and a
// client cannot choose its key by sending the header. When the peer is
// trusted, the client is the rightmost address in X-Forwarded-For (its
// values in order, each a list) that no trusted prefix holds: the
// addresses to its left were written by the client or by proxies not
// trusted, and may be anything. If every address is trusted, the
// leftmost is the client; with no header, the peer is. An entry met
// before the client that is not an IP address is an ErrNoKey.
//
// Trust only the prefixes of your own proxies: a trusted address is
// believed about who came before it. An invalid prefix (the zero
// netip.Prefix) trusts nothing; an IPv4-mapped IPv6 prefix trusts the
// IPv4 addresses it maps. The Forwarded header (RFC 7239) is not read: a
// proxy that writes X-Forwarded-For passes a client's Forwarded header on
// untouched, so reading both would let the client choose.
func KeyByForwarded(trusted ...netip.Prefix) func(*http.Request) (string, error) {
	prefixes := make([]netip.Prefix, 0, len(trusted))
	for _, p := range trusted {
		if !p.IsValid() {
			continue
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		prefixes = append(prefixes, p.Masked())
	}
	trustedAddr := func(addr netip.Addr) bool {
		for _, p := range prefixes {
			if p.Contains(addr) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		client, err := peer(r)
		if err != nil {
			return "", err
		}
		if !trustedAddr(client) {
			return ipKey(client), nil
		}
		values := r.Header["X-Forwarded-For"]
		for i := len(values) - 1; i >= 0; i-- {
			rest := values[i]
			for rest != "" {
				entry := rest
				if j := strings.LastIndexByte(rest, ','); j >= 0 {
					entry, rest = rest[j+1:], rest[:j]
				} else {
					rest = ""
				}
				entry = strings.TrimSpace(entry)
				if entry == "" {
					continue
				}
				addr, ok := parseAddr(entry)
				if !ok {
					return "", fmt.Errorf("%w: X-Forwarded-For entry %q is not an IP address", ErrNoKey, entry)
				}
				client = addr
				if !trustedAddr(addr) {
					return ipKey(addr), nil
				}
			}
		}
		return ipKey(client), nil
	}
}

// KeyJoin keys a request by several keys at once, for example its client
// and its route: each key function's key, in order, each written as its
// length, a colon and itself ("9:192.0.2.7" then "7:/search"), so that no
// two different lists of keys ever make one key. The first error of a key
// function is KeyJoin's; a nil key function, or none, is an error.
func KeyJoin(keys ...func(*http.Request) (string, error)) func(*http.Request) (string, error) {
	keys = append([]func(*http.Request) (string, error)(nil), keys...)
	return func(r *http.Request) (string, error) {
		if len(keys) == 0 {
			return "", errors.New("httplimit: KeyJoin has no key functions")
		}
		var b []byte
		for i, key := range keys {
			if key == nil {
				return "", fmt.Errorf("httplimit: KeyJoin: key function %d is nil", i)
			}
			k, err := key(r)
			if err != nil {
				return "", err
			}
			b = strconv.AppendInt(b, int64(len(k)), 10)
			b = append(b, ':')
			b = append(b, k...)
		}
		return string(b), nil
	}
}

// KeyByPattern keys a request by the ServeMux pattern that matched it
// (http.Request.Pattern, "GET /items/{id}"): with KeyJoin, a client's
// quota per route, for a middleware mounted on each route of an
// http.ServeMux (mux.Handle(pattern, mw(handler))), where the mux has set
// the pattern before the middleware runs. Unlike the request's path,
// which the client chooses, a route's pattern is one of the few the
// server registered: "/items/1", "/items/2" and "/items/2/" are not each
// a fresh quota, and the router holds one key per client and route, not
// one per URL a client can make up. A request without a pattern (the
// middleware wraps the whole mux, or another router that sets none) is
// an error (500 by default): keying every route by "" would silently
// share one quota.
func KeyByPattern(r *http.Request) (string, error) {
	if r.Pattern == "" {
		return "", errNoPattern
	}
	return r.Pattern, nil
}

// errNoPattern is KeyByPattern's error for a request no ServeMux matched.
var errNoPattern = errors.New("httplimit: KeyByPattern: the request has no ServeMux pattern: mount the middleware on each route of the http.ServeMux, inside it")

// KeyOfIP returns the key KeyByIP gives a peer at addr, which must be a
// valid address: an IPv4 address as itself, an IPv6 address by its /64,
// an IPv4-mapped IPv6 address as the IPv4 address, a zone dropped.
// Another protocol's middleware keys its peers with it (package
// grpclimit).
func KeyOfIP(addr netip.Addr) string { return ipKey(norm(addr)) }
