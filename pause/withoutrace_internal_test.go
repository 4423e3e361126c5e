package pause

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/drainkit/drainkit/internal/gobuild"
	"github.com/drainkit/drainkit/internal/realpart"
)

// The tests that measure a Run's own cost (its allocations, its workers'
// stacks) measure what a user's build costs: the race detector's
// allocations and larger frames are not. CI runs go test -race alone, so
// under it they run in this package's test binary built without the
// detector, as a child process; skipped there, they guarded nothing in CI.

// withoutRaceBuild is this package's test binary built without the race
// detector, once for the tests of a process that has it; TestMain removes
// its directory as the tests end.
var withoutRaceBuild struct {
	once     sync.Once
	dir, bin string
	err      error
}

// withoutRace reports whether t runs in a test binary built without the
// race detector. Under -race it runs t alone in one that is (built once,
// binaryWithoutRace), fails t with the child's output if the child fails,
// and reports false: t is over.
func withoutRace(t *testing.T) bool {
	t.Helper()
	if !raceEnabled {
		return true
	}
	runAlone(t, binaryWithoutRace(t), "in this package's tests built without the race detector")
	return false
}

// binaryWithoutRace returns the path of this package's test binary built
// without the race detector, building it at the first call. Without a Go
// toolchain to build it, t is skipped, saying so, or fails under CI=true.
func binaryWithoutRace(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		realpart.Missing(t, "no Go toolchain to build this package's tests without the race detector, in which "+t.Name()+" measures: "+err.Error())
	}
	b := &withoutRaceBuild
	b.once.Do(func() { b.dir, b.bin, b.err = buildWithoutRace() })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// buildWithoutRace builds this package's test binary without the race
// detector into a new directory, with internal/gobuild's environment and
// -trimpath: the packages it shares with the module's programs are then
// those CI compiled ahead (.ci/run), and on a later run every package is
// in the build cache and the build only links. -race=false overrides a
// -race in GOFLAGS; -vet=off, as CI's go test: vet has run.
func buildWithoutRace() (dir, bin string, err error) {
	root, err := gobuild.ModuleRoot()
	if err != nil {
		return "", "", err
	}
	dir, err = os.MkdirTemp("", "pause-without-race")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, "pause.test")
	cmd := exec.Command("go", "test", "-c", "-race=false", "-vet=off", "-trimpath", "-o", bin, "./pause")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), gobuild.Env()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", "", fmt.Errorf("building ./pause's tests without the race detector: %w\n%s", err, out)
	}
	return dir, bin, nil
}

// removeBuildWithoutRace removes the binary buildWithoutRace made, if any.
func removeBuildWithoutRace() {
	if d := withoutRaceBuild.dir; d != "" {
		_ = os.RemoveAll(d)
	}
}

// runAlone runs t alone in bin, a test binary of this package, with env
// added to its environment, and fails t with the child's output, saying
// where it ran, if the child did not pass it.
func runAlone(t *testing.T, bin, where string, env ...string) {
	t.Helper()
	args := []string{"-test.run=^" + t.Name() + "$", "-test.count=1", "-test.v"}
	if f := flag.Lookup("test.gocoverdir"); f != nil && f.Value.String() != "" { // go test -cover counts the child's too
		args = append(args, "-test.gocoverdir="+f.Value.String())
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s %s: %v\n%s", t.Name(), where, err, out)
	}
}
