//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/internal/runsc/runsctest"
	"github.com/drainkit/drainkit/pause"
)

// Fault (a review against runsc 20221219): a checkpoint that failed while writing its
// image (ENOSPC: the images volume full) stops the sandbox all the same, for gVisor ends
// the sandbox after every save (pkg/sentry/control/state.go, "Save failed: exiting...").
// Pause returned the error as if the sandbox still ran: the node listed it running, the
// Preserver's retry found it stopped (ErrDied, pause.ErrGone) and counted it vanished,
// and the drain said nothing was lost. It is lost now, at the first attempt: the drain's
// Report and error say so, and the node lists it lost, its remains and partial image gone.
func TestCheckpointThatFailsOnAFullDiskLosesTheSandboxNotVanishes(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	var logs logbuf.Buffer
	n.logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)
	runsctest.ImagesVolume(t, filepath.Join(rt.Dir, "images"), 0, "size=4k", "a small images volume")

	p, err := pause.New(pause.ListFunc(n.Running), pause.Config{Limit: 1})
	require.NoError(t, err)
	rep := p.Run(ctx, time.Now().Add(30*time.Second))
	require.Len(t, rep.Entries, 1)
	e := rep.Entries[0]
	assert.Equal(t, pause.Failed, e.Outcome, "lost by its own checkpoint: %s", e.Error)
	assert.Equal(t, 1, e.Attempts, "no retry: nothing is left to checkpoint")
	assert.Contains(t, e.Error, "no space left on device", "the Report names why")
	assert.Contains(t, e.Error, ErrLost.Error())
	require.Error(t, rep.Err(), "a drain that lost a sandbox fails")
	assert.Zero(t, rep.Counts[pause.Vanished])

	assert.Equal(t, []Info{{ID: a.ID, State: Lost, TimeoutS: 3600}}, n.List(), "listed lost, never running")
	_, err = rt.Runtime.State(ctx, a.ID)
	assert.ErrorIs(t, err, runsc.ErrNotExist, "runsc's stopped container is deleted")
	assert.NoDirExists(t, rt.Image(a.ID), "the partial image is removed")
	assert.Contains(t, logs.String(), `level=ERROR msg="sandbox lost by a pause that failed`)

	require.NoError(t, n.Delete(ctx, a.ID))
	assert.Empty(t, n.List())
}

// A checkpoint that fails without reaching the sandbox (runsc could not connect to it)
// leaves it running, and Pause fails for a retry. A later Pause that finds it stopped
// calls it lost, not died: the failed checkpoint may be what stopped it (gVisor's sandbox
// process still exiting when runsc was asked), and a drain must not count it as no fault.
func TestSandboxFoundStoppedAfterAFailedCheckpointIsLostNotDied(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)

	real, err := exec.LookPath("runsc")
	require.NoError(t, err)
	failing := filepath.Join(t.TempDir(), "runsc")
	require.NoError(t, os.WriteFile(failing, []byte(`#!/bin/sh
for a; do [ "$a" = checkpoint ] && { echo "checkpoint failed: connecting to the sandbox: connection refused (injected)" >&2; exit 128; }; done
exec `+real+` "$@"
`), 0o755))
	rt.Runtime.Binary = failing
	_, err = n.Pause(ctx, a.ID)
	rt.Runtime.Binary = ""
	require.ErrorContains(t, err, "connection refused (injected)")
	require.NotErrorIs(t, err, ErrLost, "runsc says it runs")
	st, err := rt.Runtime.State(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "running", st.Status)
	require.Equal(t, Running, n.List()[0].State)

	killSandbox(t, rt, a.ID)
	_, err = n.Pause(ctx, a.ID)
	require.ErrorIs(t, err, ErrLost)
	assert.NotErrorIs(t, err, pause.ErrGone)
	assert.NotErrorIs(t, err, ErrDied)
	assert.ErrorContains(t, err, "connection refused (injected)", "the error names the failed checkpoint")
	assert.Equal(t, Lost, n.List()[0].State)
}

// losesAtPause is a Fake whose pauses take latency and then lose the sandbox (ErrLost).
type losesAtPause struct {
	*Fake
	latency time.Duration
}

func (f losesAtPause) Pause(context.Context, string) (string, error) {
	time.Sleep(f.latency)
	return "", fmt.Errorf("runsc checkpoint: %w: statefile error: no space left on device (injected)", ErrLost)
}

