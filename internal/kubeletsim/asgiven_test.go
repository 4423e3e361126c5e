//go:build linux

package kubeletsim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runToEnd starts cmd with Start, waits for its exit, and returns what it
// wrote to stdout and stderr, and how it exited.
func runToEnd(t *testing.T, cmd *exec.Cmd) (string, error) {
	t.Helper()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	child, err := Start(cmd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = child.Kill(); <-child.Exited() })
	err = child.Err() // its output copied once it has exited
	return out.String(), err
}

// A container runtime execs a container's command with the argv and the
// environment of its spec, nothing added: the command as PID 1 gets its
// argv[0] as given, not its path, and no variable the simulator's own way
// of mounting /proc set (/bin/sh exported PWD; bash adds SHLVL and _ too).
func TestPID1ChildGetsExactlyTheArgvAndEnvironmentItWasGiven(t *testing.T) {
	needsPIDNamespace(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$", "two words", `"quoted'`, "")
	cmd.Args[0] = "a server"
	cmd.Env = []string{roleEnv + "=say-argv-env", "A=two words", "PATH=" + os.Getenv("PATH"), "GORACE=atexit_sleep_ms=0"}
	out, err := runToEnd(t, cmd)
	require.NoError(t, err, out)
	assert.Equal(t, `argv ["a server" "-test.run=^$" "two words" "\"quoted'" ""]`+"\n"+
		`env ["KUBELETSIM_TEST_ROLE=say-argv-env" "A=two words" "PATH=`+os.Getenv("PATH")+`" "GORACE=atexit_sleep_ms=0"]`+"\n", out)
}

// The command's PATH is the command's: one with no mount(8) in it (a test's
// directory of fake runtimes, a minimal image's) must still run the
// command, where the shell that mounted /proc found no mount and exited 127
// before the command ran.
func TestPID1ChildRunsWhateverPATHItIsGiven(t *testing.T) {
	needsPIDNamespace(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{roleEnv + "=say-argv-env", "PATH=" + t.TempDir(), "GORACE=atexit_sleep_ms=0"}
	out, err := runToEnd(t, cmd)
	require.NoError(t, err, out)
	assert.Contains(t, out, "argv [")
}

// An exec.Cmd with no Args runs its Path with no arguments, as os/exec
// runs it; Start took its arguments from Args[1:] and panicked.
func TestStartOfACommandWithNoArgsRunsItsPath(t *testing.T) {
	var out string
	var err error
	require.NotPanics(t, func() { out, err = runToEnd(t, &exec.Cmd{Path: "/bin/echo"}) })
	require.NoError(t, err)
	assert.Equal(t, "\n", out)
}

// A file the kernel cannot execute (no #! line, not ELF) fails the start,
// as os/exec fails it with ENOEXEC, where the shell that execs the command
// ran it as a shell script.
func TestStartOfAFileTheKernelCannotExecFailsAsOSExecDoes(t *testing.T) {
	script := filepath.Join(t.TempDir(), "server")
	require.NoError(t, os.WriteFile(script, []byte("echo run by a shell\n"), 0o755))
	require.ErrorIs(t, exec.Command(script).Start(), syscall.ENOEXEC, "os/exec's own start")
	var out strings.Builder
	cmd := exec.Command(script)
	cmd.Stdout, cmd.Stderr = &out, &out
	child, err := Start(cmd)
	if err == nil {
		<-child.Exited()
	}
	assert.ErrorIs(t, err, syscall.ENOEXEC)
	assert.Empty(t, out.String())
}
