//go:build linux

package runsc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/pause/escalate"
)

// reaperEnv makes the test binary run reaperMain: a PID-1-style supervisor that is a
// child subreaper and reaps every child the moment it exits.
const reaperEnv = "DRAINKIT_RUNSC_REAPER"

// reaperBinaryEnv, when set, is the runsc executable reaperMain's Runtime runs.
const reaperBinaryEnv = "DRAINKIT_RUNSC_REAPER_BINARY"

// The grace and kill wait the reaper gives the container.
const (
	reaperGrace    = 2 * time.Second
	reaperKillWait = 10 * time.Second
	// unreapedGrace is the grace without reaping: long enough that only the exit, not
	// the grace's end, can end the wait within it.
	unreapedGrace = 40 * time.Second
)

// reaperResult is what reaperMain reports on its stdout.
type reaperResult struct {
	Exit    escalate.Exit `json:"exit"`
	Err     string        `json:"error,omitempty"`
	Elapsed time.Duration `json:"elapsed"`
	Reaped  int64         `json:"reaped"` // children the reaper collected during Stop
}

// reaperMain runs in a child of the test: it becomes a child subreaper (the sandbox's
// processes are reparented to it), starts container id from the bundle, then, with
// reap, reaps every child as it exits (wait4(-1) in a loop, as tini or a PID-1
// supervisor does), so the statuses of runsc wait, runsc kill and runsc state are
// stolen from the code that ran them, and stops the container with escalate.Policy.
// Without reap it never reaps an orphan, as a busy or careless PID 1: the sandbox's
// processes stay zombies until it exits. mode is runReaper's.
func reaperMain(root, id, bundle, mode string) int {
	reap := mode == "reap" || mode == "reap-window"
	lost := mode == "lost-window" || mode == "lost-late-window"
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "prctl:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt := &Runtime{Root: root, Binary: os.Getenv(reaperBinaryEnv)}
	if err := rt.Run(ctx, id, Bundle{Dir: bundle}, filepath.Join(root, id+".log")); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	// runsc run returns once the container started, not once its shell ran: a
	// SIGTERM before the first count can come before ignoreTermArgs' trap, and
	// ends the init that should ignore it (a CI run under load: exited in 95 ms).
	for {
		if c, err := (Bundle{Dir: bundle}).Counter(); err == nil && c > 0 {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "the container never counted:", ctx.Err())
			return 1
		case <-time.After(10 * time.Millisecond):
		}
	}
	if lost {
		// Every child's exit status from now on is the kernel's to discard: each
		// runsc command's wait fails with ECHILD, as when a reaper wins the race for
		// it, here every time; the sandbox's process, an orphan, goes at its exit.
		signal.Ignore(syscall.SIGCHLD)
	}
	var reaped atomic.Int64
	go func() {
		if !reap {
			return
		}
		runtime.LockOSThread()
		for {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(-1, &ws, 0, nil); err == nil {
				reaped.Add(1)
			} else {
				time.Sleep(time.Millisecond) // no child right now
			}
		}
	}()
	grace := reaperGrace
	if !reap {
		grace = unreapedGrace
	}
	policy := escalate.Policy{TermWait: grace, KillWait: reaperKillWait}
	if window := reaperWindows[mode]; window > 0 {
		// The default Policy in a window, as gvisor-worker's escalations have: its
		// wait after SIGTERM ends KillWait before the window's end, or halfway
		// through a short one.
		policy = escalate.Policy{}
		var cancelWindow context.CancelFunc
		ctx, cancelWindow = context.WithTimeout(ctx, window)
		defer cancelWindow()
	}
	start := time.Now()
	exit, err := policy.Stop(ctx, rt.Target(id))
	res := reaperResult{Exit: exit, Elapsed: time.Since(start), Reaped: reaped.Load()}
	if err != nil {
		res.Err = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// ignoreTermArgs is a container init that ignores SIGTERM and counts, like an actor
// that does not save itself.
func ignoreTermArgs() []string {
	return []string{"/bin/sh", "-c", "trap '' TERM; " + CounterArgs()[2]}
}

// A child reaper that collects the runsc commands' exit statuses (the ateom review's
// stolen `runsc wait`) must not make a sandbox that ignores SIGTERM look exited: it is
// SIGKILLed when its grace ends, within its window.
func TestStolenWaitStillKillsASandboxIgnoringSIGTERM(t *testing.T) {
	if err := Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	rt := realRuntime(t)
	dir := t.TempDir()
	b, err := WriteBundle(filepath.Join(dir, "b"), ignoreTermArgs())
	require.NoError(t, err)

	res := runReaper(t, rt, containerID("stubborn"), b, "reap")

	assert.Positive(t, res.Reaped, "the reaper collected runsc's children")
	assert.Equal(t, escalate.ExitedAfterKill, res.Exit, "SIGKILL was sent and its effect seen: %s", res.Err)
	assert.GreaterOrEqual(t, res.Elapsed, reaperGrace, "the grace is given in full")
	assert.Less(t, res.Elapsed, reaperGrace+reaperKillWait, "killed within its window")
	st, err := rt.State(context.Background(), containerID("stubborn"))
	require.NoError(t, err)
	assert.Equal(t, "stopped", st.Status)
}

// reaperWindows are the windows in which reaperMain stops the container with the
// default Policy, by mode: slowWindow without reaping or with every status lost,
// lateWaitWindow reaping, or with every status lost and an actor that takes a second.
var reaperWindows = map[string]time.Duration{"noreap-window": slowWindow, "reap-window": lateWaitWindow, "lost-window": slowWindow,
	"lost-late-window": lateWaitWindow}

// runReaper runs reaperMain in a child of the test and returns what it reports.
// mode is "reap", "noreap", or one of reaperWindows: "noreap-window" (never reaps, and
// stops the container with the default Policy in slowWindow), "reap-window" (reaps, in
// lateWaitWindow) or "lost-window" (ignores SIGCHLD once the container runs, so that the
// kernel discards every exit status, in slowWindow) or "lost-late-window" (the same, in
// lateWaitWindow); the child runs rt.Binary.
func runReaper(t *testing.T, rt *Runtime, id string, b Bundle, mode string) reaperResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), reaperEnv+"="+rt.Root+","+id+","+b.Dir+","+mode, reaperBinaryEnv+"="+rt.Binary)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var res reaperResult
	decErr := json.NewDecoder(bufio.NewReader(out)).Decode(&res)
	require.NoError(t, cmd.Wait())
	require.NoError(t, decErr)
	t.Logf("reaper: %+v", res)
	return res
}

