package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit/httplimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// request returns a request from remoteAddr with the X-Forwarded-For
// values xff, one header line each.
func request(remoteAddr string, xff ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	for _, v := range xff {
		r.Header.Add("X-Forwarded-For", v)
	}
	return r
}

func TestKeyByIP(t *testing.T) {
	for _, tc := range []struct {
		remoteAddr, key string
	}{
		{"192.0.2.7:1234", "192.0.2.7"},
		{"192.0.2.7", "192.0.2.7"},             // no port
		{"[::ffff:192.0.2.7]:80", "192.0.2.7"}, // IPv4-mapped: the IPv4 address
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:443", "2001:db8:1:2::/64"}, // the same /64
		{"[2001:db8:1:3::1]:443", "2001:db8:1:3::/64"},                  // the next /64
		{"[fe80::1%eth0]:80", "fe80::/64"},                              // the zone is dropped
		{"2001:db8::1", "2001:db8::/64"},
		{"[2001:db8::1]", "2001:db8::/64"},
	} {
		key, err := httplimit.KeyByIP(request(tc.remoteAddr))
		require.NoError(t, err, tc.remoteAddr)
		assert.Equal(t, tc.key, key, tc.remoteAddr)
	}
	for _, bad := range []string{"", "@", "localhost:80", "192.0.2.7:99999", "/tmp/sock"} {
		_, err := httplimit.KeyByIP(request(bad))
		assert.ErrorIs(t, err, httplimit.ErrNoKey, bad)
	}
}

func TestKeyByIPAllocs(t *testing.T) {
	r := request("192.0.2.7:1234")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := httplimit.KeyByIP(r); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "an IPv4 RemoteAddr as net/http writes it holds its key")
}

func TestKeyByHeader(t *testing.T) {
	key := httplimit.KeyByHeader("x-api-key") // any case
	r := request("192.0.2.7:1")
	_, err := key(r)
	require.ErrorIs(t, err, httplimit.ErrNoKey)
	assert.ErrorContains(t, err, "X-Api-Key")

	r.Header.Set("X-Api-Key", "")
	_, err = key(r)
	require.ErrorIs(t, err, httplimit.ErrNoKey, "an empty value is no key")

	r.Header.Set("X-API-KEY", "tenant-1")
	r.Header.Add("X-Api-Key", "tenant-2")
	got, err := key(r)
	require.NoError(t, err)
	assert.Equal(t, "tenant-1", got, "the first value")
}

