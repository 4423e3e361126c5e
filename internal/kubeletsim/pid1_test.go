//go:build linux

package kubeletsim

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/internal/realpart"
)

// asPID1Role is the role of a pod's first process: it orphans a process
// (its parent, a shell, exits at once), and says, one line, its own PID
// and the orphan's parent, both as its /proc shows them, then waits.
func asPID1Role() int {
	out, err := exec.Command("sh", "-c", "sleep 3600 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		return 3
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 3
	}
	var ppid int
	for range 1000 { // the shell's exit re-parents it a moment later
		st, err := procstat.Read(orphan)
		if err != nil {
			return 3
		}
		if ppid = st.PPID; ppid != 1 && ppid != os.Getpid() {
			time.Sleep(time.Millisecond)
			continue
		}
		break
	}
	self, _ := os.Readlink("/proc/self")
	fmt.Printf("pid %d, /proc/self %s, the orphan's parent %d\n", os.Getpid(), self, ppid)
	select {}
}

// needsPIDNamespace skips t, or fails it under CI=true, where a child
// cannot be PID 1 of a namespace of its own.
func needsPIDNamespace(t *testing.T) {
	t.Helper()
	if err := PIDNamespace(); err != nil {
		realpart.Missing(t, err.Error())
	}
}

// A pod's container runs its command as PID 1 of a PID namespace of its
// own, with that namespace's /proc: the command is 1 to itself and in
// /proc, and a process whose parent exits is re-parented to it, not to
// the machine's init.
func TestChildIsPID1OfItsOwnNamespace(t *testing.T) {
	needsPIDNamespace(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=as-pid1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	child, err := Start(cmd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = child.Kill(); <-child.Exited() })
	assert.True(t, child.PID1())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "pid 1, /proc/self 1, the orphan's parent 1\n", line)
}

// PID 1 of a namespace gets no default action for a signal it has no
// handler for: the kernel drops the kubelet's SIGTERM to a command that
// does not catch it (sleep), which then runs until the SIGKILL, where a
// plain child died of the SIGTERM at once.
func TestChildWithNoSIGTERMHandlerRunsUntilTheSIGKILL(t *testing.T) {
	needsPIDNamespace(t)
	child, err := Start(exec.Command("sleep", "3600"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = child.Kill(); <-child.Exited() })
	tl, err := Terminate(context.Background(), child, nil, time.Second)
	require.NoError(t, err)
	t.Logf("\n%s", tl)
	assert.True(t, tl.Killed, "SIGTERM dropped: SIGKILL at the 2 s floor")
	assert.ErrorContains(t, child.Err(), "signal: killed")
}

// A program that is not there fails the start, as os/exec's own start
// fails, not the process that mounts /proc for it.
func TestStartOfAMissingProgramFails(t *testing.T) {
	_, err := Start(exec.Command("/nonexistent/server"))
	require.Error(t, err)
	rel := exec.Command("server")
	rel.Path, rel.Err, rel.Dir = "server", nil, t.TempDir()
	_, err = Start(rel)
	require.Error(t, err)
}
