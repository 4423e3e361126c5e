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

// waitLostRuntime returns a Runtime over rt's containers whose runsc state, once a runsc
// wait has begun, never answers within slowWindow (slowState), as a loaded machine slowed
// the runsc state a Target asked after a wait, and before that names no sandbox PID, so
// that the wait's watch for a zombie, which a reaper quicker than its 50 ms polls mostly
// leaves nothing to see, never does; every other command is runsc's own, each kill's
// signal appended to dir/kills, and dir/waited marks the wait's start.
func waitLostRuntime(t *testing.T, rt *Runtime, dir string) *Runtime {
	t.Helper()
	runscPath, err := exec.LookPath("runsc")
	require.NoError(t, err)
	return wrappedRuntime(t, rt, `d=`+dir+`
for a; do last=$a; done
case " $* " in
*" wait "*) touch $d/waited ;;
*" state "*)
	[ -e $d/waited ] && sleep `+slowState.String()+` >/dev/null 2>&1 </dev/null
	`+runscPath+` "$@" | sed 's/"pid": *[0-9]*/"pid": 0/'; exit 0 ;;
*" kill "*) echo $last >> $d/kills ;;
esac`)
}

// Fault (row 1210): a `runsc wait` whose exit status another reaper took (ECHILD: the
// ateom review's stolen wait) lost the exit it had seen. runsc wait writes the container's
// exit status, {"id":"ID","exitStatus":0}, once its init has exited and its sandbox
// process has gone; Wait returned ErrStatusLost without reading it, and the Target asked
// runsc state whether the container had exited, which under load the wait's end cut: the
// Policy sent SIGKILL to a sandbox that had exited on its SIGTERM and saw the exit only
// through the kill's refusal, the wait's whole time late. Wait now reads runsc's output
// whatever became of its status, as State does. Here the actor saves for a second after
// SIGTERM, so that its runsc wait is under way when it exits, and every exit status is
// the kernel's to discard (lost-late-window: the default Policy's wait after SIGTERM is
// 7 s, so that only a wait that did not see the exit ends in SIGKILL, not a slow machine).
func TestWaitWhoseStatusIsLostReadsTheExitRunscWrote(t *testing.T) {
	rt := realRuntime(t)
	b, err := WriteBundle(filepath.Join(t.TempDir(), "b"), saveOnTermArgs())
	require.NoError(t, err)
	dir := t.TempDir()

	res := runReaper(t, waitLostRuntime(t, rt, dir), containerID("waitlost"), b, "lost-late-window")
	_, werr := os.Stat(filepath.Join(dir, "waited"))
	require.NoError(t, werr, "no runsc wait ran")
	assertExitedOnSIGTERMAlone(t, res, dir, "runsc wait had seen the exit")
}

// Fault (row 1390): a `runsc wait` that had written the container's exit status when its
// context ended (the wait's end, here TermWait, came in the moment between runsc's word
// and its own exit) returned the exit, and the Target's wait returned ctx.Err() all the
// same, for it asked whether the context had ended before whether the wait had seen the
// exit: the Policy took the sandbox for still running, sent SIGKILL, and ended
// "unknown" when the kill wait ended so too, the exit runsc had written lost from the
// Report. A fake runsc holds that moment open: its wait writes the exit and runs until its
// context ends it. The first wait's context ends once the fake says it wrote the exit; the
// Policy's TermWait is the time the fake (this test binary, under -race) has to start and
// write it, which took more than the 300 ms it was on a machine at load 11 (CI's cold run
// beside other work).
func TestWaitThatSawTheExitAsItsContextEndedHasExited(t *testing.T) {
	rt := fakeRuntime(t, "latewait")
	wctx, wcancel := context.WithCancel(t.Context())
	defer wcancel()
	go func() {
		defer wcancel()
		for range 6000 { // a bound on a fake that never writes, not a timing assertion
			if _, err := os.Stat(filepath.Join(rt.Root, latewaitWrote)); err == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	assert.NoError(t, rt.Target("sb").Wait(wctx), "runsc wait wrote the exit")

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	exit, err := escalate.Policy{TermWait: 3 * time.Second, KillWait: 300 * time.Millisecond}.Stop(ctx, rt.Target("sb"))
	assert.Equal(t, escalate.Exited, exit, "the wait after SIGTERM saw it exit: %v", err)
	assert.NoError(t, err)
}
