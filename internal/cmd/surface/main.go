package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "list every identifier")
	top := flag.Bool("top", false, "count only package-level names (no methods or fields)")
	root := flag.String("root", ".", "the module's root directory")
	flag.Parse()
	pkgs, err := count(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "surface:", err)
		os.Exit(1)
	}
	total := 0
	dirs := make([]string, 0, len(pkgs))
	for dir := range pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		names := pkgs[dir]
		if *top {
			names = topLevel(names)
		}
		sort.Strings(names)
		total += len(names)
		fmt.Printf("%-24s %4d\n", dir, len(names))
		if *verbose {
			for _, n := range names {
				fmt.Printf("    %s\n", n)
			}
		}
	}
	fmt.Printf("%-24s %4d\n", "total", total)
}

// public reports whether the package in dir (relative to the root) is part
// of drainkit's public surface.
func public(dir string) bool {
	for _, part := range strings.Split(filepath.ToSlash(dir), "/") {
		switch part {
		case "internal", "examples", "cmd", "testdata", "docs":
			return false
		}
		if strings.HasPrefix(part, ".") && part != "." {
			return false
		}
	}
	return true
}

// count returns, for every public package directory, its exported
// identifiers.
func count(root string) (map[string][]string, error) {
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && !public(rel) {
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
		if f.Name.Name == "main" {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		out[dir] = append(out[dir], exported(f)...)
		return nil
	})
	for dir, names := range out {
		out[dir] = dedup(names)
	}
	return out, err
}

// exported lists the exported identifiers a file declares.
func exported(f *ast.File) []string {
	var names []string
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				names = append(names, d.Name.Name)
			} else if recv := recvType(d.Recv.List[0].Type); ast.IsExported(recv) {
				names = append(names, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							names = append(names, n.Name)
						}
					}
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					names = append(names, s.Name.Name)
					names = append(names, members(s.Name.Name, s.Type)...)
				}
			}
		}
	}
	return names
}

// members lists the exported fields of a struct type and the exported
// methods of an interface type.
func members(typ string, expr ast.Expr) []string {
	var list *ast.FieldList
	switch t := expr.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return nil
	}
	var names []string
	for _, field := range list.List {
		for _, n := range field.Names {
			if n.IsExported() {
				names = append(names, typ+"."+n.Name)
			}
		}
	}
	return names
}

func recvType(expr ast.Expr) string {
	switch t := expr.(type) {
	case *ast.StarExpr:
		return recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.IndexListExpr:
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

// topLevel keeps the package-level names: those without a "Type." prefix.
func topLevel(names []string) []string {
	var out []string
	for _, n := range names {
		if !strings.Contains(n, ".") {
			out = append(out, n)
		}
	}
	return out
}

func dedup(names []string) []string {
	seen := map[string]bool{}
	out := names[:0]
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
