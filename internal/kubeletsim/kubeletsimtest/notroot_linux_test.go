package kubeletsimtest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/realpart"
)

// `go test` by a user who is not root: Start skips a test that needs a PID 1 child, saying
// why, and this package's own tests and Example pass or skip. They crashed: the cleanup
// test read the child of a subtest that had skipped (a nil pointer), the failing-start
// test's recorder skipped from a goroutine not the test's, and the Example panicked in
// its Skip. Run as nobody, every test and the Example of this package but this one.
func TestThisPackagesTestsPassOrSkipNotAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "root, to run this package's tests as nobody")
	}
	cmd := exec.Command(copyForNobody(t), "-test.v", "-test.skip=^TestThisPackagesTestsPassOrSkipNotAsRoot$")
	// A user's run, not CI's: CI=true turns every skip into a failure
	// (realpart.Missing), which is what this test must not inherit.
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CI=") }),
		"GORACE=atexit_sleep_ms=0")
	cmd.Dir = "/"
	const nobody = 65534
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "panic")
	assert.Contains(t, string(out), "cannot be PID 1 of a PID namespace of its own here", "a skip says why")
}

// copyForNobody copies this test binary where any user may run it.
func copyForNobody(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kubeletsimtest-bin-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	bin := filepath.Join(dir, "kubeletsimtest.test")
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	return bin
}
