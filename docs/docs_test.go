// Package docs_test checks README.md, CONTRIBUTING.md, CHANGELOG.md and
// the guides of docs/: every relative link leads to a file of the
// repository; every Go block that is a whole program (it starts with a
// package clause) builds and passes go vet against the module as it is,
// and every other block, a fragment of one, is Go that parses, as
// statements or as declarations.
package docs_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// block is a Go block of a Markdown file.
type block struct {
	file string
	line int
	code string
}

var fence = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// pages returns the Markdown files the package checks.
func pages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join("..", "README.md"), filepath.Join("..", "CONTRIBUTING.md"), filepath.Join("..", "CHANGELOG.md")}, files...)
}

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anyCode = regexp.MustCompile("(?ms)^```.*?^```")
)

// TestRelativeLinks: every link that is not to a web page leads to a
// file or directory of the repository.
func TestRelativeLinks(t *testing.T) {
	for _, f := range pages(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(anyCode.ReplaceAllString(string(src), ""), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s: the link to %s leads nowhere: %v", f, m[1], err)
			}
		}
	}
}

// blocks returns the Go blocks of the pages.
func blocks(t *testing.T) []block {
	t.Helper()
	var out []block
	for _, f := range pages(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllSubmatchIndex(src, -1) {
			out = append(out, block{f, 1 + strings.Count(string(src[:m[2]]), "\n"), string(src[m[2]:m[3]])})
		}
	}
	return out
}

// TestBlocksParse: every fragment is statements or declarations Go
// parses.
func TestBlocksParse(t *testing.T) {
	for _, b := range blocks(t) {
		if strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
			continue
		}
		fset := token.NewFileSet()
		_, stmtErr := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+b.code+"\n}\n", 0)
		_, declErr := parser.ParseFile(fset, "", "package p\n"+b.code, 0)
		if stmtErr != nil && declErr != nil {
			t.Errorf("%s:%d: the block is neither statements (%v) nor declarations (%v)", b.file, b.line, stmtErr, declErr)
		}
	}
}

// TestProgramsBuild: every whole program builds and passes go vet.
func TestProgramsBuild(t *testing.T) {
	dir, err := os.MkdirTemp(".", "blocks")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var programs []string
	for i, b := range blocks(t) {
		if !strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
			continue
		}
		sub := filepath.Join(dir, fmt.Sprint("b", i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "main.go"), []byte(b.code), 0o644); err != nil {
			t.Fatal(err)
		}
		programs = append(programs, "./"+filepath.ToSlash(sub))
		t.Logf("%s:%d: %s", b.file, b.line, sub)
	}
	if len(programs) == 0 {
		t.Fatal("no whole program: the README's quick start is one")
	}
	cmd := exec.Command("go", append([]string{"vet"}, programs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet: %v\n%s", err, out)
	}
}
