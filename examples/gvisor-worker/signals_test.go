package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/pause"
)

// SIGHUP (a closed terminal, a reload habit) and SIGQUIT must not kill a node server: their
// default action ended the worker at once, with no drain, no Report and every sandbox
// lost. SIGHUP is logged and ignored, SIGQUIT dumps the goroutines, and the worker serves
// on until SIGTERM, which still checkpoints every sandbox and exits 0.
func TestHangupAndQuitDoNotKillTheWorker(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "worker.sock")
	cmd := exec.Command(os.Args[0], "-state-dir", dir, "-runtime", "fake", "-pause-latency", "50ms", "-grace", "10s")
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	p := pid1test.Start(t, cmd)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "worker serving") },
		30*time.Second, 10*time.Millisecond, "worker did not start: %s", &stderr)
	c := dial(t, sock)
	for range 2 {
		_, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err, "%s", &stderr)
	}

	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		require.NoError(t, p.Cmd.Process.Signal(sig))
	}
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "goroutine dump") },
		10*time.Second, 10*time.Millisecond, "SIGQUIT's dump: %s", &stderr)
	list, err := c.List(context.Background())
	require.NoError(t, err, "the worker is alive after SIGHUP and SIGQUIT: %s", &stderr)
	assert.Len(t, list.Sandboxes, 2)
	assert.Contains(t, stderr.String(), "SIGHUP ignored")

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.Wait(t, 30*time.Second, "the worker did not exit: %s", &stderr), "exit status 0: %s", &stderr)
	data, err := os.ReadFile(filepath.Join(dir, "last-shutdown.json"))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved], "both sandboxes checkpointed")
}
