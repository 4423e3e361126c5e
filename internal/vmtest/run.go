package vmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Config selects the guest tests of one boot.
type Config struct {
	// Run is the -test.run pattern that selects the guest tests, for
	// example "^TestGuest". Required: it also decides which tests the
	// host expects to see reported.
	Run string
	// Modules are kernel modules (names without .ko) loaded before the
	// tests start, in order, from the asset directory.
	Modules []string
	// Timeout bounds the boot, build excluded; 2 minutes when zero. The
	// guest test binary gets a -test.timeout 10 s shorter (half when
	// Timeout is under 20 s), so a stuck test dumps its goroutines before
	// QEMU is killed.
	Timeout time.Duration
	// CPUs and MemoryMB size the guest; see Machine.
	CPUs, MemoryMB int
	// Env is added to the guest test process's environment (KEY=VALUE).
	Env []string
	// AllowKernelProblems lets RunGuestTests pass when the guest's kernel
	// log reports a bug, warning, oops or hung task (see KernelProblems);
	// by default such a log fails the host test.
	AllowKernelProblems bool
}

func (c Config) timeout() time.Duration {
	if c.Timeout == 0 {
		return 2 * time.Minute
	}
	return c.Timeout
}

func (c Config) guestTimeout() time.Duration {
	if d := c.timeout(); d >= 20*time.Second {
		return d - 10*time.Second
	}
	return c.timeout() / 2
}

// Guest is a package's test binary built as a guest /init and packed into
// an initramfs with its kernel modules, ready to boot.
type Guest struct {
	Assets    Assets
	Config    Config
	Initramfs string   // path of the gzipped cpio archive
	Expected  []string // the tests Config.Run selects, which the guest must report
}

// Result is what one boot reported.
type Result struct {
	Release   string       // the guest's kernel release, from /init's ready line
	Tests     []TestResult // finished top-level guest tests, in order
	Missing   []string     // expected tests that never reported an end
	ExitCode  int          // the guest test binary's exit code; -1 when never reported
	Stray     []string     // test output printed outside any test (panics, timeouts)
	KernelLog []string     // the guest's kernel log, dumped before power-off
	Console   []string     // every console line
}

// RunGuestTests runs the package's guest tests in a QEMU guest and reports
// each one as a subtest of t, with the guest's output as its log: it is
// BuildGuest followed by Guest.Run.
//
// t fails when a guest test fails, when a test selected by cfg.Run was not
// reported (the guest crashed or hung), when the boot failed or ran out of
// time, when the guest test binary failed outside any test, or when the
// guest's kernel log reports a bug, warning, oops or hung task (unless
// cfg.AllowKernelProblems); the console's tail is then logged. Call it from a host-side test of the
// package whose TestMain calls MaybeInit first.
func RunGuestTests(t *testing.T, cfg Config) *Result {
	t.Helper()
	g := BuildGuest(t, cfg)
	res, err := g.Run(t.Context(), func(tr TestResult) { report(t, tr) })
	t.Logf("vmtest: guest kernel %s", res.Release)
	var problems []string
	if err != nil {
		problems = append(problems, err.Error())
	}
	for _, name := range res.Missing {
		problems = append(problems, fmt.Sprintf("guest test %s never reported a result", name))
	}
	failed := false
	for _, tr := range res.Tests {
		failed = failed || tr.Status == Fail
	}
	if bad := KernelProblems(res.KernelLog); len(bad) > 0 && !cfg.AllowKernelProblems {
		problems = append(problems, "the guest kernel log reports problems:\n"+strings.Join(bad, "\n"))
	}
	switch {
	case res.ExitCode == -1:
		problems = append(problems, "the guest never reported the test binary's exit")
	case res.ExitCode != 0 && !failed:
		problems = append(problems, fmt.Sprintf("the guest test binary exited with %d outside any test", res.ExitCode))
	}
	if len(problems) > 0 {
		res.logFailure(t)
		t.Errorf("vmtest: %s", strings.Join(problems, "; "))
	}
	return res
}

// BuildGuest builds the package in the working directory (go test runs
// tests there) as a test binary (CGO_ENABLED=0 go test -c, or go test
// -race -c when this binary was built with -race), lists the tests
// cfg.Run selects, and packs the initramfs: /init, the shared libraries it
// needs (none when static), its configuration, the modules and a
// /dev/console node.
//
// When the kernel, a module or QEMU is missing, t is skipped with a
// message that says how to install them, except when the environment has
// CI=true, where t fails instead, so that CI cannot pass by skipping.
func BuildGuest(t *testing.T, cfg Config) *Guest {
	t.Helper()
	if InGuest() {
		t.Skip("vmtest: host-side test; already inside the guest")
	}
	if cfg.Run == "" {
		t.Fatal("vmtest: Config.Run is required")
	}
	assets, err := FindAssets()
	if err != nil {
		skipOrFail(t, err)
	}
	dir := t.TempDir()
	initPath := filepath.Join(dir, "init")
	buildGuestBinary(t, initPath)
	g := &Guest{Assets: assets, Config: cfg, Initramfs: filepath.Join(dir, "initramfs.gz")}
	g.Expected = listTests(t, initPath, cfg.Run)
	g.pack(t, initPath)
	return g
}

