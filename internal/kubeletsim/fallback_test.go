//go:build linux

package kubeletsim

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/realpart"
)

// leaveAProcess is the role of a simulator run by a user who is not root:
// its child, a plain child whose container is its process group, starts a
// process in the group and exits; the role says whether that process
// outlived the child, and kills it.
func leaveAProcess() int {
	cmd := exec.Command("sh", "-c", "sleep 300 & echo $!")
	r, w, err := os.Pipe() // not StdoutPipe, which the reaping's Wait closes
	if err != nil {
		return 3
	}
	cmd.Stdout = w
	child, err := Start(cmd)
	_ = w.Close()
	if err != nil {
		fmt.Println("start:", err)
		return 3
	}
	line, _ := bufio.NewReader(r).ReadString('\n')
	<-child.Exited()
	left, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		fmt.Printf("the child said %q: %v\n", line, err)
		return 3
	}
	deadline := time.Now().Add(10 * time.Second) // a SIGKILLed process dies once scheduled
	for alive(left) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("PID 1 %v, cgroup %q, the process it left alive after its exit: %v\n", child.PID1(), child.Cgroup(), alive(left))
	_ = syscall.Kill(left, syscall.SIGKILL)
	return 0
}

// Fault: Child's doc says a container stops with its main process,
// whatever is left of it killed, and without a cgroup (not root) the
// container is the child's process group; but that fallback killed the
// group only on Kill, never at the child's own exit, and a process the
// child left in its group ran on: kubeletsimtest's Example, run by nobody,
// left its server's `sleep 300` behind at each run. The group is now
// SIGKILLed once the child has exited, while the child, a zombie until it
// is reaped, still holds the group's ID. Run as nobody:
//
//	before: the process it left alive after its exit: true (10 s on)
//	now:    false
func TestPlainChildsExitKillsTheRestOfItsProcessGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "root, to run the simulator as nobody")
	}
	cmd := exec.Command(executableByAnyone(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=leave-a-process", "GORACE=atexit_sleep_ms=0")
	cmd.Dir = "/"
	const nobody = 65534
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, errOut, err := outputOf(cmd)
	require.NoError(t, err, errOut)
	assert.Equal(t, "PID 1 false, cgroup \"\", the process it left alive after its exit: false\n", string(out))
}
