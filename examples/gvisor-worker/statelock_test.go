//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
)

// The fault: a worker started on the state directory of one still checkpointing (a
// DaemonSet rolling update with maxSurge) removed the old one's runsc state, and the old
// one's checkpoints failed. The new worker now waits for the directory, serving nothing,
// and takes over once the old one has exited:
//
//	old: serves two sandboxes on STATE_DIR/worker.sock
//	new: starts on the same -state-dir   -> "held by another server", old's PID and pod
//	old: SIGTERM, checkpoints both, exits 0
//	new:                                 -> "state directory taken"; serves on the socket,
//	                                        both checkpointed
func TestSecondWorkerWaitsForTheStateDirectoryUntilTheFirstExits(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "worker.sock")
	start := func(pod string) (*pid1test.Process, *logbuf.Buffer) {
		cmd := exec.Command(os.Args[0], "-state-dir", dir, "-runtime", "fake", "-pause-latency", "50ms", "-grace", "10s")
		cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0", "POD_NAME="+pod)
		var stderr logbuf.Buffer
		cmd.Stderr = &stderr
		return pid1test.Start(t, cmd), &stderr
	}
	old, oldLog := start("worker-old")
	waitSocket(t, sock, oldLog)
	c := dial(t, sock)
	var ids []string
	for range 2 {
		r, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err, "%s", oldLog)
		ids = append(ids, r.ID)
	}

	_, nextLog := start("worker-new")
	const waiting = "state directory held by another server; waiting for it to exit before touching it"
	require.Eventually(t, func() bool {
		return strings.Contains(nextLog.String(), waiting) || strings.Contains(nextLog.String(), "gvisor-worker: ")
	}, 30*time.Second, 10*time.Millisecond, "the new worker neither waits nor fails: %s", nextLog)
	require.Contains(t, nextLog.String(), waiting)
	assert.Contains(t, nextLog.String(), fmt.Sprintf(`holder="pid %d (worker-old) since `, old.Cmd.Process.Pid))
	list, err := c.List(context.Background())
	require.NoError(t, err, "the old worker still serves on its socket: %s", oldLog)
	assert.Len(t, list.Sandboxes, 2)

	require.NoError(t, old.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, old.Wait(t, 30*time.Second, "the old worker did not exit: %s", oldLog), "exit status 0: %s", oldLog)
	require.Eventually(t, func() bool { return strings.Contains(nextLog.String(), "worker serving") },
		30*time.Second, 10*time.Millisecond, "the new worker did not start: %s", nextLog)
	assert.Contains(t, nextLog.String(), `msg="state directory taken"`)
	list, err = dial(t, sock).List(context.Background())
	require.NoError(t, err, "%s", nextLog)
	states := map[string]string{}
	for _, sb := range list.Sandboxes {
		states[sb.ID] = sb.State
	}
	assert.Equal(t, map[string]string{ids[0]: "paused", ids[1]: "paused"}, states, "the new worker took over both checkpoints")
}
