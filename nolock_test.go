package chanlimit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mutexAllowed are the files outside package clock that may hold a
// mutex, and why: none of them guards a key's state.
var mutexAllowed = map[string]string{
	"redislimit/replay.go": "the numbering of a store's calls to Redis: the key's state is Redis's",
	"redislimit/lanes.go":  "the limit on a store's round trips out to Redis, and the times they took: the key's state is Redis's",
	"redislimit/combine.go": "the Decides waiting for one of a store's round trips to Redis, held for the few instructions that take or answer them: " +
		"a goroutine of its own would add two hand-offs to every Decide, and the key's state is Redis's",
}

// TestNoMutexGuardsLimiterState: no non-test file of the repository, in
// any of its modules, names sync.Mutex, sync.RWMutex or sync.Cond
// outside package clock (which may use what it needs) and mutexAllowed.
// A key's state is owned by its partition's goroutine, and this fails as
// soon as someone puts a lock around it.
func TestNoMutexGuardsLimiterState(t *testing.T) {
	fset := token.NewFileSet()
	var seen int
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "clock") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		seen++
		for _, name := range lockTypes(f) {
			if _, ok := mutexAllowed[filepath.ToSlash(path)]; !ok {
				t.Errorf("%s names sync.%s: a key's state belongs to its partition's goroutine, not to a lock", path, name)
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, seen, 50, "the walk found the repository's files")
}

// lockTypes returns the lock types of package sync that f names, under
// whatever name f imports sync.
func lockTypes(f *ast.File) []string {
	var syncName string
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "sync" {
			syncName = "sync"
			if imp.Name != nil {
				syncName = imp.Name.Name
			}
		}
	}
	if syncName == "" {
		return nil
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == syncName {
			switch sel.Sel.Name {
			case "Mutex", "RWMutex", "Cond", "Locker":
				found = append(found, sel.Sel.Name)
			}
		}
		return true
	})
	return found
}

// TestLockTypesFindsALock: the check above would see a lock.
func TestLockTypesFindsALock(t *testing.T) {
	src := `package p
import s "sync"
type table struct {
	mu s.RWMutex
	keys map[string]int
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"RWMutex"}, lockTypes(f))
}