// A sandbox that exits on SIGTERM is seen to exit even when nobody reaps it: its
// processes' parent (PID 1 or a subreaper, here one that never reaps) leaves them
// zombies, which runsc state takes for running (kill(pid, 0) succeeds on a zombie)
// while runsc kill and runsc wait fail, its control server gone. The zombie is the
// exit: the wait after SIGTERM sees it and Stop returns Exited, where it used to wait out
// the grace and the kill wait and return ExitUnknown (a busy PID 1 on a loaded machine
// reaped seconds late, and the gvisor-worker's escalate step ran out of its window).
func TestUnreapedSandboxThatExitedOnSIGTERMHasExited(t *testing.T) {
	if err := Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	rt := realRuntime(t)
	b, err := WriteBundle(filepath.Join(t.TempDir(), "b"), CounterArgs())
	require.NoError(t, err)

	res := runReaper(t, rt, containerID("unreaped"), b, "noreap")
	assert.Zero(t, res.Reaped)
	assert.Equal(t, escalate.Exited, res.Exit, "SIGTERM ended it, and its zombie says so: %s", res.Err)
	assert.Empty(t, res.Err)
	assert.Less(t, res.Elapsed, unreapedGrace, "the wait after SIGTERM saw the exit; it did not run out")
	st, err := rt.State(context.Background(), containerID("unreaped"))
	require.NoError(t, err)
	assert.Equal(t, "stopped", st.Status, "reaped once the reaper exited")
}

// A zombie of this test: a child that has exited and that it has not reaped yet.
func zombieChild(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Wait() })
	pid := cmd.Process.Pid
	require.Eventually(t, func() bool { return zombie(pid) }, time.Minute, 5*time.Millisecond, "true exits at once")
	return pid
}

// A container whose sandbox process has exited but is not reaped (its parent, PID 1
// or a subreaper, has not got to it): runsc says running, runsc wait blocks, runsc
// kill fails. The zombie is the exit: Wait returns, Exited says so, and a signal
// finds it gone. They used to wait out their context.
func TestZombieSandboxHasExited(t *testing.T) {
	pid := zombieChild(t)
	rt := fakeRuntime(t, "exited:"+fmt.Sprint(pid))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	tg := rt.Target("sb")
	assert.ErrorIs(t, tg.Wait(ctx), os.ErrProcessDone)
	exited, err := tg.Exited(ctx)
	require.NoError(t, err)
	assert.True(t, exited)
	assert.ErrorIs(t, tg.Signal(ctx, syscall.SIGKILL), os.ErrProcessDone)
	assert.NoError(t, ctx.Err(), "nothing waited for the context")
	exit, err := escalate.Policy{}.Stop(ctx, tg)
	assert.Equal(t, escalate.Gone, exit, "it had exited before Stop's signal")
	assert.NoError(t, err)
}

// A runsc wait that fails saying the sandbox is no longer running (it could not reach
// the control server, and its own kill(pid, 0) found the process gone: reaped) is the
// exit, as a runsc kill that fails so is (row 831): the wait returns done, with no runsc
// state asked after it, which under load was cut by the deadline. Here runsc state still
// says running, as it did when the wait began, so only the failed wait can tell.
func TestWaitThatFailsSayingTheSandboxIsGoneHasExited(t *testing.T) {
	rt := fakeRuntime(t, "waitgone:"+fmt.Sprint(1<<30)) // a PID no process has
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	assert.ErrorIs(t, rt.Target("sb").Wait(ctx), os.ErrProcessDone)
	assert.NoError(t, ctx.Err(), "nothing waited for the context")
}

