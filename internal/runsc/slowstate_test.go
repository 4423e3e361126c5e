//go:build linux

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
	return wrappedRuntime(t, rt, `case " $* " in *" state "*) sleep `+slowState.String()+` >/dev/null 2>&1 </dev/null ;; esac`)
}

// wrappedRuntime returns a Runtime over rt's containers whose runsc is a shell script that
// runs before, then execs the real runsc with its arguments.
func wrappedRuntime(t *testing.T, rt *Runtime, before string) *Runtime {
	t.Helper()
	runscPath, err := exec.LookPath("runsc")
	require.NoError(t, err)
	script := filepath.Join(t.TempDir(), "runsc-wrapped")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"+before+"\nexec "+runscPath+` "$@"`+"\n"), 0o755))
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

	res := runReaper(t, slowStateRuntime(t, rt), containerID("zombie"), b, "noreap-window")
	assert.Zero(t, res.Reaped)
	assert.Equal(t, escalate.Exited, res.Exit, "SIGTERM ended it, and the kernel says so: %s", res.Err)
	assert.Empty(t, res.Err)
	assert.Less(t, res.Elapsed, slowWindow, "seen within the window, not cut at its end")
}

// Fault (row 835, found reviewing row 831): a sandbox that exited on its SIGTERM, where
// a reaper takes the exit statuses of the runsc commands too (a PID-1 reaper in the
// worker's own process, this test's), ended "unknown". The wait after SIGTERM did not see
// the exit (its runsc state, slowed as a loaded machine slows it, was cut at the wait's
// end); `runsc kill --all 9` then refused, "sandbox is not running", runsc's word that it
// sent no signal and found the process gone, but its status was lost (ECHILD), and the
// Target returned the lost status before it read runsc's words: the Policy took the kill
// for one that may have been delivered and waited for an exit that its runsc state could
// not show within the window: "target not seen to exit, even after SIGKILL". The refusal
// now says the sandbox had exited, lost status or not: Stop returns Exited, within the
// window.
func TestSandboxGoneAtASIGKILLWhoseStatusIsLostIsSeen(t *testing.T) {
	rt := realRuntime(t)
	b, err := WriteBundle(filepath.Join(t.TempDir(), "b"), CounterArgs()) // ends at SIGTERM
	require.NoError(t, err)

	res := runReaper(t, slowStateRuntime(t, rt), containerID("lost"), b, "lost-window")
	assert.Equal(t, escalate.Exited, res.Exit, "SIGTERM ended it, and SIGKILL's refusal says so: %s", res.Err)
	assert.Empty(t, res.Err)
	assert.Less(t, res.Elapsed, slowWindow, "seen within the window, not cut at its end")
}

// The same sandbox left to whoever adopts orphans here (PID 1), which may reap it at
// once: runsc's kill then finds its process gone and says "sandbox is not running",
// runsc's own word that it exited, which the Target took no more for an answer than
// "connection refused", and asked runsc state.
func TestSandboxGoneAtSIGKILLIsSeenWithoutRunscState(t *testing.T) {
	rt := realRuntime(t)
	startActor(t, rt, containerID("gone"), CounterArgs(), false) // ends at SIGTERM: no handler
	ctx, cancel := context.WithTimeout(context.Background(), slowWindow)
	defer cancel()

	exit, err := escalate.Policy{}.Stop(ctx, slowStateRuntime(t, rt).Target(containerID("gone")))
	assert.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit, "SIGTERM ended it, and runsc says so")
	assert.NoError(t, ctx.Err(), "seen within the window, not at its end")
}

