package escalate_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause/escalate"
)

// runscContainer runs args as a container called name of a new runsc state directory and
// returns that directory, the container's bundle and its ID; the container is
// force-deleted when the test ends. The ID is name and a tag of this test process: runsc
// names a sandbox's control socket (@runsc-sandbox.ID) and its cgroup (/ID in every
// hierarchy) by the ID alone, whatever its --root, so another test process's "exited"
// (this package's tests in another worktree or CI job) would make this run fail,
// "address already in use".
func runscContainer(t *testing.T, name string, args []string) (*runsc.Runtime, runsc.Bundle, string) {
	t.Helper()
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	rt := &runsc.Runtime{Root: t.TempDir()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, rt.DeleteAll(ctx))
	})
	dir := t.TempDir()
	b, err := runsc.WriteBundle(filepath.Join(dir, "b"), args)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := name + "-" + processTag
	require.NoError(t, rt.Run(ctx, id, b, filepath.Join(dir, "log")))
	return rt, b, id
}

// processTag tells this test process's containers from another's: random, not the PID,
// which another PID namespace may give a concurrent test process too.
var processTag = rand.Text()[:8]

// Fault (row 974): Example_runsc, the package's one wiring for gVisor, took any runsc
// kill that failed for a failure, and any runsc state that answered for a container still
// running. runsc answers for a stopped container too ("status": "stopped", exit 0) and
// refuses to signal it ("sandbox is not running", exit 128), so a sandbox that had exited
// before the drain was sent SIGTERM again every 100 ms for the whole wait after the
// signal, then SIGKILL for the whole kill wait, and ended ExitUnknown, a loss, where it
// is Gone.
func TestRunscWiringSaysGoneOfASandboxThatHadExited(t *testing.T) {
	rt, _, id := runscContainer(t, "exited", []string{"/bin/sh", "-c", "exit 0"})
	require.Eventually(t, func() bool {
		st, err := rt.State(context.Background(), id)
		return err == nil && st.Status == "stopped"
	}, 30*time.Second, 20*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	exit, err := escalate.Policy{TermWait: 5 * time.Second, KillWait: time.Second}.Stop(ctx, runscTarget(rt.Root, id))
	t.Logf("Stop: %s after %v: %v", exit, time.Since(start), err)
	assert.NoError(t, err)
	assert.Equal(t, escalate.Gone, exit, "it had exited before the signal")
	assert.Less(t, time.Since(start), 5*time.Second, "its first kill's refusal says so: the wait after the signal was not waited out")
}

// Fault (row 974): with the wait stolen (a child reaper took `runsc wait`'s status:
// ECHILD), Stop asks ExitedFunc, which the example made "runsc state failed": the runsc
// state that the wait's deadline cut failed, and a sandbox that ignored SIGTERM was taken
// for exited, never SIGKILLed, and Exited, preserved: the ateom bug (PR #764's stolen
// wait) through the package's own wiring. And one that had exited on SIGTERM, stopped to
// runsc, was taken for running until then.
func TestRunscWiringSeesTheEndWhenTheWaitIsStolen(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want escalate.Exit
	}{
		{"ignores SIGTERM", []string{"/bin/sh", "-c", "trap '' TERM; touch /ready; while true; do sleep 1; done"}, escalate.ExitedAfterKill},
		{"exits on SIGTERM", []string{"/bin/sh", "-c", "touch /ready; exec sleep 3600"}, escalate.Exited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, b, id := runscContainer(t, "stolen", tc.args)
			require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(b.Rootfs(), "ready")); return err == nil },
				30*time.Second, 20*time.Millisecond)
			target := runscTarget(rt.Root, id)
			target.WaitFunc = func(context.Context) error {
				return &os.SyscallError{Syscall: "wait4", Err: syscall.ECHILD} // a reaper took it
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			exit, err := escalate.Policy{TermWait: time.Second, KillWait: 5 * time.Second}.Stop(ctx, target)
			t.Logf("Stop: %s: %v", exit, err)
			assert.NoError(t, err)
			assert.Equal(t, tc.want, exit)
			st, err := rt.State(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, "stopped", st.Status, "the sandbox ended")
		})
	}
}
