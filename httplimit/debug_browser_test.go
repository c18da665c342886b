//go:build browser

// The debug page in a real browser: headless Chromium loads it from a real
// server on 127.0.0.1, runs its script, and the tests read the DOM it
// rendered and the screenshot it took. They need Chromium, so they build
// only with the tag browser; .ci/run runs them through .ci/chromium, which
// installs Debian's chromium package if it must:
//
//	.ci/chromium go test -tags browser -run Browser ./httplimit
//
// With -screenshot FILE the screenshot is also written to FILE (the
// guide's is docs/debug-page.png).

package httplimit_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chanlimit/chanlimit/httplimit"
)

var screenshotTo = flag.String("screenshot", "", "also write the debug page's screenshot to this file")

// chromium returns the browser to run: $CHROMIUM, or chromium on $PATH.
// The tests fail without one: built with the tag browser, they are asked
// for.
func chromium(t *testing.T) string {
	t.Helper()
	if c := os.Getenv("CHROMIUM"); c != "" {
		return c
	}
	c, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the browser tests need Chromium: run them through .ci/chromium, which installs Debian's (%v)", err)
	}
	return c
}

// browse runs headless Chromium on url with args, and returns what it
// wrote on its standard output. Its script's timers run on virtual time,
// 30 s of it, waiting for the page's fetches as they go.
func browse(t *testing.T, url string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium(t), append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=30000",
	}, append(args, url)...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.Output()
	require.NoError(t, err, "chromium: %s", stderr.Bytes())
	return out
}

// busyDebugServer serves DebugHandler for debugRouter's router on an
// admin mux of a real server, and before each refresh of its JSON form
// moves the clock on a second and makes some decisions, so that the chart
// has something to draw: the key "hot" asks for 3 units, and so do k new
// keys (1 to 5, as a sequence of squares falls); per-second allows each 2
// of them. So hot is the key denied most, and is denied as the page shows
// it.
func busyDebugServer(t *testing.T) *httptest.Server {
	t.Helper()
	r, clk, _ := debugRouter(t)
	debug := httplimit.DebugHandler(r)
	var refreshes atomic.Int64
	admin := http.NewServeMux()
	admin.HandleFunc("GET /debug/chanlimit", func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Query().Get("format") == "json" {
			n := refreshes.Add(1)
			clk.Advance(time.Second)
			keys := []string{"hot"}
			for k := range 1 + n*n%5 {
				keys = append(keys, fmt.Sprintf("client-%d-%d", n, k))
			}
			for _, key := range keys {
				for range 3 {
					_, err := r.AllowN(req.Context(), key, 1)
					assert.NoError(t, err)
				}
			}
		}
		debug.ServeHTTP(w, req)
	})
	srv := httptest.NewServer(admin)
	t.Cleanup(srv.Close)
	return srv
}

// TestDebugPageInABrowser: the DOM Chromium rendered names the policies
// and the top denied keys, with what the key denied most has left, shows
// the hostile key as text (its markup never ran), and was refreshed by
// the page's own script from the JSON form, which drew the chart.
func TestDebugPageInABrowser(t *testing.T) {
	srv := busyDebugServer(t)
	dom := string(browse(t, srv.URL+"/debug/chanlimit", "--dump-dom"))

	assert.Regexp(t, `<title>chanlimit</title>`, dom, "the hostile key's script never set the title")
	assert.Contains(t, dom, "&lt;img src=x onerror=\"document.title='pwned'\"&gt;", "the hostile key, as text")
	assert.NotContains(t, dom, `<img`, "no element made of a key")

	top := regexp.MustCompile(`(?s)<tbody id="top-denied">(.*?)</tbody>`).FindStringSubmatch(dom)
	require.NotNil(t, top, "the top denied keys' table")
	rows := regexp.MustCompile(`<tr><td class="key">([^<]*)</td><td class="n">(\d+)</td><td>([^<]*)</td><td>([^<]*)</td></tr>`).FindAllStringSubmatch(top[1], -1)
	require.NotEmpty(t, rows)
	hot := rows[0]
	assert.Equal(t, "hot", hot[1], "the key denied most, first")
	assert.Greater(t, atoi(t, hot[2]), 3, "a denial a refresh")
	assert.Equal(t, "denied, retry in 500ms", hot[3], "per-second's next token")
	assert.Regexp(t, `^per-second: 0 \(\+1 in 500ms\), per-minute: \d+( \(\+1 in [0-9.]+m?s\))?$`, hot[4])
	listed := map[string]bool{}
	for _, row := range rows {
		listed[row[1]] = true
	}
	assert.True(t, listed["tenant-42"], "tenant-42 and its 3 denials, in the last minute still")

	policies := regexp.MustCompile(`(?s)<tbody id="policies">(.*?)</tbody>`).FindStringSubmatch(dom)
	require.NotNil(t, policies)
	for _, name := range []string{"per-second", "per-minute", "shadow"} {
		assert.Contains(t, policies[1], "<td>"+name+"</td>")
	}
	assert.Contains(t, dom, "<td>vip</td>", "an override's policy, in the counts by policy")

	assert.Regexp(t, `<p id="status">live: refreshed at `, dom, "the script refreshed the page from its JSON form")
	m := regexp.MustCompile(`<tr data-stat="allowed"><th>allowed</th><td class="n">(\d+)</td>`).FindStringSubmatch(dom)
	require.NotNil(t, m)
	assert.Greater(t, atoi(t, m[1]), 6, "the count of the last refresh, not the page's first")

	chart := regexp.MustCompile(`<svg id="chart"[^>]* data-points="(\d+)"`).FindStringSubmatch(dom)
	require.NotNil(t, chart, "the chart was drawn")
	points := atoi(t, chart[1])
	assert.GreaterOrEqual(t, points, 10)
	// Each second, 3 to 7 keys are allowed 2 units and denied 1: the
	// allowed line is twice as high as the denied one, point by point, and
	// the highest point is the chart's top (y=20) or near it.
	heights := map[string][]float64{}
	for _, line := range []string{"allowed", "denied"} {
		m := regexp.MustCompile(`<polyline id="chart-` + line + `" class="` + line + `" points="([^"]*)"`).FindStringSubmatch(dom)
		require.NotNil(t, m, line)
		for _, p := range strings.Fields(m[1]) {
			_, y, ok := strings.Cut(p, ",")
			require.True(t, ok, p)
			f, err := strconv.ParseFloat(y, 64)
			require.NoError(t, err)
			heights[line] = append(heights[line], 130-f) // above the baseline
		}
		assert.Len(t, heights[line], points, line)
	}
	for i := range points {
		assert.InDelta(t, heights["allowed"][i], 2*heights["denied"][i], 0.3, "point %d", i)
	}
	assert.InDelta(t, 110, slices.Max(heights["allowed"]), 0.1, "the top of the chart")
	assert.Greater(t, slices.Min(heights["denied"]), 0.0, "a denial each second, at least")
}