// Run boots the guest once and returns what it reported; onResult is
// called for each top-level guest test as soon as it ends. Run returns
// within the configured timeout plus a second. The error reports a boot
// that failed or ran out of time; what the tests did is in the Result.
func (g *Guest) Run(ctx context.Context, onResult func(TestResult)) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, g.Config.timeout())
	defer cancel()
	m := Machine{QEMU: g.Assets.QEMU, Kernel: g.Assets.Kernel, Initramfs: g.Initramfs,
		CPUs: g.Config.CPUs, MemoryMB: g.Config.MemoryMB}
	res := &Result{ExitCode: -1}
	p := newResultParser(func(tr TestResult) {
		res.Tests = append(res.Tests, tr)
		if onResult != nil {
			onResult(tr)
		}
	})
	err := m.Boot(ctx, func(line string) { res.consume(line, p) })
	reported := map[string]bool{}
	for _, tr := range res.Tests {
		reported[tr.Name] = true
	}
	for _, name := range g.Expected {
		if !reported[name] {
			res.Missing = append(res.Missing, name)
			res.Stray = append(res.Stray, p.unfinished()[name]...)
		}
	}
	res.Stray = append(res.Stray, p.stray...)
	return res, err
}

// Test returns the result of the named guest test, or false when it did
// not report one.
func (r *Result) Test(name string) (TestResult, bool) {
	for _, tr := range r.Tests {
		if tr.Name == name {
			return tr, true
		}
	}
	return TestResult{}, false
}

// consume files one console line into the result and the parser.
func (r *Result) consume(line string, p *resultParser) {
	r.Console = append(r.Console, line)
	if i := strings.Index(line, outputMarker); i >= 0 {
		p.line(line[i+len(outputMarker):])
		return
	}
	if i := strings.Index(line, kmsgMarker); i >= 0 {
		r.KernelLog = append(r.KernelLog, line[i+len(kmsgMarker):])
		return
	}
	if i := strings.Index(line, statusMarker); i >= 0 {
		status := line[i+len(statusMarker):]
		if rel, ok := strings.CutPrefix(status, "ready "); ok {
			r.Release = rel
		}
		if code, ok := strings.CutPrefix(status, "exit "); ok {
			if n, err := strconv.Atoi(code); err == nil {
				r.ExitCode = n
			}
		}
	}
}

func (r *Result) logFailure(t *testing.T) {
	t.Helper()
	for _, l := range r.Stray {
		t.Logf("guest output outside a finished test: %s", l)
	}
	tail := r.Console
	if len(tail) > 80 {
		tail = tail[len(tail)-80:]
	}
	t.Logf("last %d console lines:\n%s", len(tail), strings.Join(tail, "\n"))
}

// report turns one guest test result into a subtest of t.
func report(t *testing.T, tr TestResult) {
	t.Run(tr.Name, func(t *testing.T) {
		t.Logf("in the guest (%s):\n%s", tr.Elapsed, strings.Join(tr.Output, "\n"))
		switch tr.Status {
		case Fail:
			t.Error("guest test failed")
		case Skip:
			t.Skip("skipped in the guest")
		}
	})
}

func skipOrFail(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v (CI=true: VM tests must not be skipped)", err)
	}
	t.Skipf("%v", err)
}

func buildGuestBinary(t *testing.T, out string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		skipOrFail(t, fmt.Errorf("vmtest: the go command is needed to build the guest /init: %w", err))
	}
	args := []string{"test", "-c", "-o", out}
	// GOFLAGS is kept: CI sets the compiler's flags there for every build,
	// and the guest binary shares the host test binary's compiled packages
	// only with the same flags.
	env := append(os.Environ(), "GOOS=linux", "GOARCH=amd64")
	if raceEnabled {
		// Same flags as the host test binary: the build cache is shared,
		// and the guest code runs under the race detector too.
		args = append(args, "-race")
	} else {
		env = append(env, "CGO_ENABLED=0")
	}
	cmd := exec.CommandContext(t.Context(), goTool, append(args, ".")...)
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("vmtest: building the guest test binary: %v\n%s", err, b)
	}
}

// listTests returns the names of the tests that pattern selects in the
// guest binary, running it on the host with -test.list.
func listTests(t *testing.T, bin, pattern string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), bin, "-test.list", pattern).Output()
	if err != nil {
		t.Fatalf("vmtest: listing guest tests: %v", err)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Test") {
			names = append(names, strings.TrimSpace(l))
		}
	}
	if len(names) == 0 {
		t.Fatalf("vmtest: -test.run %q selects no tests", pattern)
	}
	return names
}

func (g *Guest) pack(t *testing.T, initPath string) {
	t.Helper()
	bin, err := os.ReadFile(initPath)
	if err != nil {
		t.Fatal(err)
	}
	gc := guestConfig{
		Args: []string{"-test.v=true", "-test.run=" + g.Config.Run, "-test.count=1",
			"-test.timeout=" + g.Config.guestTimeout().String()},
		Env: g.Config.Env,
	}
	entries := []entry{
		fileEntry("init", 0o755, bin),
		{name: "dev/console", mode: cpioChar | 0o600, major: 5, minor: 1},
	}
	libs, err := libEntries(initPath)
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, libs...)
	for _, name := range g.Config.Modules {
		src, err := g.Assets.Module(name)
		if err != nil {
			skipOrFail(t, err)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := guestModuleDir + "/" + filepath.Base(src)
		entries = append(entries, fileEntry(dst, 0o644, data))
		gc.Modules = append(gc.Modules, dst)
	}
	js, err := json.Marshal(gc)
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, fileEntry(guestConfigPath, 0o644, js))
	var buf bytes.Buffer
	if err := writeInitramfs(&buf, entries); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.Initramfs, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
