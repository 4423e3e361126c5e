package kubeletsimtest_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/internal/proc/proctest"
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
	cmd := proctest.AsNobody(t, []string{"-test.v", "-test.skip=^TestThisPackagesTestsPassOrSkipNotAsRoot$"}, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "panic")
	assert.Contains(t, string(out), "cannot be PID 1 of a PID namespace of its own here", "a skip says why")
}