// TestDebugPageHeldKeyInABrowser: a key held after the page loaded is
// shown held, for how long, by the page's own script from the JSON form,
// in its row, and the hostile key, held too, as text still.
func TestDebugPageHeldKeyInABrowser(t *testing.T) {
	r, _, _ := debugRouter(t) // tenant-42 and hostileKey denied by per-second, first
	debug := httplimit.DebugHandler(r)
	var once sync.Once
	admin := http.NewServeMux()
	admin.HandleFunc("GET /debug/chanlimit", func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Query().Get("format") == "json" {
			once.Do(func() { // held once the page has loaded: only its script can tell
				for _, key := range []string{"tenant-42", hostileKey} {
					assert.NoError(t, r.Hold(req.Context(), key, time.Hour))
				}
			})
		}
		debug.ServeHTTP(w, req)
	})
	srv := httptest.NewServer(admin)
	t.Cleanup(srv.Close)
	dom := string(browse(t, srv.URL+"/debug/chanlimit", "--dump-dom"))

	assert.Regexp(t, `<p id="status">live: refreshed at `, dom, "the script refreshed the page from its JSON form")
	assert.Regexp(t, `<tr><td class="key">tenant-42</td><td class="n">3</td><td class="held">held 1h0m0s</td><td>per-second: 0 \(\+1 in 500ms\), per-minute: 98 \(\+1 in 1m0s\)</td></tr>`, dom)
	assert.Contains(t, dom, "<tr><td class=\"key\">&lt;img src=x onerror=\"document.title='pwned'\"&gt;</td><td class=\"n\">1</td><td class=\"held\">held 1h0m0s</td>", "the hostile key held, as text")
	assert.NotContains(t, dom, `<img`, "no element made of a key")
	assert.Regexp(t, `<tr><td class="key">vip</td><td class="n">1</td><td>denied, retry in 1s</td>`, dom, "vip is not held")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// TestDebugPageScreenshotInABrowser: Chromium's screenshot of the page is
// a PNG of the window's size with something drawn on it.
func TestDebugPageScreenshotInABrowser(t *testing.T) {
	const width, height = 1000, 1300
	srv := busyDebugServer(t)
	file := filepath.Join(t.TempDir(), "debug-page.png")
	browse(t, srv.URL+"/debug/chanlimit", "--screenshot="+file, fmt.Sprintf("--window-size=%d,%d", width, height))

	shot, err := os.ReadFile(file)
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(t, err, "a PNG")
	assert.Equal(t, image.Rect(0, 0, width, height), img.Bounds())
	colors := map[[4]uint32]bool{}
	for y := 0; y < height; y += 3 {
		for x := 0; x < width; x += 3 {
			r, g, b, a := img.At(x, y).RGBA()
			colors[[4]uint32{r, g, b, a}] = true
		}
	}
	assert.Greater(t, len(colors), 8, "text and the chart's lines, not a blank page")
	if *screenshotTo != "" {
		require.NoError(t, os.WriteFile(*screenshotTo, shot, 0o644))
	}
}
