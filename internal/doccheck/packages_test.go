package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/exported"
)

// The project's definition of done, package by package: a doc.go that says
// what the package is for, an Example that runs as a test, goleak over its
// tests, and a doc comment on every exported name. A package added without
// one of them is named here.
func TestEveryPackageHasDocExampleAndGoleak(t *testing.T) {
	pkgs, _, err := survey(root)
	require.NoError(t, err)
	require.NotEmpty(t, pkgs["drain"], "found no package drain: is the root right?")
	for _, fault := range pkgs.faults() {
		t.Error(fault)
	}
	t.Logf("%d packages checked", len(pkgs))
}

// Every exported name (a package-level one, or a method of an exported type)
// has a doc comment. A struct's fields and an interface's methods are left to
// their type's doc comment, as go doc shows them in it.
func TestEveryExportedNameHasADocComment(t *testing.T) {
	_, undocumented, err := survey(root)
	require.NoError(t, err)
	for _, u := range undocumented {
		t.Errorf("%s is exported and has no doc comment", u)
	}
}

// The checks find each fault in the package that has it, and only there: a
// tree of packages each missing one thing, and one missing nothing.
func TestPackageFaultsAreFoundWhereTheyAre(t *testing.T) {
	tree := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(tree, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
	}
	const leakMain = "package p\nimport \"go.uber.org/goleak\"\nfunc TestMain(m *testing.M) { goleak.VerifyTestMain(m) }\n"
	const example = "package p_test\n// Example shows it.\nfunc Example() {}\n"
	write("good/doc.go", "// Package p is good.\npackage p\n")
	write("good/p.go", "package p\n\n// F is documented.\nfunc F() {}\n\nfunc G() {}\n\n// T is.\ntype T struct{ Field int }\n\nfunc (T) M() {}\n\ntype t struct{}\n\nfunc (t) Error() string { return \"\" }\n")
	write("good/main_test.go", leakMain)
	write("good/example_test.go", example)
	write("aliased/doc.go", "// Package p imports goleak by another name.\npackage p\n")
	write("aliased/p_test.go", "package p\nimport leak \"go.uber.org/goleak\"\nfunc TestMain(m *testing.M) { leak.VerifyTestMain(m) }\nfunc ExampleF() {}\n")
	write("nodoc/p.go", "// Package p says so in p.go.\npackage p\n")
	write("nodoc/main_test.go", leakMain)
	write("nodoc/example_test.go", example)
	write("noexample/doc.go", "// Package p has tests and no Example.\npackage p\n")
	write("noexample/main_test.go", leakMain)
	write("noexample/p_test.go", "package p\nfunc TestX(t *testing.T) {}\nfunc example() {}\n")
	write("nogoleak/doc.go", "// Package p has a TestMain without goleak.\npackage p\n")
	write("nogoleak/main_test.go", "package p\nfunc TestMain(m *testing.M) { os.Exit(m.Run()) }\nfunc leak() { goleak.VerifyTestMain(nil) }\n")
	write("nogoleak/example_test.go", example)
	write("notests/doc.go", "// Package p has no test file.\npackage p\n")
	write("good/testdata/src/x.go", "package x\nfunc Undocumented() {}\n")

	pkgs, undocumented, err := survey(tree)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"nodoc: no doc.go (what the package is for, its typical wiring, its guarantees)",
		"noexample: no Example function in its test files",
		"nogoleak: its tests run without goleak: no TestMain calling goleak.VerifyTestMain",
		"notests: no test files: no Example, no test",
	}, pkgs.faults())
	assert.Equal(t, []string{"good/p.go:6:6: G", "good/p.go:11:10: T.M"}, undocumented)
}

// A pkg is what the checks know of one package directory.
type pkg struct {
	doc     bool // it has a doc.go
	example bool // a test file has an Example function
	tests   bool // it has test files
	goleak  bool // a test file's TestMain calls goleak.VerifyTestMain
}

// pkgs are the module's packages by directory, relative to the root.
type pkgs map[string]*pkg

// faults names each package's missing parts, sorted.
func (ps pkgs) faults() []string {
	var out []string
	for dir, p := range ps {
		if !p.doc {
			out = append(out, dir+": no doc.go (what the package is for, its typical wiring, its guarantees)")
		}
		switch {
		case !p.tests:
			out = append(out, dir+": no test files: no Example, no test")
		case !p.example:
			out = append(out, dir+": no Example function in its test files")
		}
		if p.tests && !p.goleak {
			out = append(out, dir+": its tests run without goleak: no TestMain calling goleak.VerifyTestMain")
		}
	}
	slices.Sort(out)
	return out
}

// survey reads every Go file under root (but hidden directories and testdata):
// the packages, and the exported names without a doc comment, as
// "file:line:col: name" in the walk's order.
func survey(root string) (pkgs, []string, error) {
	ps := pkgs{}
	var undocumented []string
	fset := token.NewFileSet()
	err := walkFiles(root, []string{".go"}, func(rel string, src []byte) error {
		f, err := parser.ParseFile(fset, rel, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := path.Dir(rel)
		p := ps[dir]
		if p == nil {
			p = &pkg{}
			ps[dir] = p
		}
		if !strings.HasSuffix(rel, "_test.go") {
			p.doc = p.doc || path.Base(rel) == "doc.go"
			for _, n := range exported.Names(f) {
				if !n.Doc && !n.Member {
					undocumented = append(undocumented, fmt.Sprintf("%s: %s", fset.Position(n.Pos), n.Name))
				}
			}
			return nil
		}
		p.tests = true
		p.example = p.example || hasExample(f)
		p.goleak = p.goleak || leakChecked(f)
		return nil
	})
	return ps, undocumented, err
}

// hasExample reports whether the test file f declares an Example function.
func hasExample(f *ast.File) bool {
	return slices.ContainsFunc(f.Decls, func(decl ast.Decl) bool {
		fn, ok := decl.(*ast.FuncDecl)
		return ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example")
	})
}

// leakChecked reports whether the test file f has a TestMain that calls
// goleak.VerifyTestMain, by whatever name f imports goleak.
func leakChecked(f *ast.File) bool {
	name := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "go.uber.org/goleak" {
			name = "goleak"
			if imp.Name != nil {
				name = imp.Name.Name
			}
		}
	}
	if name == "" {
		return false
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != "TestMain" || fn.Body == nil {
			continue
		}
		found := false
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "VerifyTestMain" {
				x, ok := sel.X.(*ast.Ident)
				found = ok && x.Name == name
			}
			return !found
		})
		if found {
			return true
		}
	}
	return false
}
