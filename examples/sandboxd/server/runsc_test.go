package server

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// With -runtime runsc: the shutdown checkpoints the running gVisor sandboxes, the next
// sandboxd loads them as paused, and a resume restores each one where it was.
func TestRunscSandboxesSurviveShutdownAndResume(t *testing.T) {
	if err := runsc.Usable(); err != nil {
		t.Skip("skipping real-runsc test: ", err)
	}
	cfg := testConfig(t)
	cfg.Runtime, cfg.Devices, cfg.Grace, cfg.PauseLatency = "runsc", 0, 30*time.Second, 2*time.Second
	root := &runsc.Runtime{Root: filepath.Join(cfg.StateDir, "runsc", "root")}
	t.Cleanup(func() { _ = root.DeleteAll(context.Background()) })
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
