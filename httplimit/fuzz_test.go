package httplimit_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/chanlimit/chanlimit/httplimit"
)

// FuzzKeyByForwarded: whatever RemoteAddr and X-Forwarded-For hold, the
// key function never panics; a key is an IPv4 address or an IPv6 /64;
// an untrusted peer's key is its own, whatever the header says; and a
// trusted peer's key is an address of the header or the peer, never one
// trusted unless every hop is.
func FuzzKeyByForwarded(f *testing.F) {
	f.Add("10.0.0.1:80", "203.0.113.9, 10.0.0.2")
	f.Add("10.0.0.1:80", "[2001:db8::1]:443,,")
	f.Add("192.0.2.1:80", "10.0.0.1")
	f.Add("[::ffff:10.0.0.1]:1", "x, 198.51.100.7:9")
	trusted := netip.MustParsePrefix("10.0.0.0/8")
	key := httplimit.KeyByForwarded(trusted)
	f.Fuzz(func(t *testing.T, remoteAddr, xff string) {
		r := &http.Request{RemoteAddr: remoteAddr, Header: http.Header{"X-Forwarded-For": {xff}}}
		got, err := key(r)
		own, ownErr := httplimit.KeyByIP(r)
		if ownErr != nil {
			if err == nil {
				t.Fatalf("RemoteAddr %q has no key, but got %q", remoteAddr, got)
			}
			return
		}
		if err != nil {
			if !strings.Contains(err.Error(), "X-Forwarded-For") {
				t.Fatalf("an error not about the header: %v", err)
			}
			return
		}
		var addr netip.Addr
		if p, perr := netip.ParsePrefix(got); perr == nil {
			if p.Bits() != 64 || !p.Addr().Is6() || p.Masked() != p {
				t.Fatalf("key %q is not an IPv6 /64", got)
			}
			addr = p.Addr()
		} else if addr, perr = netip.ParseAddr(got); perr != nil || !addr.Is4() {
			t.Fatalf("key %q is neither an IPv4 address nor an IPv6 /64", got)
		}
		peer, _ := netip.ParseAddr(own)
		if !trusted.Contains(peer) {
			if got != own {
				t.Fatalf("untrusted peer %q, key %q: the header was believed", remoteAddr, got)
			}
			return
		}
		if trusted.Contains(addr) && addr.Is4() {
			for _, e := range strings.Split(xff, ",") {
				if a, perr := netip.ParseAddr(strings.TrimSpace(e)); perr == nil && !trusted.Contains(a.Unmap()) {
					t.Fatalf("key %q is trusted, but %q in %q is not", got, e, xff)
				}
			}
		}
	})
}
