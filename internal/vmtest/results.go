package vmtest

import (
	"strings"
)

// Status is how a guest test ended, as `go test -v` prints it.
type Status string

// The statuses of a finished guest test.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// TestResult is one top-level guest test as the guest's test binary
// reported it.
type TestResult struct {
	Name    string
	Status  Status
	Elapsed string   // as printed, for example "1.23s"
	Output  []string // every line printed while the test ran, subtests' included
}

// resultParser turns the lines of `go test -v` output into TestResults.
// Only top-level tests become results; subtest lines are part of their
// parent's output. Lines printed outside any test (a panic's stack after
// the test's FAIL line, the final PASS/FAIL) are kept in stray.
type resultParser struct {
	current string              // top-level test the output belongs to
	output  map[string][]string // output so far, by top-level test
	done    func(TestResult)    // called when a top-level test ends
	stray   []string
}

func newResultParser(done func(TestResult)) *resultParser {
	return &resultParser{output: map[string][]string{}, done: done}
}

// line consumes one line of test output.
func (p *resultParser) line(s string) {
	for _, prefix := range []string{"=== RUN ", "=== CONT ", "=== NAME ", "=== PAUSE "} {
		if rest, ok := strings.CutPrefix(s, prefix); ok {
			p.current = topLevel(strings.TrimSpace(rest))
			p.output[p.current] = append(p.output[p.current], s)
			return
		}
	}
	for _, st := range []Status{Pass, Fail, Skip} {
		if rest, ok := strings.CutPrefix(s, "--- "+string(st)+": "); ok {
			p.finish(st, rest, s)
			return
		}
	}
	if p.current == "" {
		p.stray = append(p.stray, s)
		return
	}
	p.output[p.current] = append(p.output[p.current], s)
}

// finish handles a column-0 "--- STATUS: Name (elapsed)" line.
func (p *resultParser) finish(st Status, rest, raw string) {
	name, elapsed, _ := strings.Cut(rest, " ")
	elapsed = strings.Trim(elapsed, "()")
	out := append(p.output[name], raw)
	delete(p.output, name)
	if p.current == name {
		p.current = ""
	}
	p.done(TestResult{Name: name, Status: st, Elapsed: elapsed, Output: out})
}

// unfinished returns the output of the tests that started but never
// reported an end, by name.
func (p *resultParser) unfinished() map[string][]string { return p.output }

func topLevel(name string) string {
	top, _, _ := strings.Cut(name, "/")
	return top
}