// lateWaitRuntime returns a Runtime over rt's containers whose runsc wait begins only
// once the sandbox's process is gone (the script reads its PID from runsc state, waits
// until /proc has it no more, then execs runsc wait), as a runsc wait that a loaded
// machine ran late, and whose runsc state, once such a wait has begun, never answers
// within the window (slowState): what a loaded machine did to the runsc state a Target
// asked after a wait that failed. Every other command is runsc's own; each kill's signal
// is appended to dir/kills, and dir/waited marks the wait's start.
func lateWaitRuntime(t *testing.T, rt *Runtime, dir string) *Runtime {
	t.Helper()
	runscPath, err := exec.LookPath("runsc")
	require.NoError(t, err)
	return wrappedRuntime(t, rt, `d=`+dir+`
for a; do last=$a; done
case " $* " in
*" wait "*)
	pid=$(`+runscPath+` $(echo " $* " | sed 's/ wait / state /') 2>/dev/null | sed -n 's/^ *"pid": *\([0-9]*\),*$/\1/p')
	i=0
	while [ "${pid:-0}" -gt 0 ] && [ -e /proc/$pid ] && [ $i -lt 600 ]; do i=$((i+1)); sleep 0.05; done
	touch $d/waited ;;
*" state "*)
	[ -e $d/waited ] && sleep `+slowState.String()+` >/dev/null 2>&1 </dev/null ;;
*" kill "*)
	echo $last >> $d/kills ;;
esac`)
}

// saveOnTermArgs runs the counter, and ends a second after SIGTERM, as an actor that
// saves its state on it: still running when runsc kill returns.
func saveOnTermArgs() []string {
	return []string{"/bin/sh", "-c", "trap 'sleep 1; exit 0' TERM; " + CounterArgs()[2]}
}

// Fault (row 831, a review of row 810): a sandbox that exited on its SIGTERM, and that
// its reaper collected at once (the workers' built-in PID 1, tini), was seen to exit only
// through a SIGKILL it did not need, or not at all. The wait after SIGTERM (runsc state,
// then runsc wait) found it running; its runsc wait, begun once the sandbox was gone
// (under load each runsc process took 0.2-0.6 s), failed, "sandbox no longer running and
// its exit status is unavailable", runsc's own word that the sandbox's process is gone;
// and the Target asked runsc state whether it had exited, which the end of the wait cut.
// The Policy then sent SIGKILL, whose refusal ("sandbox is not running", row 810) said
// the sandbox had exited, the wait's whole time later; and when a reaper that takes the
// runsc commands' exit statuses too (tini, this test's) took that kill's, "unknown". The
// failed wait's own words now end it, as a failed kill's do, with no runsc process after
// it. Here the reaper is a subreaper that reaps every child at once (reaperMain).
func TestSandboxGoneBeforeItsFailedWaitIsSeenWithoutRunscState(t *testing.T) {
	rt := realRuntime(t)
	b, err := WriteBundle(filepath.Join(t.TempDir(), "b"), saveOnTermArgs())
	require.NoError(t, err)
	dir := t.TempDir()

	res := runReaper(t, lateWaitRuntime(t, rt, dir), containerID("late"), b, "reap-window")
	// The wait after SIGTERM also watches the sandbox's process for a zombie, which
	// ends it before its runsc wait fails when it sees one (1 run of 11 on a 2-core VM):
	// the exit is seen then, as the assertions below require all the same.
	_, werr := os.Stat(filepath.Join(dir, "waited"))
	t.Logf("runsc wait began once the sandbox was gone: %v", werr == nil)
	assertExitedOnSIGTERMAlone(t, res, dir, "the failed wait said the sandbox had exited")
}

// assertExitedOnSIGTERMAlone checks that reaperMain's Policy saw the sandbox exit on its
// SIGTERM and sent nothing after it but the SIGCONT that follows every SIGTERM (no
// SIGKILL), dir/kills holding the signals its runsc kills sent; why is what told the
// Target of the exit.
func assertExitedOnSIGTERMAlone(t *testing.T, res reaperResult, dir, why string) {
	t.Helper()
	assert.Equal(t, escalate.Exited, res.Exit, "SIGTERM ended it, and %s: %s", why, res.Err)
	assert.Empty(t, res.Err)
	kills, err := os.ReadFile(filepath.Join(dir, "kills"))
	require.NoError(t, err)
	assert.Equal(t, "15\n18\n", string(kills), "SIGTERM and its SIGCONT alone: %s", why)
}

// lateWaitWindow is the window in which TestSandboxGoneBeforeItsFailedWaitIsSeenWithoutRunscState
// and TestWaitWhoseStatusIsLostReadsTheExitRunscWrote stop their sandbox: the default
// Policy's wait after SIGTERM ends KillWait (5 s) before its end, room for the actor's
// second and for runsc's processes.
const lateWaitWindow = 12 * time.Second
