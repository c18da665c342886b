// Command figure draws docs/algorithms.svg: the same bursty traffic on
// one key through each of chanlimit's six algorithms, on a fake clock, one
// row each, showing which requests were admitted and when, and for
// leaky_bucket when the admitted work runs. It is deterministic: the same
// code draws the same bytes.
//
//	go run ./docs/figure -o docs/algorithms.svg
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"time"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/clock"
)

func main() {
	out := flag.String("o", "docs/algorithms.svg", "the file to write")
	flag.Parse()
	var buf bytes.Buffer
	if err := render(&buf); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}

// The traffic and the limit every algorithm is given.
const (
	span   = 10 * time.Second
	limit  = 5 // per window
	window = time.Second
)

// algorithms are drawn in this order, each with a line on what it does.
var algorithms = []struct{ name, note string }{
	{"token_bucket", "a bucket of 5 tokens, refilled at 5 a second"},
	{"gcra", "the same decisions as token_bucket, one timestamp a key"},
	{"leaky_bucket", "a queue of 5 drained at 5 a second: admitted work waits its turn"},
	{"fixed_window", "5 a window; a window opens at the first request after the last one ended"},
	{"sliding_window_log", "at most 5 in any second: exact, one timestamp per request"},
	{"sliding_window_counter", "the previous window weighted by its overlap: near sliding_window_log"},
}

// traffic returns the arrival times of the requests: a trickle of one
// every 400ms, and three bursts of one every 40ms; where the trickle
// falls on a burst's request, the two are one request, so that each tick
// drawn is one request.
func traffic() []time.Duration {
	var ts []time.Duration
	for t := 200 * time.Millisecond; t < span; t += 400 * time.Millisecond {
		ts = append(ts, t)
	}
	for _, b := range []struct {
		at time.Duration
		n  int
	}{{time.Second, 12}, {4500 * time.Millisecond, 8}, {7 * time.Second, 16}} {
		for i := range b.n {
			ts = append(ts, b.at+time.Duration(i)*40*time.Millisecond)
		}
	}
	sortDurations(ts)
	return slices.Compact(ts)
}

func sortDurations(ts []time.Duration) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j] < ts[j-1]; j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// outcome is what one request got.
type outcome struct {
	at      time.Duration
	allowed bool
	runs    time.Duration // leaky_bucket: when the admitted work's turn comes
}

// decide sends the traffic through a router of the algorithm on a fake
// clock, and returns what each request got.
func decide(alg string, ts []time.Duration) ([]outcome, error) {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(epoch)
	r, err := chanlimit.New(chanlimit.Config{Algorithm: alg, Limit: limit, Window: window, Partitions: 1, Clock: clk})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := make([]outcome, len(ts))
	for i, t := range ts {
		clk.Set(epoch.Add(t))
		d, err := r.AllowN(context.Background(), "k", 1)
		if err != nil {
			return nil, fmt.Errorf("%s at %v: %w", alg, t, err)
		}
		out[i] = outcome{at: t, allowed: d.Allowed, runs: t + d.Delay}
	}
	return out, nil
}

// The geometry of the figure, in pixels.
const (
	width    = 960
	left     = 190 // the labels' column
	right    = 20
	top      = 34
	rowH     = 52
	axisH    = 30
	perSec   = float64(width-left-right) / 10
	tickH    = 14
	allowCol = "#2e7d32"
	denyCol  = "#c62828"
	runCol   = "#1565c0"
)

// x returns the horizontal position of t.
func x(t time.Duration) float64 { return left + t.Seconds()*perSec }

// render writes the figure as SVG.
func render(w io.Writer) error {
	ts := traffic()
	rows := len(algorithms) + 1 // the requests, then each algorithm
	height := top + rows*rowH + axisH + 20
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">The same traffic on one key, Limit %d per %v: `+
		`<tspan fill="%s">admitted</tspan>, <tspan fill="%s">refused</tspan>, <tspan fill="%s">when leaky_bucket runs it</tspan></text>`+"\n",
		left-180, limit, window, allowCol, denyCol, runCol)

	// The grid: a line each second.
	bottom := top + rows*rowH
	for s := 0; s <= 10; s++ {
		gx := x(time.Duration(s) * time.Second)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>`+"\n", gx, top, gx, bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%ds</text>`+"\n", gx, bottom+18, s)
	}

	// The requests.
	y := top + rowH/2
	fmt.Fprintf(&b, `<text x="8" y="%d" font-weight="bold">requests</text>`+"\n", y+4)
	fmt.Fprintf(&b, `<text x="8" y="%d" font-size="11" fill="#555">%d: a trickle, 3 bursts</text>`+"\n", y+18, len(ts))
	for _, t := range ts {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#424242" stroke-width="2"/>`+"\n", x(t), y-tickH/2, x(t), y+tickH/2)
	}

	for i, alg := range algorithms {
		outs, err := decide(alg.name, ts)
		if err != nil {
			return err
		}
		y := top + (i+1)*rowH + rowH/2
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#bdbdbd"/>`+"\n", 4, y-rowH/2, width-right, y-rowH/2)
		admitted := 0
		for _, o := range outs {
			if o.allowed {
				admitted++
			}
		}
		fmt.Fprintf(&b, `<text x="8" y="%d" font-weight="bold">%s</text>`+"\n", y+4, alg.name)
		fmt.Fprintf(&b, `<text x="8" y="%d" font-size="11" fill="#555">%d of %d admitted</text>`+"\n", y+18, admitted, len(outs))
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="#555">%s</text>`+"\n", left+4, y-rowH/2+13, alg.note)
		for _, o := range outs {
			switch {
			case !o.allowed:
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.5" opacity="0.7"/>`+"\n", x(o.at), y+2, x(o.at), y+8, denyCol)
			case o.runs > o.at:
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1" opacity="0.5"/>`+"\n", x(o.at), y, x(o.runs), y+12, runCol)
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="2.5" fill="%s"/>`+"\n", x(o.runs), y+12, runCol)
				fallthrough
			default:
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", x(o.at), y-tickH+4, x(o.at), y, allowCol)
			}
		}
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}
