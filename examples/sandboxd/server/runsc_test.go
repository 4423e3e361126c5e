package server

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// runscConfig is testConfig with -runtime runsc (no devices, a 30 s grace, 2 s pauses),
// skipping the test when runsc is not usable; the gVisor sandboxes left are deleted
// when the test ends (removeRunscState).
func runscConfig(t *testing.T) Config {
	t.Helper()
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	cfg := testConfig(t)
	cfg.Runtime, cfg.Devices, cfg.Grace, cfg.PauseLatency = "runsc", 0, 30*time.Second, 2*time.Second
	removeRunscState(t, cfg.StateDir)
	return cfg
}

// removeRunscState removes, when the test ends, the runsc state the servers on stateDir
// left, with the cgroups runsc made for their sandboxes: a drain's checkpointed sandboxes
// are stopped containers, not deleted, and runsc removes a container's cgroups (/ID at
// the root of every hierarchy) only at `runsc delete`; the temporary directory's removal
// left them on the machine for good (3 of them a run of this package). This process's
// PID namespace's sandboxes are force-deleted (its root is sandbox.NewRunsc's, under
// runsc/root: a DeleteAll of runsc/root itself found none); another namespace's (a
// server run as PID 1 of its own) died with it, and runsc.Forget removes their state and
// cgroups, as a next server does. Register it before the servers start, so that it runs
// once their own cleanups have stopped them.
func removeRunscState(t *testing.T, stateDir string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		own := sandbox.NewRunsc(filepath.Join(stateDir, "runsc")).Runtime
		assert.NoError(t, own.DeleteAll(ctx), "this namespace's sandboxes deleted")
		roots, _ := filepath.Glob(filepath.Join(filepath.Dir(own.Root), "*"))
		for _, root := range roots {
			if root != own.Root {
				assert.NoError(t, runsc.Forget(root), "another namespace's state forgotten")
			}
		}
	})
}

// With -runtime runsc: the shutdown checkpoints the running gVisor sandboxes, the next
// sandboxd loads them as paused, and a resume restores each one where it was.
func TestRunscSandboxesSurviveShutdownAndResume(t *testing.T) {
	cfg := runscConfig(t)
	bundle := func(id string) runsc.Bundle {
		return runsc.Bundle{Dir: filepath.Join(cfg.StateDir, "runsc", "bundles", id)}
	}
	counted := func(id string, min int) func() bool {
		return func() bool { n, err := bundle(id).Counter(); return err == nil && n > min }
	}

	st := start(t, cfg)
	ids := []string{createSandbox(t, st.base), createSandbox(t, st.base)}
	for _, id := range ids {
		require.Eventually(t, counted(id, 3), time.Minute, 20*time.Millisecond)
	}
	rep := st.shutdown(t)
	require.NoError(t, rep.Err())
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
	saved := map[string]int{}
	for _, id := range ids {
		n, err := bundle(id).Counter()
		require.NoError(t, err)
		saved[id] = n
	}

	next := start(t, cfg)
	for _, id := range ids {
		code, _, body := call(t, "POST", next.base+"/sandboxes/"+id+"/resume", "")
		require.Equal(t, http.StatusOK, code, body)
	}
	for _, id := range ids {
		require.Eventually(t, counted(id, saved[id]+3), time.Minute, 20*time.Millisecond)
		counts, err := bundle(id).Counts()
		require.NoError(t, err)
		assert.True(t, runsc.ConsecutiveFromOne(counts), "%s restarted instead of resuming: %v", id, counts)
	}
}