// A wait that starts after the container stopped returns at once: runsc wait itself
// would block (the real one for 5 s).
func TestWaitOnAStoppedContainerReturns(t *testing.T) {
	rt := fakeRuntime(t, "exited:stopped")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	assert.ErrorIs(t, rt.Target("sb").Wait(ctx), os.ErrProcessDone, "it had exited before the wait")
	assert.NoError(t, ctx.Err(), "nothing waited for the context")
}

// A process that runs is no zombie; nor is one that is gone.
func TestZombieTellsOnlyExitedUnreapedProcesses(t *testing.T) {
	assert.False(t, zombie(os.Getpid()))
	assert.False(t, zombie(1<<30))
	assert.True(t, zombie(zombieChild(t)))
}

// A lost exit status is an error of its own, wrapping ECHILD; state still answers from
// its output.
func TestLostStatusIsReportedNotTakenForSuccess(t *testing.T) {
	err := commandError(context.Background(), []string{"wait", "x"}, &os.SyscallError{Syscall: "waitid", Err: syscall.ECHILD}, nil)
	assert.ErrorIs(t, err, ErrStatusLost)
	assert.ErrorIs(t, err, syscall.ECHILD)
}

// runsc's refusal to checkpoint a container already stopped (its sandbox process killed
// before the checkpoint) is ErrStopped, so that a caller tells a sandbox that died from a
// checkpoint that failed; a checkpoint that failed otherwise is not.
func TestCheckpointOfAStoppedContainerIsErrStopped(t *testing.T) {
	exit := &exec.ExitError{}
	err := commandError(context.Background(), []string{"checkpoint", "x"}, exit,
		[]byte(`checkpoint failed: cannot checkpoint container "x" in state stopped`))
	assert.ErrorIs(t, err, ErrStopped)
	assert.Contains(t, err.Error(), `in state stopped`)
	err = commandError(context.Background(), []string{"checkpoint", "x"}, exit,
		[]byte(`checkpoint failed: writing image: no space left on device`))
	assert.NotErrorIs(t, err, ErrStopped)
}

// saveViaChildArgs is an actor whose init saves on SIGTERM by asking its worker child to
// save (SIGUSR1), then waits for it: the shape the kubelet's runtime and ateom serve, as
// they signal the container's init alone. The child has SIGTERM's default action.
func saveViaChildArgs() []string {
	return []string{"/bin/sh", "-c", `mkfifo /tmp/f && exec 3<>/tmp/f
sh -c 'trap "echo child-saved > /saved; exit 0" USR1; echo ready > /ready; while true; do read -t 0.1 x <&3; done' &
c=$!
trap 'kill -USR1 $c; wait $c; exit 0' TERM
while true; do read -t 0.1 x <&3; done`}
}

// startActor runs args as container id and waits until it wrote /ready, when it has one.
func startActor(t *testing.T, rt *Runtime, id string, args []string, ready bool) Bundle {
	t.Helper()
	dir := t.TempDir()
	b, err := WriteBundle(filepath.Join(dir, "b"), args)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, rt.Run(ctx, id, b, filepath.Join(dir, "log")))
	if ready {
		require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(b.Rootfs(), "ready")); return err == nil },
			30*time.Second, 20*time.Millisecond)
	}
	return b
}

// Fault (a review against real runsc): Target's SIGTERM was `runsc kill --all`, every
// process of the container at once, so a worker child with SIGTERM's default action died
// before the init's handler could have it save, and the actor's state was lost where the
// kubelet's runtime, or ateom's `runsc kill NAME SIGTERM`, signal the init alone. SIGTERM
// now goes to the init; SIGKILL still to every process.
func TestSIGTERMGoesToTheInitWhichHasItsChildSave(t *testing.T) {
	rt := realRuntime(t)
	b := startActor(t, rt, containerID("actor"), saveViaChildArgs(), true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	exit, err := escalate.Policy{TermWait: 20 * time.Second, KillWait: 5 * time.Second}.Stop(ctx, rt.Target(containerID("actor")))
	require.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit, "ended by its SIGTERM, not killed")
	saved, err := os.ReadFile(filepath.Join(b.Rootfs(), "saved"))
	require.NoError(t, err, "the init's handler had its child save: the child was not signalled itself")
	assert.Equal(t, "child-saved\n", string(saved))
}

// gVisor gives a container's init no PID 1 immunity: an init with no SIGTERM handler
// ends at the SIGTERM sent to it alone, with no wait for SIGKILL (measured: 0.11 s, as
// with --all).
func TestInitWithNoSIGTERMHandlerEndsAtSIGTERM(t *testing.T) {
	rt := realRuntime(t)
	startActor(t, rt, containerID("sleeper"), []string{"/bin/sleep", "3600"}, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	exit, err := escalate.Policy{TermWait: 20 * time.Second, KillWait: 5 * time.Second}.Stop(ctx, rt.Target(containerID("sleeper")))
	require.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit, "SIGTERM ended it; SIGKILL was not needed")
}
