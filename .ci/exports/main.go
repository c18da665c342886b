// Command exports counts the exported identifiers of Go packages, the size
// of the promise each makes: top-level consts, vars, funcs and types, the
// exported methods of exported types, and the methods of exported
// interfaces. Struct fields and test files are left out. With V=1 it lists
// them.
//
//	go run ./.ci/exports . actor algorithms clock
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
)

func main() {
	total := 0
	for _, dir := range os.Args[1:] {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		if err != nil {
			panic(err)
		}
		n := 0
		var names []string
		for _, p := range pkgs {
			for _, f := range p.Files {
				for _, d := range f.Decls {
					switch d := d.(type) {
					case *ast.FuncDecl:
						if !d.Name.IsExported() {
							continue
						}
						if d.Recv != nil { // a method of an exported type
							t := d.Recv.List[0].Type
							if s, ok := t.(*ast.StarExpr); ok {
								t = s.X
							}
							if ix, ok := t.(*ast.IndexExpr); ok {
								t = ix.X
							}
							if ix, ok := t.(*ast.IndexListExpr); ok {
								t = ix.X
							}
							id := t.(*ast.Ident)
							if !id.IsExported() {
								continue
							}
							names = append(names, id.Name+"."+d.Name.Name)
						} else {
							names = append(names, d.Name.Name)
						}
						n++
					case *ast.GenDecl:
						for _, s := range d.Specs {
							switch s := s.(type) {
							case *ast.ValueSpec:
								for _, id := range s.Names {
									if id.IsExported() {
										n++
										names = append(names, id.Name)
									}
								}
							case *ast.TypeSpec:
								if !s.Name.IsExported() {
									continue
								}
								n++
								names = append(names, s.Name.Name)
								if it, ok := s.Type.(*ast.InterfaceType); ok {
									for _, m := range it.Methods.List {
										for _, id := range m.Names {
											if id.IsExported() {
												n++
												names = append(names, s.Name.Name+"."+id.Name)
											}
										}
									}
								}
							}
						}
					}
				}
			}
		}
		fmt.Printf("%-12s %d\n", dir, n)
		if os.Getenv("V") != "" {
			fmt.Println("  ", strings.Join(names, " "))
		}
		total += n
	}
	fmt.Printf("%-12s %d\n", "total", total)
}
