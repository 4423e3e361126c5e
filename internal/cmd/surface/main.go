package main

import (
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/drainkit/drainkit/internal/exported"
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
		for _, n := range exported.Names(f) {
			out[dir] = append(out[dir], n.Name)
		}
		return nil
	})
	for dir, names := range out {
		out[dir] = dedup(names)
	}
	return out, err
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
