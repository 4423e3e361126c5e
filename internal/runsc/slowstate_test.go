package runsc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause/escalate"
)

// slowState is how long slowStateRuntime's runsc state takes: longer than slowWindow,
// as a runsc process on a machine at load 8-9 on 2 cores took 0.2-0.6 s against the
// 1.1 s window of gvisor-worker's escalations, room for three of them.
const slowState = 30 * time.Second

// slowWindow is the window the default Policy stops a sandbox in, under slowState: its
// two waits share it, 2 s each.
const slowWindow = 4 * time.Second

// slowStateRuntime returns a Runtime over rt's containers whose runsc state never
// answers within slowWindow (a script that waits before it execs the real runsc), while
// every other command is runsc's own: what a loaded machine did to the runsc state a
// Target ran after a SIGKILL that failed.
func slowStateRuntime(t *testing.T, rt *Runtime) *Runtime {
	t.Helper()
	runscPath, err := exec.LookPath("runsc")
	require.NoError(t, err)
	script := filepath.Join(t.TempDir(), "runsc-slow-state")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
case " $* " in *" state "*) sleep `+slowState.String()+` >/dev/null 2>&1 </dev/null ;; esac
exec `+runscPath+` "$@"
`), 0o755))
	c := *rt
	c.Binary = script
	return &c
}

// Fault (a load test of rows 760 and 800): a sandbox that exited on its SIGTERM ended
// "unknown". Under load 8-9 on 2 cores each runsc process took 0.2-0.6 s; the sandbox
// was a zombie before its `runsc kill 15` returned (12 of 12), but the wait after
// SIGTERM spent its half of the 1.1 s window on the runsc state it asks first, then
// `runsc kill --all 9` failed, "connecting to control server at PID N: connection
// refused", and the Target asked runsc state again whether the sandbox had exited,
// which the deadline cut: "target not seen to exit, even after SIGKILL (0s after it)".
// The failed kill names the sandbox's PID, and the kernel (/proc/PID/stat, no process
// started) says it is a zombie: Stop returns Exited within its window. Here nobody
// reaps the sandbox (a subreaper that never does), so it stays a zombie, as under the
// hunt's busy PID 1.
func TestUnreapedSandboxGoneAtSIGKILLIsSeenWithoutRunscState(t *testing.T) {
	rt := realRuntime(t)
	b, err := WriteBundle(filepath.Join(t.TempDir(), "b"), CounterArgs()) // ends at SIGTERM
	require.NoError(t, err)

	res := runReaper(t, slowStateRuntime(t, rt), "zombie", b, "noreap-window")
	assert.Zero(t, res.Reaped)
	assert.Equal(t, escalate.Exited, res.Exit, "SIGTERM ended it, and the kernel says so: %s", res.Err)
	assert.Empty(t, res.Err)
	assert.Less(t, res.Elapsed, slowWindow, "seen within the window, not cut at its end")
}

// The same sandbox left to whoever adopts orphans here (PID 1), which may reap it at
// once: runsc's kill then finds its process gone and says "sandbox is not running",
// runsc's own word that it exited, which the Target took no more for an answer than
// "connection refused", and asked runsc state.
func TestSandboxGoneAtSIGKILLIsSeenWithoutRunscState(t *testing.T) {
	rt := realRuntime(t)
	startActor(t, rt, "gone", CounterArgs(), false) // ends at SIGTERM: no handler
	ctx, cancel := context.WithTimeout(context.Background(), slowWindow)
	defer cancel()

	exit, err := escalate.Policy{}.Stop(ctx, slowStateRuntime(t, rt).Target("gone"))
	assert.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit, "SIGTERM ended it, and runsc says so")
	assert.NoError(t, ctx.Err(), "seen within the window, not at its end")
}
