package runsc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/realpart"
)

// killedClient returns a Runtime over rt's containers whose runsc
// checkpoint is SIGKILLed after, as the kernel's OOM killer or a person
// kills it: a script that execs the real runsc, its PID then runsc's.
func killedClient(t *testing.T, rt *Runtime, after time.Duration) *Runtime {
	t.Helper()
	runscPath, err := exec.LookPath("runsc")
	require.NoError(t, err)
	script := filepath.Join(t.TempDir(), "runsc-killed")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf("#!/bin/sh\ncase \" $* \" in *\" checkpoint \"*) ( sleep %.3f; kill -KILL $$ ) & ;; esac\nexec %s \"$@\"\n",
		after.Seconds(), runscPath)), 0o755))
	killed := *rt
	killed.Binary = script
	return &killed
}

// Fault (a review of the checkpoint's double faults): a runsc checkpoint
// client killed (SIGKILL) once the save had reached the sandbox left a
// checkpoint gVisor made all the same: the sandbox stopped about 1.5 s
// after the kill (held to 5 % of a CPU) with an image that restores, the
// counter going on. Checkpoint said only "signal: killed", which the
// examples' Runsc.Pause takes for a checkpoint that failed: a sandbox
// found stopped after it is lost (ErrLost), its image removed. A killed client writes no
// failure, as one whose status another reaper took: it is judged by what
// runsc left, the container stopped within StopWait.
//
//	0       runsc checkpoint starts; the sandbox saves at 5 % of a CPU
//	0.4 s   the client is SIGKILLed
//	~2 s    the save ends and the sandbox stops: the image is whole
func TestCheckpointWhoseClientIsKilledIsJudgedByWhatRunscLeft(t *testing.T) {
	rt := realRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	id := "killed"
	b, logPath := runCounter(ctx, t, rt, dir, id)
	st, err := rt.State(ctx, id)
	require.NoError(t, err)
	lift := throttle(t, st.Pid, 5)
	img := filepath.Join(dir, id+"-img")

	err = killedClient(t, rt, 400*time.Millisecond).Checkpoint(ctx, id, img)
	lift()
	require.NoError(t, err, "the save went on without its client")
	restoresFrom(ctx, t, rt, id, b, img, logPath)
	counts, err := b.Counts()
	require.NoError(t, err)
	assert.True(t, ConsecutiveFromOne(counts), "restored from the image, the counter goes on: %v", counts)
}

// A killed client on a full images volume: the save failed, and stopped
// the sandbox all the same, but no client is left to say so. A volume with
// no space left is taken for that failure, never for a checkpoint made.
func TestCheckpointWhoseClientIsKilledOnAFullVolumeIsNotMade(t *testing.T) {
	rt := realRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	id := "killedfull"
	runCounter(ctx, t, rt, dir, id)
	st, err := rt.State(ctx, id)
	require.NoError(t, err)
	lift := throttle(t, st.Pid, 5)
	defer lift()
	img := filepath.Join(dir, id+"-img")
	require.NoError(t, os.MkdirAll(img, 0o700))
	if err := syscall.Mount("tmpfs", img, "tmpfs", 0, "size=64k"); err != nil {
		realpart.Missing(t, "skipping: mounting a small images volume needs root: "+err.Error())
	}
	defer func() { _ = syscall.Unmount(img, syscall.MNT_DETACH) }()

	err = killedClient(t, rt, 400*time.Millisecond).Checkpoint(ctx, id, img)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "signal: killed")
	assert.Contains(t, err.Error(), "no space left")
}
