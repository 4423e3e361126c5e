//go:build linux

package kubeletsim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// runToEnd starts cmd with Start, waits for its exit, and returns what it
// wrote to stdout and to stderr, and how it exited. Kept apart: a test
// binary built with -cover writes to stderr at its exit (no GOCOVERDIR
// given, a GOCOVERDIR it may not write), which is not what it was told.
func runToEnd(t *testing.T, cmd *exec.Cmd) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	child, err := Start(cmd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = child.Kill(); <-child.Exited() })
	err = child.Err() // its output copied once it has exited
	return out.String(), errOut.String(), err
}

// outputOf runs cmd to its end and returns what it wrote to stdout and to
// stderr apart, as runToEnd does for a Child.
func outputOf(cmd *exec.Cmd) (stdout, stderr string, err error) {
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	return string(out), errOut.String(), err
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
	out, errOut, err := runToEnd(t, cmd)
	require.NoError(t, err, errOut)
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
	out, errOut, err := runToEnd(t, cmd)
	require.NoError(t, err, errOut)
	assert.Contains(t, out, "argv [")
}

// An exec.Cmd with no Args runs its Path with no arguments, as os/exec
// runs it; Start took its arguments from Args[1:] and panicked.
func TestStartOfACommandWithNoArgsRunsItsPath(t *testing.T) {
	var out string
	var err error
	require.NotPanics(t, func() { out, _, err = runToEnd(t, &exec.Cmd{Path: "/bin/echo"}) })
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

// procMountsHere is the role of a simulator on a machine whose / is a
// shared mount (systemd makes it so): in a mount namespace of its own, /
// made shared, it starts a PID 1 child and says how many proc mounts it
// sees before and while the child runs.
func procMountsHere() int {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		fmt.Println("making / shared:", err)
		return 3
	}
	count := func() int {
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		return strings.Count(string(mi), " - proc ")
	}
	before := count()
	child, err := Start(exec.Command("sleep", "3600"))
	if err != nil {
		fmt.Println("start:", err)
		return 3
	}
	while := count()
	_ = child.Kill()
	<-child.Exited()
	fmt.Printf("proc mounts here: %d before, %d while the child ran, %d after\n", before, while, count())
	return 0
}

// The PID namespace's /proc is mounted in the child's own mount namespace,
// made private (os/exec's MS_REC|MS_PRIVATE on / after its unshare), so no
// mount propagates to the simulator's, even where / is shared, as systemd
// makes it (run in a namespace of the test's, / made shared there); the
// namespace, and the mount, end with the child's container.
func TestPID1ChildsProcMountStaysInItsOwnMountNamespace(t *testing.T) {
	needsPIDNamespace(t)
	sim := exec.Command(os.Args[0], "-test.run=^$")
	sim.Env = append(os.Environ(), roleEnv+"=proc-mounts-here")
	sim.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := sim.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var before, while, after int
	_, err = fmt.Sscanf(string(out), "proc mounts here: %d before, %d while the child ran, %d after", &before, &while, &after)
	require.NoError(t, err, "%s", out)
	assert.Equal(t, []int{before, before}, []int{while, after}, "no proc mount propagated to the simulator")

	child, err := Start(exec.Command("sleep", "3600"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = child.Kill(); <-child.Exited() })
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", child.Cmd.Process.Pid))
	require.NoError(t, err)
	require.NoError(t, child.Kill())
	<-child.Exited()
	links, _ := filepath.Glob("/proc/[0-9]*/ns/mnt")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil {
			assert.NotEqual(t, ns, target, "%s: the child's mount namespace outlived its container", l)
		}
	}
}

// The command's environment is the command's: the dynamic loader of the binary that
// execs it (this test binary re-executed, dynamically linked when built with -race)
// must not take its LD_PRELOAD, LD_LIBRARY_PATH or GLIBC_TUNABLES too, where a shim
// meant for the program was loaded twice, and a library path meant for an image's
// binary could keep the re-executed binary from starting at all.
func TestPID1ChildsLoaderVariablesAreTheCommandsAlone(t *testing.T) {
	needsPIDNamespace(t)
	preloadOnce := func(start func(*exec.Cmd) (stdout, stderr string, err error)) []string {
		cmd := exec.Command("/bin/echo", "served")
		cmd.Env = []string{"LD_PRELOAD=/nonexistent/shim.so"}
		out, errOut, err := start(cmd)
		require.NoError(t, err, errOut)
		return []string{out, errOut}
	}
	byOSExec := preloadOnce(outputOf)
	require.Contains(t, byOSExec[1], "shim.so", "the loader's word on the missing shim, os/exec's start")
	assert.Equal(t, byOSExec, preloadOnce(func(cmd *exec.Cmd) (string, string, error) { return runToEnd(t, cmd) }))
}
