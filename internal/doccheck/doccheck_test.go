package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/scanner"
	"go/token"
	"path"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A block is a code block found in the documentation.
type block struct {
	where string // file:line
	dir   string // the package directory, "" for Markdown (any test file)
	code  string
}

// root is the module's root: two levels up from this package.
const root = "../.."

func TestEveryDocCodeBlockIsCompiled(t *testing.T) {
	blocks, tests, err := collect(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("found no code blocks: is the root right?")
	}
	checked := 0
	for _, b := range blocks {
		want := tokens(b.code)
		if len(want) == 0 {
			continue
		}
		checked++
		if !foundIn(want, b.dir, tests) {
			t.Errorf("%s: code block is in no test file of %s; make it an Example (or fix the drift):\n%s",
				b.where, scope(b.dir), indent(b.code))
		}
	}
	t.Logf("%d Go code blocks checked against the test files of %d directories", checked, len(tests))
}

func TestBlocksAreFoundOnlyWhereTheyAre(t *testing.T) {
	tests := map[string][]string{"pkg": {tokens("x := f(1)\nif x > 2 { g(x) }\n")}}
	if !foundIn(tokens("if x > 2 {\n\tg(x) // a comment\n}"), "pkg", tests) {
		t.Error("a block that is in the test file, with another layout and a comment, was not found")
	}
	if foundIn(tokens("if x > 3 { g(x) }"), "pkg", tests) {
		t.Error("a block whose constant differs was found")
	}
	if foundIn(tokens("x := f(1)"), "other", tests) {
		t.Error("a doc block was found in another package's tests")
	}
	if !foundIn(tokens("x := f(1)"), "", tests) {
		t.Error("a Markdown block was not found in the module's tests")
	}
	if isGo("go test ./...") || isGo("$ drainkit plan -grace 30s") {
		t.Error("a shell command was taken for Go")
	}
	if !isGo("d, err := drain.New(drain.Config{})") || !isGo("func f() {}") {
		t.Error("Go was taken for text")
	}
}

// internal reports whether dir is below an internal directory: its docs
// speak to drainkit's own developers, and are not checked.
func internal(dir string) bool {
	for _, part := range strings.Split(dir, "/") {
		if part == "internal" {
			return true
		}
	}
	return false
}

func scope(dir string) string {
	if dir == "" {
		return "the module"
	}
	return dir
}

func indent(s string) string {
	return "\t" + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n\t")
}

// collect walks the module: Go code blocks from package doc comments and
// Markdown, and the token streams of every test file by directory.
func collect(root string) ([]block, map[string][]string, error) {
	var blocks []block
	tests := map[string][]string{}
	err := walkFiles(root, []string{".go", ".md"}, func(rel string, src []byte) error {
		dir := path.Dir(rel)
		var bs []block
		var err error
		switch {
		case strings.HasSuffix(rel, "_test.go"):
			tests[dir] = append(tests[dir], tokens(string(src)))
		case strings.HasSuffix(rel, ".go") && !internal(dir):
			bs, err = docBlocks(rel, dir, src)
		case strings.HasSuffix(rel, ".md"):
			bs, err = fencedBlocks(rel, src, "go")
		}
		blocks = append(blocks, bs...)
		return err
	})
	return blocks, tests, err
}

// docBlocks returns the Go code blocks of the package doc comment of src,
// the file rel.
func docBlocks(rel, dir string, src []byte) ([]block, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		return nil, err
	}
	if f.Doc == nil {
		return nil, nil
	}
	var p comment.Parser
	var out []block
	line := fset.Position(f.Doc.Pos()).Line
	for _, b := range p.Parse(docText(f.Doc)).Content {
		code, ok := b.(*comment.Code)
		if !ok || !isGo(code.Text) {
			continue
		}
		out = append(out, block{where: fmt.Sprintf("%s (doc comment from line %d)", rel, line), dir: dir, code: code.Text})
	}
	return out, nil
}

// docText is the comment's text with the markers removed but the
// indentation kept, which go/doc/comment needs to find code blocks.
func docText(g *ast.CommentGroup) string {
	var b strings.Builder
	for _, c := range g.List {
		s := strings.TrimPrefix(c.Text, "//")
		s = strings.TrimPrefix(s, "/*")
		s = strings.TrimSuffix(s, "*/")
		s = strings.TrimPrefix(s, " ")
		b.WriteString(s)
		b.WriteByte('\n')
	}
	return b.String()
}

// fencedBlocks returns the ```lang fenced blocks of src, the Markdown file
// rel.
func fencedBlocks(rel string, src []byte, lang string) ([]block, error) {
	var out []block
	var cur *block
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```"+lang:
			cur = &block{where: fmt.Sprintf("%s:%d", rel, n)}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: unterminated ```%s block", cur.where, lang)
	}
	return out, sc.Err()
}

// isGo reports whether code parses as Go: declarations, or statements in
// a function body.
func isGo(code string) bool {
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+code, 0); err == nil {
		return true
	}
	_, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+code+"\n}\n", 0)
	return err == nil
}

// tokens is the code's token stream, one token per line of the result,
// without comments and without the semicolons the scanner inserts at line
// ends, so that layout and annotations do not matter.
func tokens(code string) string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	src := []byte(code)
	s.Init(fset.AddFile("", -1, len(src)), src, func(token.Position, string) {}, 0)
	var b strings.Builder
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue
		}
		if lit == "" {
			lit = tok.String()
		}
		b.WriteString(lit)
		b.WriteByte('\n')
	}
	return b.String()
}

// foundIn reports whether the token stream want is a contiguous part of a
// test file in dir, or of any test file when dir is "".
func foundIn(want, dir string, tests map[string][]string) bool {
	want = "\n" + want
	for d, files := range tests {
		if dir != "" && d != dir {
			continue
		}
		for _, f := range files {
			if strings.Contains("\n"+f, want) {
				return true
			}
		}
	}
	return false
}