// Fault: with -runtime runsc, the gVisor sandboxes a shutdown could not preserve were
// force-deleted (up to 10 s, one runsc delete after another) before last-shutdown.json
// was written, though the drain ends only its margin before SIGKILL: the Report that
// names the lost sandboxes came last, after SIGKILL when the deletes took longer than
// the headroom. It is written before the cleanup starts.
func TestReportIsWrittenBeforeUnpreservedRunscSandboxesAreDeleted(t *testing.T) {
	cfg := runscConfig(t)
	require.NoError(t, os.MkdirAll(filepath.Join(cfg.StateDir, "runsc"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(cfg.StateDir, "runsc", "images"), nil, 0o600)) // every checkpoint fails

	report := filepath.Join(cfg.StateDir, ReportFile)
	seen := &cleanupSeen{report: report}
	s, err := New(context.Background(), cfg, slog.New(seen))
	require.NoError(t, err)
	for range 2 {
		_, err := s.Node().Create(context.Background(), 3600)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // as a SIGTERM would
	rep, err := s.Run(ctx)
	require.NoError(t, err)
	t.Logf("the cleanup of the sandboxes not preserved took %v", time.Since(seen.at))
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 2, rep.Preserve.Lost())
	require.True(t, seen.cleanup.Load(), "the sandboxes not preserved were deleted")
	assert.True(t, seen.reportThen.Load(), "%s was written before the cleanup started", ReportFile)
}

// cleanupSeen is a slog.Handler that notes, when sandboxd logs the start of its runsc
// cleanup, whether the Report file exists at that moment.
type cleanupSeen struct {
	report              string
	cleanup, reportThen atomic.Bool
	at                  time.Time // when the cleanup started
}

func (c *cleanupSeen) Enabled(context.Context, slog.Level) bool { return true }
func (c *cleanupSeen) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *cleanupSeen) WithGroup(string) slog.Handler            { return c }
func (c *cleanupSeen) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "deleting the sandboxes not preserved" {
		_, err := os.Stat(c.report)
		c.at = time.Now()
		c.cleanup.Store(true)
		c.reportThen.Store(err == nil)
	}
	return nil
}

// With -runtime runsc, a drain leaves the sandboxes it checkpointed as stopped containers,
// each with its cgroups (/ID in every hierarchy), for the next sandboxd to restore. The
// next one removes what it restores or deletes: a resume deletes the stopped container
// before its restore, and a delete force-deletes the container, paused or restored. The
// sandbox it leaves paused keeps its container and cgroups, for the server after it.
//
//	first server:  a, b and c running; drained: all three checkpointed, 9 cgroups each
//	next server:   a resumed, b (paused) deleted: b has none
//	               a deleted: none; c, still paused, keeps its own
func TestNextServerLeavesNoCgroupOfASandboxItRestoresOrDeletes(t *testing.T) {
	cfg := runscConfig(t)
	st := start(t, cfg)
	a, b, c := createSandbox(t, st.base), createSandbox(t, st.base), createSandbox(t, st.base)
	t.Logf("a %s, b %s, c %s", a, b, c)
	for _, id := range []string{a, b, c} {
		bundle := runsc.Bundle{Dir: filepath.Join(cfg.StateDir, "runsc", "bundles", id)}
		require.Eventually(t, func() bool { n, err := bundle.Counter(); return err == nil && n > 1 },
			time.Minute, 20*time.Millisecond)
	}
	rep := st.shutdown(t)
	require.Equal(t, 3, rep.Preserve.Counts[pause.Preserved])
	left := sandboxCgroups(c)
	if len(left) == 0 {
		t.Skip("runsc put the sandboxes in no cgroup of their ID here: nothing to leave")
	}

	next := start(t, cfg)
	code, _, body := call(t, "POST", next.base+"/sandboxes/"+a+"/resume", "")
	require.Equal(t, http.StatusOK, code, body)
	code, _, body = call(t, "DELETE", next.base+"/sandboxes/"+b, "")
	require.Equal(t, http.StatusNoContent, code, body)
	assert.Empty(t, sandboxCgroups(b), "the paused sandbox deleted")
	assert.Len(t, sandboxCgroups(a), len(left), "the restored sandbox in its own")
	code, _, body = call(t, "DELETE", next.base+"/sandboxes/"+a, "")
	require.Equal(t, http.StatusNoContent, code, body)
	assert.Empty(t, sandboxCgroups(a), "the restored sandbox deleted")
	assert.Equal(t, left, sandboxCgroups(c), "the one still paused keeps its own, for the next server")
}

// sandboxCgroups returns the cgroup directories runsc made for container id: /ID at the
// root of each hierarchy, for a bundle with no cgroupsPath (runsc.WriteBundle's).
func sandboxCgroups(id string) []string {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", id))
	if fi, err := os.Stat(filepath.Join("/sys/fs/cgroup", id)); err == nil && fi.IsDir() {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", id)) // cgroup v2's
	}
	return dirs
}