// A drain that finds its client's pause of a sandbox in flight waits for it; when that
// pause loses the sandbox the drain counts it lost (the client was told DataLoss), not
// gone: it is listed lost, until its timeout removes it.
func TestSandboxLostByItsClientsPauseDuringADrainIsCountedLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		st, err := store.Open(filepath.Join(dir, "records"))
		require.NoError(t, err)
		rt := losesAtPause{Fake: &Fake{Dir: filepath.Join(dir, "images")}, latency: 2 * time.Second}
		n, _, err := NewNode(rt, st, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		defer n.Close()
		a, err := n.Create(t.Context(), 60)
		require.NoError(t, err)
		clientErr := make(chan error, 1)
		go func() { _, err := n.Pause(t.Context(), a.ID); clientErr <- err }()
		time.Sleep(time.Second)
		require.Equal(t, Pausing, n.List()[0].State)

		p, err := pause.New(pause.ListFunc(n.Running), pause.Config{Limit: 1})
		require.NoError(t, err)
		rep := p.Run(t.Context(), time.Now().Add(time.Minute))
		require.ErrorIs(t, <-clientErr, ErrLost)
		require.Len(t, rep.Entries, 1)
		assert.Equal(t, pause.Failed, rep.Entries[0].Outcome, "%s", rep.Entries[0].Error)
		assert.Equal(t, 1, rep.Entries[0].Attempts)
		assert.Contains(t, rep.Entries[0].Error, ErrLost.Error())
		assert.Error(t, rep.Err())

		sbs, err := n.Running(t.Context())
		require.NoError(t, err)
		assert.Empty(t, sbs, "no drain lists a lost sandbox")
		_, err = n.Pause(t.Context(), a.ID)
		require.ErrorIs(t, err, ErrConflict)
		time.Sleep(time.Minute) // its timeout removes it
		synctest.Wait()
		assert.Empty(t, n.List())
	})
}

// Fault (a review of a checkpoint into a read-only images volume: ext4's
// errors=remount-ro after a disk error): Pause first removes the sandbox's last image,
// and a read-only volume refuses even the removal of what is not there (unlinkat:
// EROFS). No checkpoint began, and Pause returned that error as it was, never asking
// whether the sandbox still ran: one that had died on its own (its workload exited, the
// OOM killer) was listed running again by every retry, its timeout armed, and the drain
// counted it failed, not vanished. Pause now asks runsc, as for a checkpoint whose call
// never reached the sandbox.
//
//	images volume read-only -> Pause: EROFS, no save began, the sandbox runs
//	  -> the sandbox dies on its own -> Pause: died (pause.ErrGone), never listed running
func TestSandboxDeadBeforeACheckpointOnAReadOnlyVolumeIsDiedNotListedRunning(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)
	alive := runningCounter(t, ctx, n, rt)
	runsctest.ImagesVolume(t, filepath.Join(rt.Dir, "images"), syscall.MS_RDONLY, "size=1m", "a read-only images volume")

	_, err := n.Pause(ctx, a.ID)
	t.Logf("running: %v", err)
	require.ErrorIs(t, err, syscall.EROFS)
	require.NotErrorIs(t, err, ErrLost)
	st, err := rt.Runtime.State(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "running", st.Status, "no save began: the sandbox runs")

	killSandbox(t, rt, a.ID)
	_, err = n.Pause(ctx, a.ID)
	t.Logf("dead: %v", err)
	assert.NotErrorIs(t, err, ErrLost, "no checkpoint ran that could have stopped it")
	assert.ErrorIs(t, err, ErrDied)
	assert.ErrorIs(t, err, pause.ErrGone, "a drain counts it vanished")
	// It has no image on the read-only volume, and its bundle is on a writable one: what
	// it left is removed, and it is listed no more (row 3101: the removal of the image it
	// does not have failed, EROFS, and it stayed listed died, for a delete that failed
	// the same way).
	assert.ElementsMatch(t, []Info{alive}, n.List(), "the dead sandbox is still listed")
	sbs, err := n.Running(ctx)
	require.NoError(t, err)
	require.Len(t, sbs, 1, "a drain lists the dead sandbox for a checkpoint")
	assert.Equal(t, alive.ID, sbs[0].ID())
}
