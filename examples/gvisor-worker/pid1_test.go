//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

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
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	dir := t.TempDir()
	forgetRunscState(t, dir) // after PID 1's kill: its sandboxes, checkpointed at SIGTERM, left their cgroups
	termLog := filepath.Join(dir, "termination-log")
	cmd := exec.Command(os.Args[0], "-state-dir", dir, "-grace", "20s", "-runtime", "runsc",
		"-pause-latency", "1s", "-termination-log", termLog)
	cmd.Env = append(os.Environ(), roleEnv+"=1", pid1test.ProcEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	// The cleanup's SIGKILL to PID 1 kills every process of its namespace: the sandboxes
	// too. Their runsc state (under the namespace's own root) goes with the temporary
	// directory, their cgroups with forgetRunscState.
	p := pid1test.StartPID1(t, cmd)
	sock := filepath.Join(dir, "worker.sock")
	waitSocket(t, sock, &stderr)
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
	pid1test.NoZombies(t, p.Cmd.Process.Pid)
	_, err = c.Restore(ctx, r.ID)
	require.NoError(t, err, "restored in the same pod: %s", &stderr)
	waitCount(t, rt.Bundle(r.ID), saved+2)
	counts, err := rt.Bundle(r.ID).Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "the counter went on where it was: %v", counts)
	pid1test.NoZombies(t, p.Cmd.Process.Pid)

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, to PID 1")
	err = p.Wait(t, time.Minute, "PID 1 did not exit: %s", &stderr)
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
