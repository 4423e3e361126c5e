//go:build linux

package runsc

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/proc/proctest"
	"github.com/drainkit/drainkit/internal/realpart"
)

// usableEnv makes the test binary print Usable's error and exit.
const usableEnv = "DRAINKIT_RUNSC_USABLE"

// usableMain prints Usable's error, as sandboxd and the gVisor worker
// give it to their user at start.
func usableMain() int {
	fmt.Println(Usable())
	return 0
}

// Fault: Usable's error is what sandboxd (-runtime runsc) and the gVisor
// worker say at start to a user who is not root, after their flag, and it
// said "runsc sandboxes need root (run the tests as root)": words for this
// repository's tests, not for a user running a server, who was told of no
// test to run and nothing to do. It now says what the server needs and
// how a user gives it that. Run as nobody:
//
//	before: runsc sandboxes need root (run the tests as root)
//	after:  the uid the process has, run it as root (a pod: privileged, as
//	        sandboxd's DaemonSet), or the fake runtime
func TestUsableNotAsRootSaysWhatAUserMustDo(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "root, to run as nobody")
	}
	out, err := proctest.AsNobody(t, []string{"-test.run=^$"}, usableEnv+"=1").CombinedOutput()
	require.NoError(t, err, "%s", out)
	said := string(out)
	assert.NotContains(t, said, "the tests")
	for _, s := range []string{"runsc sandboxes need root", "this process runs as uid 65534", "run the server as root",
		"privileged: true", "examples/sandboxd/deploy/daemonset.yaml", "the fake runtime"} {
		assert.Contains(t, said, s)
	}
}
