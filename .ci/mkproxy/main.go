// Command mkproxy writes a file-system Go module proxy (the GOPROXY
// protocol's $module/@v/list, $version.info, $version.mod and
// $version.zip) holding modules made from directories of a source tree,
// so that a consumer can build against them as it would against
// released versions, with no network: .ci/consumer uses it.
//
//	mkproxy -out DIR -version V -time T PATH=DIR [PATH=DIR ...]
//
// Each PATH=DIR is a module path and the directory its go.mod is in; T,
// in RFC 3339, is the versions' time (.info), the commit's.
// The zips are made by golang.org/x/mod/zip, which applies the rules the
// go command does (nested modules and vendor directories left out, file
// names checked).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

func main() {
	out := flag.String("out", "", "the proxy's directory")
	version := flag.String("version", "", "the version of every module")
	at := flag.String("time", "", "the versions' time, RFC 3339")
	flag.Parse()
	when, err := time.Parse(time.RFC3339, *at)
	if *out == "" || *version == "" || err != nil || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: mkproxy -out DIR -version V -time T PATH=DIR [PATH=DIR ...]")
		os.Exit(2)
	}
	for _, arg := range flag.Args() {
		path, dir, ok := strings.Cut(arg, "=")
		if !ok {
			fail(fmt.Errorf("%q is not PATH=DIR", arg))
		}
		if err := write(*out, module.Version{Path: path, Version: *version}, dir, when); err != nil {
			fail(err)
		}
	}
}

// write writes m, made from dir at when, into the proxy at root.
func write(root string, m module.Version, dir string, when time.Time) error {
	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	at := filepath.Join(root, escaped, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{m.Version, when.UTC()})
	if err != nil {
		return err
	}
	z, err := os.Create(filepath.Join(at, m.Version+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(z, m, dir); err != nil {
		z.Close()
		return fmt.Errorf("%s: %w", m, err)
	}
	if err := z.Close(); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":              []byte(m.Version + "\n"),
		m.Version + ".info": info,
		m.Version + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mkproxy:", err)
	os.Exit(1)
}
