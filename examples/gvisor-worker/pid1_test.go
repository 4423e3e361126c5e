package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// procEnv makes the role process mount a /proc of its own PID namespace first, as a
// container runtime does for a pod's container before it starts the command.
const procEnv = "GVISOR_WORKER_TEST_MOUNT_PROC"

// mountProc mounts a proc filesystem on /proc in the process's own mount namespace (the
// test starts it with one: Unshareflags CLONE_NEWNS, made private), so /proc shows its
// PID namespace, and removes procEnv so that no process started later mounts it again.
func mountProc() error {
	if err := os.Unsetenv(procEnv); err != nil {
		return err
	}
	return unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// The worker is the container's command, so PID 1 of the pod's PID namespace with no init
// in front: `runsc run -detach` and `runsc checkpoint` leave gVisor's processes
// (runsc-sandbox, runsc-gofer, ...) re-parented to PID 1, which never reaped them. Every
// Checkpoint left five zombies, and a Restore in the same pod failed after 5 s (Internal:
// `runsc delete -force ... waiting sandbox stop`): runsc waited for a zombie nobody
// reaps. The worker now runs under its built-in init (internal/pid1): as PID 1 of a new
// PID namespace it checkpoints a sandbox, restores it where it was in the same namespace,
// leaves no zombie, and on SIGTERM checkpoints it again, writes its Report and its
// termination message, and PID 1 exits 0.
func TestAsPID1RestoresInTheSamePodWithNoZombieLeft(t *testing.T) {
	if err := runsc.Usable(); err != nil {
		skipOrFail(t, "skipping real-runsc test: "+err.Error())
	}
	dir := t.TempDir()
	termLog := filepath.Join(dir, "termination-log")
	cmd := exec.Command(os.Args[0], "-state-dir", dir, "-grace", "20s", "-runtime", "runsc",
		"-pause-latency", "1s", "-termination-log", termLog)
	cmd.Env = append(os.Environ(), roleEnv+"=1", procEnv+"=1", "GORACE=atexit_sleep_ms=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig: syscall.SIGKILL}
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// SIGKILL to PID 1 kills every process of its namespace: the sandboxes too. Their runsc
	// state (under the namespace's own root) goes with the temporary directory.
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	sock := filepath.Join(dir, "worker.sock")
	require.Eventually(t, func() bool {
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}, 30*time.Second, 10*time.Millisecond, "worker did not start: %s", &stderr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := dial(t, sock)
	rt := sandbox.NewRunsc(filepath.Join(dir, "runsc")) // for its bundles only
	r, err := c.Run(ctx, &RunRequest{})
	require.NoError(t, err, "%s", &stderr)
	waitCount(t, rt.Bundle(r.ID), 2)

	_, err = c.Checkpoint(ctx, r.ID)
	require.NoError(t, err, "%s", &stderr)
	saved, err := rt.Bundle(r.ID).Counter()
	require.NoError(t, err)
	noZombies(t, cmd.Process.Pid)
	_, err = c.Restore(ctx, r.ID)
	require.NoError(t, err, "restored in the same pod: %s", &stderr)
	waitCount(t, rt.Bundle(r.ID), saved+2)
	counts, err := rt.Bundle(r.ID).Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "the counter went on where it was: %v", counts)
	noZombies(t, cmd.Process.Pid)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, to PID 1")
	select {
	case err = <-exited:
		exited <- err
	case <-time.After(time.Minute):
		t.Fatalf("PID 1 did not exit: %s", &stderr)
	}
	require.NoError(t, err, "PID 1's exit status is the worker's 0: %s", &stderr)
	data, err := os.ReadFile(filepath.Join(dir, "last-shutdown.json"))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Preserved], "the restored sandbox checkpointed at SIGTERM")
	msg, err := os.ReadFile(termLog)
	require.NoError(t, err, "the termination message is written")
	assert.Contains(t, string(msg), "last-shutdown.json")
}

// noZombies waits until no process of the PID namespace whose PID 1 is the host process
// init has exited unreaped. A zombie that a working init has not yet reaped is gone
// within milliseconds of its SIGCHLD; one nobody reaps stays until the namespace ends.
func noZombies(t *testing.T, init int) {
	t.Helper()
	var zombies []string
	ok := assert.Eventually(t, func() bool {
		zombies = namespaceZombies(t, init)
		return len(zombies) == 0
	}, 10*time.Second, 10*time.Millisecond)
	if !ok {
		t.Errorf("zombies in PID 1's namespace: %v", zombies)
	}
}

// namespaceZombies lists, as "pid (comm)", the zombies of the PID namespace of the host
// process init.
func namespaceZombies(t *testing.T, init int) []string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	require.NoError(t, err)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, p := range stats {
		data, err := os.ReadFile(p)
		i := bytes.LastIndexByte(data, ')') // comm may hold spaces and parentheses
		if err != nil || i < 0 || i+2 >= len(data) || data[i+2] != 'Z' {
			continue
		}
		if link, err := os.Readlink(filepath.Join(filepath.Dir(p), "ns/pid")); err == nil && link == ns {
			out = append(out, string(data[:i+1]))
		}
	}
	return out
}

// skipOrFail skips t for a missing real part, and fails it under CI=true, where every
// part must be there.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why + " (CI=true: must not be skipped)")
	}
	t.Skip(why)
}
