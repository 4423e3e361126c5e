package doccheck

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// A test name in the documentation is the evidence a reader is sent to: a
// row of docs/faults.md says "this test failed before the fix", the README
// says "this command measured it". Tests are renamed and merged, and the
// pages kept naming the old ones (TestNewRejectsTypedNilListerAndNilOption,
// TestRingWhoseFilesTheKernelDoesNotListIsNamed and others): a reader found
// nothing to run. Every name cited in README.md, docs/*.md and the
// examples' READMEs, in a code span or in the prose, must be a func of the
// repository's _test.go files, and every plain alternative of a -run,
// -bench or -skip pattern (or the pattern, when it has a group or a class)
// must select one: a -skip that selects nothing runs what the reader was
// told it leaves out.
func TestEveryCitedTestExists(t *testing.T) {
	funcs, err := testFuncs(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(funcs) == 0 {
		t.Fatal("found no test funcs: is the root right?")
	}
	pages, err := citingPages(root)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, page := range pages {
		src, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range citations(string(src)) {
			checked++
			if !c.selects(funcs) {
				t.Errorf("%s:%d: %s names no test func of the repository: cite the test that asserts it now, or say it was removed", page, c.line, c)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no cited test: are the pages right?")
	}
	t.Logf("%d citations in %d pages checked against %d test funcs", checked, len(pages), len(funcs))
}

func TestCitationsAreReadAsGoTestWouldRunThem(t *testing.T) {
	funcs := map[string]bool{
		"TestPlanPredicts": true, "TestNeverDrainedPlan": true, "BenchmarkPreserveDisk": true,
		"TestRealKubeletWithAPIServer": true, "TestRealKubeletTimingsMatch": true,
		"ExampleNewServer": true, "FuzzParse": true,
	}
	for _, tc := range []struct {
		text string
		want []string // citations, as String gives them
		bad  []string // those no func satisfies
	}{
		{"the test `TestPlanPredicts` (drain)", []string{"TestPlanPredicts"}, nil},
		{"`TestGone`, and `TestRealKubeletWithAPIServer/the_README's_manifest`", []string{"TestGone", "TestRealKubeletWithAPIServer"}, []string{"TestGone"}},
		{"`go test -run 'PlanPredicts|NeverDrained' -v ./drain`", []string{"-run PlanPredicts", "-run NeverDrained"}, nil},
		{"| `go test -run 'PlanPredicts\\|Gone' ./x` |", []string{"-run PlanPredicts", "-run Gone"}, []string{"-run Gone"}},
		{"`go test -run '^$' -bench PreserveDisk -benchtime 2x`", []string{"-bench PreserveDisk"}, nil},
		{"`./pause.test -test.run '^$' -test.bench 'Disk|Wait'`", []string{"-bench Disk", "-bench Wait"}, []string{"-bench Wait"}},
		{"`-run '^TestPlanPredicts$'` and `-run '^TestPlan$'`", []string{"-run ^TestPlanPredicts$", "-run ^TestPlan$"}, []string{"-run ^TestPlan$"}},
		{"`-run \"RealKubeletWithAPIServer$/the_README\"`", []string{"-run RealKubeletWithAPIServer$"}, nil},
		{"`-run 'RealKubelet(Sandboxd|Timings)'`", []string{"-run RealKubelet(Sandboxd|Timings)"}, nil},
		{"`-run 'Plan(Gone|Lost)|PlanPredicts'`", []string{"-run PlanPredicts", "-run Plan(Gone|Lost)|PlanPredicts"}, nil},
		{"`-run 'Plan(Gone|Lost)'`", []string{"-run Plan(Gone|Lost)"}, []string{"-run Plan(Gone|Lost)"}},
		{"`ExampleNewServer`, `FuzzParse`, `Examples`", []string{"ExampleNewServer", "FuzzParse"}, nil},
		{"a `Testing` word, `TestMain`'s, `go test ./...`, `Test`, `TestGone (x)`", nil, nil},
		{"```sh\ngo test -run TestGone ./x\n```\n", []string{"-run TestGone"}, []string{"-run TestGone"}},
		{"`go test -run TestPlanPredicts\n-v ./drain`", []string{"-run TestPlanPredicts"}, nil},
		{"`-run Plan -skip 'NeverDrained|Gone'`", []string{"-run Plan", "-skip NeverDrained", "-skip Gone"}, []string{"-skip Gone"}},
		{"`-skip PreserveDisk` `-skip=Predicts$`", []string{"-skip PreserveDisk", "-skip Predicts$"}, nil},
		{"```sh\ngo test -skip 'RealKubeletGone' ./x\n```\n", []string{"-skip RealKubeletGone"}, []string{"-skip RealKubeletGone"}},
		{"as TestPlanPredicts shows, and TestGone (x); TestRealKubeletWithAPIServer/the_README's too", []string{"TestPlanPredicts", "TestGone", "TestRealKubeletWithAPIServer"}, []string{"TestGone"}},
		{"(FuzzParse, ExampleNewServer.) BenchmarkGone", []string{"FuzzParse", "ExampleNewServer", "BenchmarkGone"}, []string{"BenchmarkGone"}},
		{"TestPlan* and TestGone* and TestRealKubelet*", []string{"TestPlan*", "TestGone*", "TestRealKubelet*"}, []string{"TestGone*"}},
		{"Example: a Testing word, TestMain, Tests, a path x/TestGone, #TestGone, pkg.TestGone", nil, nil},
		{"it was named TestGone until 9dda20a, and was\nnamed TestOld before", nil, nil},
		{"TestGone, `TestPlanPredicts`, TestNeverDrainedPlan", []string{"TestGone", "TestPlanPredicts", "TestNeverDrainedPlan"}, []string{"TestGone"}},
	} {
		var got, bad []string
		for _, c := range citations(tc.text) {
			got = append(got, c.String())
			if !c.selects(funcs) {
				bad = append(bad, c.String())
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || fmt.Sprint(bad) != fmt.Sprint(tc.bad) {
			t.Errorf("%q: citations %q, unmatched %q; want %q, %q", tc.text, got, bad, tc.want, tc.bad)
		}
	}
}

// A citation is a test func's name, a name's beginning (Name* in the
// prose), or one plain alternative of a -run, -bench or -skip pattern
// (anchors kept, subtests after a / left out).
type citation struct {
	name    string
	pattern string // "run", "bench" or "skip"; "prefix" for Name*, "" for a name
	line    int
	at      int // the offset in the page, which orders a line's citations
}

func (c citation) String() string {
	switch c.pattern {
	case "":
		return c.name
	case "prefix":
		return c.name + "*"
	}
	return "-" + c.pattern + " " + c.name
}

// selects reports whether a func of funcs is the name, begins with it, or
// is one go test runs (or skips) for the pattern: -run selects tests, fuzz
// targets and examples, -bench benchmarks, -skip any of them, by an
// unanchored match unless anchored. A -skip that selects nothing skips
// nothing: the command runs what its reader was told it leaves out.
func (c citation) selects(funcs map[string]bool) bool {
	switch c.pattern {
	case "":
		return funcs[c.name]
	case "prefix":
		for f := range funcs {
			if strings.HasPrefix(f, c.name) {
				return true
			}
		}
		return false
	}
	re, err := regexp.Compile(c.name)
	if err != nil {
		return false
	}
	for f := range funcs {
		if c.pattern != "skip" && strings.HasPrefix(f, "Benchmark") != (c.pattern == "bench") {
			continue
		}
		if re.MatchString(f) {
			return true
		}
	}
	return false
}

var (
	// testName is a whole name of a func go test runs: Test, Benchmark or
	// Fuzz and more, Example alone or with more.
	testName = regexp.MustCompile(`^(?:(?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*|Example(?:[A-Z_]\w*)?)$`)
	// plainAlternative is a pattern alternative that is a name, anchored or
	// not: no group, class or repetition to read.
	plainAlternative = regexp.MustCompile(`^\^?\w+\$?$`)
	codeSpan         = regexp.MustCompile("`([^`]+)`")
	patternFlag      = regexp.MustCompile(`^-(?:test\.)?(run|bench|skip)(?:=(.*))?$`)
	// plainName is a test's name in the prose, out of a code span: a
	// whole word, not a path's or an anchor's, Example alone left out (it
	// starts sentences); a * after it stands for every name it begins.
	plainName = regexp.MustCompile(`(?:^|[^\w/#.])((?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*|Example[A-Z_]\w*)(\*)?`)
	// formerName ends the words before a name the test no longer has,
	// which a row keeps for the reader of an old log: "was named X until".
	formerName = regexp.MustCompile(`\bwas\s+named\s+$`)
)

// A pageLine is a line of a Markdown page, its line break kept, and
// whether it is in a fenced block (its fences aside).
type pageLine struct {
	text string
	in   bool // between a block's fences
	edge bool // a fence
}

// fenced returns the lines of a Markdown page, each said in or out of a
// fenced block.
func fenced(src string) []pageLine {
	var out []pageLine
	in := false
	for _, l := range strings.SplitAfter(src, "\n") {
		edge := strings.HasPrefix(strings.TrimSpace(l), "```")
		if edge {
			in = !in
		}
		out = append(out, pageLine{text: l, in: in && !edge, edge: edge})
	}
	return out
}

// prose is a Markdown page with its fenced blocks blanked, offsets kept.
func prose(src string) string {
	var b strings.Builder
	for _, l := range fenced(src) {
		if l.in || l.edge {
			b.WriteString(blank(l.text))
		} else {
			b.WriteString(l.text)
		}
	}
	return b.String()
}

// blank is s with every byte but a line break made a space, so that
// offsets, and the lines they fall on, are kept.
func blank(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] != '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

// citations returns the test names a Markdown page cites: in its code
// spans, in its prose (a name no longer held, after "was named", left
// out), and in the -run, -bench and -skip patterns of its fenced blocks.
func citations(src string) []citation {
	var out []citation
	lineAt := func(off int) int { return 1 + strings.Count(src[:off], "\n") }
	off := 0
	for _, l := range fenced(src) {
		if l.in {
			for _, c := range cited(l.text, true) {
				c.line, c.at = lineAt(off), off
				out = append(out, c)
			}
		}
		off += len(l.text)
	}
	text := prose(src)
	for _, m := range codeSpan.FindAllStringSubmatchIndex(text, -1) {
		for _, c := range cited(text[m[2]:m[3]], false) {
			c.line, c.at = lineAt(m[0]), m[0]
			out = append(out, c)
		}
	}
	for _, c := range plainCitations(codeSpan.ReplaceAllStringFunc(text, blank)) {
		c.line = lineAt(c.at)
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// plainCitations returns the test names of plain, the prose out of code
// spans, each at its offset: TestMain, which no command runs by name, and
// a name after "was named", which a test no longer has, left out.
func plainCitations(plain string) []citation {
	var out []citation
	for _, m := range plainName.FindAllStringSubmatchIndex(plain, -1) {
		name := plain[m[2]:m[3]]
		if name == "TestMain" || formerName.MatchString(plain[max(m[2]-20, 0):m[2]]) {
			continue
		}
		c := citation{name: name, at: m[2]}
		if m[4] >= 0 {
			c.pattern = "prefix"
		}
		out = append(out, c)
	}
	return out
}

// cited reads one code span, or one line of a fenced block (flagsOnly: a
// block's words are commands, not citations).
func cited(code string, flagsOnly bool) []citation {
	var out []citation
	words := strings.Fields(strings.ReplaceAll(code, `\|`, "|"))
	for i := 0; i < len(words); i++ {
		w := words[i]
		if m := patternFlag.FindStringSubmatch(w); m != nil {
			arg := m[2]
			if !strings.Contains(w, "=") {
				if i+1 == len(words) {
					break
				}
				i++
				arg = words[i]
			}
			out = append(out, patternCitations(m[1], arg)...)
			continue
		}
		if flagsOnly {
			continue
		}
		name := strings.TrimRight(w, ",.;:)")
		if j := strings.IndexAny(name, "/'"); j >= 0 {
			name = name[:j]
		}
		if testName.MatchString(name) && name != "TestMain" && len(words) == 1 {
			out = append(out, citation{name: name})
		}
	}
	return out
}

// patternCitations returns the plain alternatives of a -run or -bench
// pattern's top level, the part before the first / (a subtest's), and the
// whole of that part when some alternative is not plain (a group, a
// class), which must then select a func as go test would match it.
func patternCitations(flag, arg string) []citation {
	arg = strings.Trim(arg, `'"`)
	if i := strings.Index(arg, "/"); i >= 0 {
		arg = arg[:i]
	}
	var out []citation
	other := false
	for _, alt := range strings.Split(arg, "|") {
		switch {
		case alt == "^$" || alt == "":
		case plainAlternative.MatchString(alt):
			out = append(out, citation{name: alt, pattern: flag})
		default:
			other = true
		}
	}
	if other {
		out = append(out, citation{name: arg, pattern: flag})
	}
	return out
}

// citingPages are the pages whose citations are checked, relative to root.
func citingPages(root string) ([]string, error) {
	pages := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*", "README.md"))
	if err != nil {
		return nil, err
	}
	for _, d := range append(docs, examples...) {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		pages = append(pages, filepath.ToSlash(rel))
	}
	return pages, nil
}

var funcDecl = regexp.MustCompile(`(?m)^func\s+((?:Test|Benchmark|Fuzz|Example)\w*)\s*[\[(]`)

// testFuncs returns the names of the top-level funcs of the module's
// _test.go files that go test could run.
func testFuncs(root string) (map[string]bool, error) {
	funcs := map[string]bool{}
	err := walkFiles(root, []string{"_test.go"}, func(_ string, src []byte) error {
		for _, m := range funcDecl.FindAllStringSubmatch(string(src), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	return funcs, err
}

// walkFiles calls fn with the path relative to root, slash-separated, and
// the contents of each file under root whose name ends in one of
// suffixes, leaving out hidden directories and testdata, which hold no
// documentation or test of the module's.
func walkFiles(root string, suffixes []string, fn func(rel string, src []byte) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.ContainsFunc(suffixes, func(suffix string) bool { return strings.HasSuffix(d.Name(), suffix) }) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), src)
	})
}
