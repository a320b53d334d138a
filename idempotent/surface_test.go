package idempotent_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/idempotent"
)

// surfaceBudget is the most exported names the core may have: its package-level constants,
// variables, functions and types and its exported methods, as exportedNames counts them.
// The core is the request path a stranger adopts — the guard and its Config, the request,
// the work and its answers, the outcomes, the refusals to match with errors.Is, the table,
// the key's checks and the purge. What an operator or a job runner does beyond it is
// idemops's, the classes of database errors are dberr's, the lab's switches idemlab's, and
// what only the tests need is export_test.go's. Raise it only with a reason a stranger would
// accept.
const surfaceBudget = 45

// TestSurface holds the core to its budget of exported names and keeps the bench's and the
// lab's switches out of the public Config: a service must not be able to weaken its guard.
func TestSurface(t *testing.T) {
	names := exportedNames(t, ".")
	if len(names) > surfaceBudget {
		t.Errorf("package idempotent exports %d names, more than its budget of %d:\n%s", len(names), surfaceBudget, strings.Join(names, "\n"))
	}
	cfg := reflect.TypeOf(idempotent.Config{})
	for i := range cfg.NumField() {
		f := cfg.Field(i)
		if f.IsExported() && strings.Contains(strings.ToLower(f.Name), "lab") {
			t.Errorf("Config exports %s: the lab's switches belong to idemlab", f.Name)
		}
	}
}

// exportedNames lists the exported names of the non-test Go files of the package in dir.
func exportedNames(tb testing.TB, dir string) []string {
	tb.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			tb.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					names = append(names, d.Name.Name)
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
					names = append(names, id.Name+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	return names
}
