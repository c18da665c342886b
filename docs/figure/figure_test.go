package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFigureIsDeterministicAndValid: two renders are the same bytes, they
// parse as XML with an svg root, and the committed docs/algorithms.svg is
// what the code draws (regenerate it with the command in README).
func TestFigureIsDeterministicAndValid(t *testing.T) {
	var a, b bytes.Buffer
	if err := render(&a); err != nil {
		t.Fatal(err)
	}
	if err := render(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two renders differ")
	}

	dec := xml.NewDecoder(bytes.NewReader(a.Bytes()))
	root, elements := "", 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			elements++
		}
	}
	if root != "svg" || elements < 100 {
		t.Fatalf("root %q with %d elements: not the figure", root, elements)
	}
	for _, alg := range algorithms {
		if !strings.Contains(a.String(), ">"+alg.name+"<") {
			t.Errorf("no row for %s", alg.name)
		}
	}

	committed, err := os.ReadFile("../algorithms.svg")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, a.Bytes()) {
		t.Fatal("docs/algorithms.svg is stale: run go run ./docs/figure -o docs/algorithms.svg")
	}
}

// TestFigureShowsTheDifferences: the rows differ where the algorithms do
// (gcra's decisions are token_bucket's; the windows admit fewer from the
// bursts), so the figure has something to show.
func TestFigureShowsTheDifferences(t *testing.T) {
	ts := traffic()
	admitted := map[string]int{}
	decisions := map[string][]bool{}
	for _, alg := range algorithms {
		outs, err := decide(alg.name, ts)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			decisions[alg.name] = append(decisions[alg.name], o.allowed)
			if o.allowed {
				admitted[alg.name]++
			}
		}
	}
	for i := range ts {
		if decisions["gcra"][i] != decisions["token_bucket"][i] {
			t.Fatalf("request %d: gcra and token_bucket differ", i)
		}
	}
	if admitted["sliding_window_log"] >= admitted["token_bucket"] || admitted["sliding_window_log"] == len(ts) {
		t.Fatalf("admitted: %v: the bursts should show the windows' strictness", admitted)
	}
}

// TestTrafficNeverTwoAtOnce: no two requests arrive at the same instant,
// so each tick of the figure is one request and the counts it prints
// ("57: a trickle, 3 bursts", "41 of 57 admitted") are of the ticks a
// reader sees. (The trickle fell on a burst's request at 1s, 1.4s, 7s
// and 7.4s: two requests, one tick, and at 1.4s one admitted, one not.)
func TestTrafficNeverTwoAtOnce(t *testing.T) {
	ts := traffic()
	for i := 1; i < len(ts); i++ {
		if ts[i] <= ts[i-1] {
			t.Fatalf("requests %d and %d both at %v", i-1, i, ts[i])
		}
	}
}
