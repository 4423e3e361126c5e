//go:build linux

package lastreport

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// Fault (row 1802): a SIGKILL in a write of the account (its fsync: a Progress rewrites
// it up to once a second, and the final Report after) left the write's temporary file
// beside the file, as large as the account, and nothing ever removed it: the
// supervisor's -report has no state directory lock under which sandboxd and the
// gVisor worker remove theirs (row 872), one more for each such SIGKILL. A Progress
// now removes, as it starts, the temporary files of its file whose writer is gone,
// and never one a live writer is still writing (another server's drain on the same
// file: a DaemonSet update with maxSurge).
//
//	killed writer:  create .report.json.R.tmp ... SIGKILL (the temporary file stays)
//	live writer:    write, rename, write, rename, ... (must never fail)
//	this server:    Progress.Start, 5 times with a live write in flight: the killed
//	                write's file removed, the live ones kept
func TestStartRemovesWhatAKilledWriteLeftAndNoLiveWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	left := killedMidWrite(t, path)

	live := exec.Command(os.Args[0], "-test.run=^$")
	live.Env = append(os.Environ(), writerEnv+"="+path)
	require.NoError(t, live.Start())
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = live.Wait(); close(exited) }()
	defer func() { _ = live.Process.Kill(); <-exited }()

	var logs logbuf.Buffer
	for i := range 5 {
		var inFlight string // the live writer's write, under way as the server starts
		require.Eventually(t, func() bool {
			for _, tmp := range temps(t, path) {
				if tmp != left || i > 0 {
					inFlight = tmp
				}
			}
			return inFlight != ""
		}, 30*time.Second, time.Millisecond)
		budget, err := deadline.New(time.Minute, deadline.Config{})
		require.NoError(t, err)
		cfg := drain.Config{Budget: budget, Sandboxes: draintest.NewNode()}
		p := Follow(&cfg, path, 0o600, slog.New(slog.NewTextHandler(&logs, nil)), nil)
		d, err := drain.New(cfg)
		require.NoError(t, err)
		p.Start(d)
		p.Stop()
		// That write ends, renamed into place (the writer goes on to its next) or
		// failed (the writer exits 1).
		failed := false
		require.Eventually(t, func() bool {
			select {
			case <-exited:
				failed = true
				return true
			default:
			}
			now := temps(t, path)
			return len(now) > 0 && !slices.Contains(now, inFlight)
		}, 30*time.Second, time.Millisecond)
		require.False(t, failed, "the live writer's write failed, its temporary file removed under it: %v", exitErr)
	}
	assert.NoFileExists(t, left, "the killed write's temporary file:\n%s", &logs)
	assert.Contains(t, logs.String(), "removed what a write cut short left")
	assert.NotContains(t, logs.String(), "could not all be removed")
}

// killedMidWrite SIGKILLs a writer of path in a write, and returns the temporary file
// that write left.
func killedMidWrite(t *testing.T, path string) string {
	t.Helper()
	for range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), writerEnv+"="+path)
		require.NoError(t, cmd.Start())
		require.Eventually(t, func() bool { return len(temps(t, path)) > 0 }, 30*time.Second, time.Millisecond, "a hung writer, not a timing")
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		if left := temps(t, path); len(left) > 0 {
			return left[0]
		}
	}
	t.Fatal("no SIGKILL in 20 landed in a write")
	return ""
}

// temps lists the temporary files of writes of path.
func temps(t *testing.T, path string) []string {
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "."+filepath.Base(path)+".") && strings.HasSuffix(e.Name(), ".tmp") {
			out = append(out, filepath.Join(filepath.Dir(path), e.Name()))
		}
	}
	return out
}
