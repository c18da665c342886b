package chanlimit_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

// fuzzConfig is the router every FuzzRestore input is restored into: the
// algorithm is chosen by the input.
func fuzzConfig(alg byte) chanlimit.Config {
	builtins := []string{"token_bucket", "gcra", "leaky_bucket", "sliding_window_log", "fixed_window", "sliding_window_counter"}
	return chanlimit.Config{
		Algorithm:  builtins[int(alg)%len(builtins)],
		Limit:      3,
		Window:     time.Second,
		Partitions: 2,
		Clock:      clock.NewFake(epoch),
		MaxKeys:    64,
	}
}

// FuzzRestore: whatever the bytes, Restore never panics, and either loads
// everything or refuses with ErrBadSnapshot and changes nothing. A
// restored router then answers, snapshots, and restores again.
func FuzzRestore(f *testing.F) {
	for alg := range byte(6) {
		cfg := fuzzConfig(alg)
		r, err := chanlimit.New(cfg)
		if err != nil {
			f.Fatal(err)
		}
		for k := range 5 {
			cfg.Clock.(*clock.Fake).Advance(100 * time.Millisecond)
			_, _ = r.AllowN(bg, fmt.Sprint("key", k), 1+k%3)
		}
		var buf bytes.Buffer
		if err := r.Snapshot(bg, &buf); err != nil {
			f.Fatal(err)
		}
		r.Close()
		f.Add(alg, false, buf.Bytes())
		f.Add(alg, true, buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, alg byte, fixSum bool, data []byte) {
		if fixSum && len(data) >= 4 {
			data = resum(data) // past the checksum, into the parser
		}
		cfg := fuzzConfig(alg)
		r, err := chanlimit.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		_, _ = r.AllowN(bg, "a", 2)
		_, _ = r.AllowN(bg, "b", 1)
		checkRestore(t, r, cfg, data, fingerprint)
	})
}

// checkRestore restores data into r, whose config is cfg (its Clock a
// *clock.Fake), and checks what the fuzz targets promise: a refusal is an
// ErrBadSnapshot that changes nothing view can tell; once loaded, every
// state decides, saves and loads again, into a twin of cfg that answers
// alike. It returns r's view before the restore, and whether data loaded.
func checkRestore[V comparable](t *testing.T, r *chanlimit.Router, cfg chanlimit.Config, data []byte, view func(*testing.T, *chanlimit.Router) V) (before V, loaded bool) {
	t.Helper()
	before = view(t, r)
	if err := r.Restore(bg, bytes.NewReader(data)); err != nil {
		if !errors.Is(err, chanlimit.ErrBadSnapshot) {
			t.Fatalf("Restore: %v, want an ErrBadSnapshot", err)
		}
		if after := view(t, r); after != before {
			t.Fatalf("a refused Restore changed the router:\n%+v\n%+v", before, after)
		}
		return before, false
	}
	cfg.Clock.(*clock.Fake).Advance(300 * time.Millisecond)
	_ = view(t, r)
	var again bytes.Buffer
	if err := r.Snapshot(bg, &again); err != nil {
		t.Fatalf("Snapshot of a restored router: %v", err)
	}
	twin, err := chanlimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer twin.Close()
	if err := twin.Restore(bg, &again); err != nil {
		t.Fatalf("Restore of a restored router's snapshot: %v", err)
	}
	if a, b := view(t, r), view(t, twin); a != b {
		t.Fatalf("twin answers otherwise:\n%+v\n%+v", a, b)
	}
	return before, true
}

// view is what a router says of a few keys, and how many it holds: two
// routers with equal views answer those keys alike.
type view struct {
	keys      int
	decisions [7]chanlimit.Decision
	failed    [7]bool
}

// viewKeys are the keys a view asks about.
var viewKeys = [7]string{"a", "b", "key0", "key1", "key2", "key3", "key4"}

// fingerprint returns r's view.
func fingerprint(t *testing.T, r *chanlimit.Router) view {
	t.Helper()
	st, err := r.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	v := view{keys: st.Keys}
	for i, k := range viewKeys {
		v.decisions[i], err = r.Peek(bg, k, 1)
		v.failed[i] = err != nil
	}
	return v
}
