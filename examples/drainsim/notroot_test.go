//go:build linux

package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/proc/proctest"
	"github.com/drainkit/drainkit/internal/realpart"
)

// Fault: drainsim run by a user who is not root runs its servers as plain
// children, kubeletsim's fallback: not PID 1 of a PID namespace of their
// own (a SIGTERM a server has no handler for ends it, orphans go to the
// machine's init, pid1.Init does nothing) and in no cgroup of their own
// (the SIGKILL takes the process group, not the container), while its
// first lines said "SIGKILL to the whole container" and nothing of it.
// Run as nobody, up to the seed's termination:
//
//	before: the introduction as root's, "SIGKILL to the whole container"
//	now:    it says what the simulator could not do, and why
func TestARunNotAsRootSaysItsServersAreNotContainedAsInAPod(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "root, to run drainsim as nobody")
	}
	cmd := proctest.AsNobody(t, []string{"-test.run=^$", "-n", "1", "-grace", "3s"}, roleEnv+"="+roleMain, "GORACE=atexit_sleep_ms=0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var intro strings.Builder
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "== seed") {
		intro.WriteString(lines.Text() + "\n")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM)) // enough seen
	t.Log("\n" + intro.String())
	require.Contains(t, intro.String(), "The kubelet is simulated", "stderr: %s", stderr.String())
	assert.NotContains(t, intro.String(), "SIGKILL to the whole container")
	for _, said := range []string{
		"Not as a pod's container here (drainsim is not run as root)",
		"not PID 1 of a PID namespace of their own",
		"no cgroup of their own",
		"SIGKILL takes their process group",
		"run as root",
	} {
		assert.Contains(t, intro.String(), said)
	}
}

// Fault: `drainsim -runtime runsc` run by a user who is not root failed
// with sandboxd's error for its tests, "runsc sandboxes need root (run the
// tests as root)", as a server that exited at start (exit 1): no test was
// run, and the flag is drainsim's. It is now refused as the flag it is,
// before any server starts, naming the flag and what to do (exit 2).
func TestRunscNotAsRootIsRefusedAsTheFlag(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "root, to run drainsim as nobody")
	}
	cmd := proctest.AsNobody(t, []string{"-test.run=^$", "-runtime", "runsc"}, roleEnv+"="+roleMain, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 2, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "drainsim: -runtime runsc needs root: runsc's gVisor sandboxes need it; run drainsim as root")
	assert.NotContains(t, string(out), "run the tests as root")
}