// TestKeyByForwardedSpoofing: the key is the rightmost address that no
// trusted proxy holds, and X-Forwarded-For counts only from a trusted
// peer, whatever the client writes into it.
func TestKeyByForwardedSpoofing(t *testing.T) {
	key := httplimit.KeyByForwarded(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48"))
	for _, tc := range []struct {
		name       string
		remoteAddr string
		xff        []string
		key        string
	}{
		{"untrusted peer: the header is the client's own, ignored", "198.51.100.1:5000", []string{"203.0.113.9"}, "198.51.100.1"},
		{"untrusted peer claiming a trusted hop", "198.51.100.1:5000", []string{"203.0.113.9, 10.0.0.1"}, "198.51.100.1"},
		{"trusted peer, no header: the peer", "10.0.0.1:5000", nil, "10.0.0.1"},
		{"one proxy", "10.0.0.1:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"two proxies", "10.0.0.1:5000", []string{"203.0.113.9, 10.0.0.2"}, "203.0.113.9"},
		{"a spoofed entry left of the client", "10.0.0.1:5000", []string{"192.0.2.66, 203.0.113.9, 10.0.0.2"}, "203.0.113.9"},
		{"a spoofed trusted entry left of the client", "10.0.0.1:5000", []string{"10.9.9.9, 203.0.113.9"}, "203.0.113.9"},
		{"several header lines, in order", "10.0.0.1:5000", []string{"192.0.2.66", "203.0.113.9, 10.0.0.2"}, "203.0.113.9"},
		{"every hop trusted: the leftmost", "10.0.0.1:5000", []string{"10.0.0.7, 10.0.0.2"}, "10.0.0.7"},
		{"empty entries are passed by", "10.0.0.1:5000", []string{"203.0.113.9,, 10.0.0.2,"}, "203.0.113.9"},
		{"an IPv6 client by its /64", "10.0.0.1:5000", []string{"2001:db8:1:2::99"}, "2001:db8:1:2::/64"},
		{"an IPv6 client with a port", "10.0.0.1:5000", []string{"[2001:db8:1:2::99]:443"}, "2001:db8:1:2::/64"},
		{"an IPv4 client with a port", "10.0.0.1:5000", []string{"203.0.113.9:443"}, "203.0.113.9"},
		{"an IPv6 trusted proxy", "[2001:db8:ffff::1]:5000", []string{"203.0.113.9, 2001:db8:ffff:1::2"}, "203.0.113.9"},
		{"an IPv4-mapped peer is IPv4", "[::ffff:10.0.0.1]:5000", []string{"203.0.113.9"}, "203.0.113.9"},
	} {
		got, err := key(request(tc.remoteAddr, tc.xff...))
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.key, got, tc.name)
	}

	_, err := key(request("10.0.0.1:5000", "203.0.113.9, not-an-address"))
	assert.ErrorIs(t, err, httplimit.ErrNoKey, "an entry a trusted proxy should have written")
	got, err := key(request("10.0.0.1:5000", "not-an-address, 203.0.113.9"))
	require.NoError(t, err, "what lies left of the client is never read")
	assert.Equal(t, "203.0.113.9", got)
	_, err = key(request("bad"))
	assert.ErrorIs(t, err, httplimit.ErrNoKey)
}

func TestKeyByForwardedPrefixes(t *testing.T) {
	got, err := httplimit.KeyByForwarded(netip.Prefix{})(request("10.0.0.1:1", "203.0.113.9"))
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1", got, "the zero prefix trusts nothing")

	got, err = httplimit.KeyByForwarded()(request("10.0.0.1:1", "203.0.113.9"))
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1", got, "no prefixes trust nothing")

	mapped := httplimit.KeyByForwarded(netip.MustParsePrefix("::ffff:10.0.0.0/104"))
	got, err = mapped(request("10.0.0.1:1", "203.0.113.9"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.9", got, "an IPv4-mapped prefix trusts its IPv4 addresses")

	unmasked := httplimit.KeyByForwarded(netip.MustParsePrefix("10.0.0.99/8"))
	got, err = unmasked(request("10.1.2.3:1", "203.0.113.9"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.9", got, "a prefix with host bits is its network")
}

func TestKeyJoin(t *testing.T) {
	const header = "X-Tenant"
	fixed := func(s string) func(*http.Request) (string, error) {
		return func(*http.Request) (string, error) { return s, nil }
	}
	r := request("192.0.2.7:1")
	a, err := httplimit.KeyJoin(fixed("ab"), fixed("c"))(r)
	require.NoError(t, err)
	b, err := httplimit.KeyJoin(fixed("a"), fixed("bc"))(r)
	require.NoError(t, err)
	assert.NotEqual(t, a, b, "no two lists make one key")
	assert.Equal(t, "2:ab1:c", a)

	got, err := httplimit.KeyJoin(httplimit.KeyByIP, func(r *http.Request) (string, error) { return r.URL.Path, nil })(r)
	require.NoError(t, err)
	assert.Equal(t, "9:192.0.2.71:/", got)

	_, err = httplimit.KeyJoin(httplimit.KeyByIP, httplimit.KeyByHeader(header))(r)
	assert.ErrorIs(t, err, httplimit.ErrNoKey, "the first error")
	_, err = httplimit.KeyJoin()(r)
	assert.Error(t, err)
	_, err = httplimit.KeyJoin(httplimit.KeyByIP, nil)(r)
	assert.Error(t, err)
}

// FuzzKeyByIP: the fast path for IPv4 RemoteAddrs agrees with netip on
// every input: the same key, or an error both ways.
func FuzzKeyByIP(f *testing.F) {
	for _, s := range []string{"192.0.2.7:1234", "0.0.0.0:0", "255.255.255.255:65535", "01.2.3.4:1", "1.2.3.4:65536", "1.2.3:4", "1.2.3.4.5:6", "256.1.1.1:1", "1.2.3.4:", "[::1]:80", "1..2.3:4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, remoteAddr string) {
		got, err := httplimit.KeyByIP(request(remoteAddr))
		var want string
		if ap, perr := netip.ParseAddrPort(remoteAddr); perr == nil {
			a := ap.Addr().WithZone("").Unmap()
			want = a.String()
			if !a.Is4() {
				want = netip.PrefixFrom(a, 64).Masked().String()
			}
		} else if a, perr := netip.ParseAddr(remoteAddr); perr == nil {
			a = a.WithZone("").Unmap()
			want = a.String()
			if !a.Is4() {
				want = netip.PrefixFrom(a, 64).Masked().String()
			}
		} else if err == nil && !strings.HasPrefix(remoteAddr, "[") {
			t.Fatalf("%q: key %q, but netip parses no address", remoteAddr, got)
		}
		if want != "" && (err != nil || got != want) {
			t.Fatalf("%q: key %q (%v), want %q", remoteAddr, got, err, want)
		}
	})
}

func TestKeyOfIP(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7":            "192.0.2.7",
		"::ffff:192.0.2.7":     "192.0.2.7",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"fe80::1%eth0":         "fe80::/64",
	} {
		assert.Equal(t, want, httplimit.KeyOfIP(netip.MustParseAddr(addr)), addr)
	}
}

// TestKeyByPattern: the pattern the ServeMux matched, or an error when
// none did (a middleware around the mux, not inside it).
func TestKeyByPattern(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/items/7", nil)
	_, err := httplimit.KeyByPattern(r)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no ServeMux pattern")

	var got []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(_ http.ResponseWriter, r *http.Request) {
		k, err := httplimit.KeyByPattern(r)
		require.NoError(t, err)
		got = append(got, k)
	})
	for _, path := range []string{"/items/7", "/items/8", "/items/%2e%2e"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	assert.Equal(t, []string{"GET /items/{id}", "GET /items/{id}", "GET /items/{id}"}, got, "one key for the route, whatever the path")
}
