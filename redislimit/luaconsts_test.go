package redislimit

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/algorithms"
)

var updateLua = flag.Bool("update-lua", false, "write decide.lua's generated constants (go generate)")

// luaKinds names the request kinds as decide.lua does; their numbers are
// chanlimit's StoreOpKind values, which the store sends as they are.
var luaKinds = []struct {
	name string
	kind chanlimit.StoreOpKind
}{
	{"ALLOW", chanlimit.StoreAllow},
	{"PEEK", chanlimit.StorePeek},
	{"REFUND", chanlimit.StoreRefund},
	{"RESET", chanlimit.StoreReset},
	{"TURN", chanlimit.StoreTurn},
	{"GIVE_BACK", chanlimit.StoreGiveBack},
	{"DRY_RUN", chanlimit.StoreDryRun},
	{"HOLD", chanlimit.StoreHold},
}

// luaConstants returns decide.lua's block of constants, as Go's values
// make it: the request kinds, and the algorithms by scriptAlgorithm's
// numbers, each named as its algorithm in capitals.
func luaConstants() string {
	var names, values []string
	for _, k := range luaKinds {
		names, values = append(names, k.name), append(values, fmt.Sprint(int(k.kind)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "local %s = %s\n", strings.Join(names, ", "), strings.Join(values, ", "))
	algs := make([]string, 0, len(scriptAlgorithm))
	for name := range scriptAlgorithm {
		algs = append(algs, name)
	}
	slices.SortFunc(algs, func(a, b string) int { return scriptAlgorithm[a] - scriptAlgorithm[b] })
	names, values = names[:0], values[:0]
	for _, name := range algs {
		names, values = append(names, strings.ToUpper(name)), append(values, fmt.Sprint(scriptAlgorithm[name]))
	}
	fmt.Fprintf(&b, "local %s = %s\n", strings.Join(names, ", "), strings.Join(values, ", "))
	return b.String()
}

const (
	luaBegin = "-- BEGIN go generate: do not edit\n"
	luaEnd   = "-- END go generate\n"
)

// TestDecideLuaConstants: decide.lua's numbers for the request kinds and
// the algorithms are those Go sends. With -update-lua (go generate) it
// writes them.
func TestDecideLuaConstants(t *testing.T) {
	src, err := os.ReadFile("decide.lua")
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(src, []byte(luaBegin)), bytes.Index(src, []byte(luaEnd))
	if begin < 0 || end < begin {
		t.Fatalf("decide.lua has no block %q ... %q", luaBegin, luaEnd)
	}
	// The script counts on the order of the numbers: allows and peeks
	// first, then refunds, the other kinds after; the buckets first.
	if !(chanlimit.StoreAllow < chanlimit.StorePeek && chanlimit.StorePeek < chanlimit.StoreRefund &&
		chanlimit.StoreRefund < min(chanlimit.StoreReset, chanlimit.StoreTurn, chanlimit.StoreGiveBack, chanlimit.StoreDryRun, chanlimit.StoreHold)) {
		t.Error("decide.lua counts on ALLOW < PEEK < REFUND < the other kinds")
	}
	buckets := []string{algorithms.TokenBucketName, algorithms.GCRAName, algorithms.LeakyBucketName}
	for name, n := range scriptAlgorithm {
		if slices.Contains(buckets, name) != (n <= scriptAlgorithm[algorithms.LeakyBucketName]) {
			t.Errorf("decide.lua counts on the buckets' numbers being the lowest, up to leaky_bucket's: %s is %d", name, n)
		}
	}
	want := luaConstants()
	got := string(src[begin+len(luaBegin) : end])
	if got == want {
		return
	}
	if !*updateLua {
		t.Fatalf("decide.lua's constants are not Go's: run go generate in redislimit\nhave:\n%s\nwant:\n%s", got, want)
	}
	out := slices.Concat(src[:begin+len(luaBegin)], []byte(want), src[end:])
	if err := os.WriteFile("decide.lua", out, 0o644); err != nil {
		t.Fatal(err)
	}
}
