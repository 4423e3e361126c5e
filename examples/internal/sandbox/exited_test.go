//go:build linux

package sandbox

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// caughtExiting is the image of a real checkpoint that caught its workload exiting
// (internal/runsc's testdata: runsc.SavedRunning says false of it).
var caughtExiting, _ = filepath.Abs(filepath.Join("..", "..", "..", "internal", "runsc", "testdata", "caught-exiting", "checkpoint.img"))

// caughtExitingRunsc returns a runsc wrapper whose checkpoints are runsc's own, the real
// image then replaced with caughtExiting: the moment a checkpoint reaches a sandbox whose
// workload is exiting (a few milliseconds, about 3 in 100 checkpoints timed around a
// SIGTERM), held open.
func caughtExitingRunsc(t *testing.T) string {
	t.Helper()
	return imageReplacingRunsc(t, caughtExiting)
}

// imageReplacingRunsc returns a runsc wrapper whose checkpoints are runsc's own, the real
// image then replaced with image: a save made, holding what image holds.
func imageReplacingRunsc(t *testing.T, image string) string {
	t.Helper()
	real, err := exec.LookPath("runsc")
	require.NoError(t, err)
	script := filepath.Join(t.TempDir(), "runsc")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
img=
for a; do case $a in --image-path=*) img=${a#--image-path=} ;; esac; done
`+real+` "$@" || exit $?
case " $* " in *" checkpoint "*) cp `+image+` "$img/checkpoint.img" ;; esac
`), 0o755))
	return script
}

// Fault (row 1392): a checkpoint that reached its sandbox as the workload exited
// succeeded, with an image of the exiting tasks alone (about 11 KB) whose restore stops at
// once, and Pause counted the sandbox paused: the drain's Report said preserved, and its
// resume "succeeded" with nothing running (18 of 527 real checkpoints timed around a
// workload's exit; 3 of 120 here, each a SIGTERM sent 7-8 ms after the checkpoint began).
// Pause now reads the image (runsc.SavedRunning) and counts such a sandbox died (ErrDied,
// pause.ErrGone: the Preserver's Vanished), removing the image and the sandbox.
func TestCheckpointThatCaughtTheWorkloadExitingIsDiedNotPaused(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)
	alive := runningCounter(t, ctx, n, rt)
	rt.Runtime.Binary = caughtExitingRunsc(t)

	_, err := n.Pause(ctx, a.ID)
	require.ErrorIs(t, err, ErrDied, "before: paused, with an image that restores nothing")
	require.ErrorIs(t, err, pause.ErrGone)
	assert.ErrorContains(t, err, "caught its workload exiting")
	assert.NoDirExists(t, rt.Image(a.ID), "the image preserves nothing")
	assert.Equal(t, []Info{alive}, n.List(), "the dead sandbox is forgotten")

	rt.Runtime.Binary = ""
	info, err := n.Pause(ctx, alive.ID)
	require.NoError(t, err, "a checkpoint of a counter that runs is made")
	assert.Equal(t, Paused, info.State)
}

// Fault (row 1394): a paused sandbox whose image a checkpoint that caught its workload
// exiting had saved (by a server older than row 1392's fix: records outlive an upgrade)
// was restored, and Resume succeeded: the node listed it running while runsc said
// stopped, its record gone. Measured with real runsc: before, Resume nil, listed running,
// `runsc state` stopped at the first look after Resume returned. Resume now reads the image first and removes
// the sandbox as dead (ErrDied, its record with it), restoring nothing.
func TestResumeOfAnImageThatCaughtItsWorkloadExitingRemovesTheDeadSandbox(t *testing.T) {
	n, rt, st := newRunscNode(t)
	defer n.Close()
	var logs logbuf.Buffer
	n.logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)
	_, err := n.Pause(ctx, a.ID)
	require.NoError(t, err)
	raw, err := os.ReadFile(caughtExiting)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(rt.Image(a.ID), "checkpoint.img"), raw, 0o600))

	_, err = n.Resume(ctx, a.ID)
	require.ErrorIs(t, err, ErrDied, "before: resumed, listed running, stopped in runsc")
	assert.ErrorContains(t, err, "resume "+a.ID)
	assert.Empty(t, n.List(), "the dead sandbox is forgotten")
	recs, _, err := st.Load()
	require.NoError(t, err)
	assert.Empty(t, recs, "its record goes with it")
	_, err = rt.Runtime.State(ctx, a.ID)
	assert.ErrorIs(t, err, runsc.ErrNotExist, "nothing was restored")
	// The line that says it died says where it was found so: not "died before its
	// checkpoint", which its resume's line said of a sandbox checkpointed long before.
	assert.Contains(t, logs.String(), `level=WARN msg="sandbox found dead at its resume, its image restoring nothing that runs`)
	assert.NotContains(t, logs.String(), `msg="sandbox died before its checkpoint`)
}
