//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// killSandbox SIGKILLs sandbox id's gVisor sandbox process (runsc-sandbox), as the
// kernel's OOM killer does, and waits until runsc sees the container stopped.
func killSandbox(t *testing.T, rt *Runsc, id string) {
	t.Helper()
	killed := false
	for _, pid := range runsc.SandboxProcesses(rt.Bundle(id).Dir) {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.HasPrefix(cmd, []byte("runsc-sandbox\x00")) {
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			killed = true
		}
	}
	require.True(t, killed, "no runsc-sandbox process of %s", id)
	require.Eventually(t, func() bool {
		st, err := rt.Runtime.State(context.Background(), id)
		return err == nil && st.Status == "stopped"
	}, 30*time.Second, 20*time.Millisecond)
}

// Fault: a sandbox whose gVisor sandbox process died (killed by the OOM killer, crashed)
// was marked running again by the Pause that found it dead (ErrDied): the node's List
// (the servers' list API) said "running" of a dead sandbox, its timeout was armed again,
// and every drain listed it again for another checkpoint. The node now removes what it
// left (runsc's stopped container, its bundle) and forgets it, saying so at WARN once.
func TestSandboxFoundDeadIsRemovedNotListedRunning(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	var logs logbuf.Buffer
	n.logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dead := runningCounter(t, ctx, n, rt)
	alive := runningCounter(t, ctx, n, rt)
	killSandbox(t, rt, dead.ID)

	_, err := n.Pause(ctx, dead.ID)
	require.ErrorIs(t, err, ErrDied)
	require.ErrorIs(t, err, pause.ErrGone)
	assert.Equal(t, []Info{alive}, n.List(), "the dead sandbox is not listed, and never as running")
	sbs, err := n.Running(ctx)
	require.NoError(t, err)
	require.Len(t, sbs, 1)
	assert.Equal(t, alive.ID, sbs[0].ID())
	_, err = rt.Runtime.State(ctx, dead.ID)
	assert.ErrorIs(t, err, runsc.ErrNotExist, "runsc's container is deleted")
	assert.NoDirExists(t, rt.Bundle(dead.ID).Dir)
	assert.FileExists(t, rt.log(dead.ID), "its log stays, for whoever asks why it died")
	assert.Equal(t, 1, strings.Count(logs.String(), "level=WARN msg=\"sandbox died before its checkpoint"), "%s", &logs)
	assert.Contains(t, logs.String(), dead.ID)
	assert.Contains(t, logs.String(), "runsc does not have its exit status", "why, as far as runsc knows")
}

// diesAtPause is a Fake whose sandboxes are all found dead by Pause, and whose Destroy
// fails while stuck is set.
type diesAtPause struct {
	*Fake
	stuck *atomic.Bool
}

func (diesAtPause) Pause(context.Context, string) (string, error) {
	return "", fmt.Errorf("%w: %w: its sandbox process is gone (injected)", ErrDied, pause.ErrGone)
}

func (f diesAtPause) Destroy(ctx context.Context, id string) error {
	if f.stuck.Load() {
		return errors.New("runsc delete -force: signal: killed (injected)")
	}
	return f.Fake.Destroy(ctx, id)
}

// A dead sandbox whose remains cannot be removed is listed as died, never as running: no
// drain lists it, and a delete (its client's, or its timeout's, armed for it) removes it.
func TestDeadSandboxWhoseRemovalFailsIsListedDiedForADelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		st, err := store.Open(filepath.Join(dir, "records"))
		require.NoError(t, err)
		rt := diesAtPause{Fake: &Fake{Dir: filepath.Join(dir, "images")}, stuck: &atomic.Bool{}}
		rt.stuck.Store(true)
		var logs logbuf.Buffer
		n, _, err := NewNode(rt, st, slog.New(slog.NewTextHandler(&logs, nil)))
		require.NoError(t, err)
		defer n.Close()
		a, err := n.Create(t.Context(), 60)
		require.NoError(t, err)

		_, err = n.Pause(t.Context(), a.ID)
		require.ErrorIs(t, err, ErrDied)
		require.ErrorIs(t, err, pause.ErrGone, "a drain's Preserver counts it vanished")
		require.ErrorContains(t, err, "signal: killed (injected)")
		assert.Equal(t, []Info{{ID: a.ID, State: Died, TimeoutS: 60}}, n.List())
		sbs, err := n.Running(t.Context())
		require.NoError(t, err)
		assert.Empty(t, sbs, "no drain lists a dead sandbox")
		assert.Contains(t, logs.String(), `level=ERROR msg="sandbox died before its checkpoint, and removing what it left failed`)
		_, err = n.Pause(t.Context(), a.ID)
		require.ErrorIs(t, err, ErrConflict)

		rt.stuck.Store(false)
		time.Sleep(time.Minute) // its timeout deletes it
		synctest.Wait()
		assert.Empty(t, n.List())
	})
}

// Fault (row 1073): a sandbox whose workload exited on its own, status 3, was explained as
// "its sandbox process is gone, exit status unavailable (killed: the kernel's OOM killer,
// a person; or crashed)": runsc wait never has the status once gVisor's sandbox process
// has exited, whatever ended it, so every dead sandbox was called killed. The error now
// says what runsc knows: the process exited, its status with its reaper, a normal exit
// as likely as a kill.
func TestSandboxWhoseWorkloadExitedIsNotExplainedAsKilled(t *testing.T) {
	_, rt, _ := newRunscNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// runsc names a sandbox's control socket and its cgroup by its container ID alone,
	// whatever the --root: another test process's "exits" would share them.
	id := "exits-" + rand.Text()[:8]
	require.NoError(t, os.MkdirAll(filepath.Join(rt.Dir, "logs"), 0o700))
	b, err := runsc.WriteBundle(rt.Bundle(id).Dir, []string{"/bin/sh", "-c", "exit 3"})
	require.NoError(t, err)
	require.NoError(t, rt.Runtime.Run(ctx, id, b, rt.log(id)))
	require.Eventually(t, func() bool {
		st, err := rt.Runtime.State(ctx, id)
		return err == nil && st.Status == "stopped"
	}, 30*time.Second, 20*time.Millisecond, "the workload did not exit")

	_, err = rt.Pause(ctx, id)
	require.ErrorIs(t, err, ErrDied)
	require.ErrorIs(t, err, pause.ErrGone)
	t.Log(err)
	assert.NotContains(t, err.Error(), "(killed:", "a workload that exited is explained as killed")
	assert.Contains(t, err.Error(), "its workload exited", "a normal exit is not among the causes")
	assert.Contains(t, err.Error(), "runsc does not have its exit status")
}
