package realpart_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/realpart"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// childEnv makes the test binary run TestMissingPart alone, as its own child.
const childEnv = "REALPART_TEST_CHILD"

// TestMissingPart is the test the child runs: its part is always missing.
func TestMissingPart(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestMissingSkipsOutsideCIAndFailsUnderIt in a child")
	}
	realpart.Missing(t, "no such part on this machine")
}

// A missing part skips the test with its reason, and fails it under CI=true:
// run in a child test binary, whose exit status and output say which.
func TestMissingSkipsOutsideCIAndFailsUnderIt(t *testing.T) {
	run := func(ci string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestMissingPart$", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"=1", "CI="+ci)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	require.NoError(t, err, out)
	assert.Contains(t, out, "--- SKIP: TestMissingPart")
	assert.Contains(t, out, "no such part on this machine")

	out, err = run("true")
	require.Error(t, err, "CI=true: the test fails")
	assert.Contains(t, out, "--- FAIL: TestMissingPart")
	assert.True(t, strings.Contains(out, "no such part on this machine (CI=true: must not be skipped)"), out)
}
