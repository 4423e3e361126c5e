package runsc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/pause/escalate"
)

// reaperEnv makes the test binary run reaperMain: a PID-1-style supervisor that is a
// child subreaper and reaps every child the moment it exits.
const reaperEnv = "DRAINKIT_RUNSC_REAPER"

// The grace and kill wait the reaper gives the container.
const (
	reaperGrace    = 2 * time.Second
	reaperKillWait = 10 * time.Second
)

// reaperResult is what reaperMain reports on its stdout.
type reaperResult struct {
	Exit    escalate.Exit `json:"exit"`
	Err     string        `json:"error,omitempty"`
	Elapsed time.Duration `json:"elapsed"`
	Reaped  int64         `json:"reaped"` // children the reaper collected during Stop
}

// reaperMain runs in a child of the test: it becomes a child subreaper (the sandbox's
// processes are reparented to it), starts container id from the bundle, then reaps
// every child as it exits (wait4(-1) in a loop, as tini or a PID-1 supervisor does),
// so the statuses of runsc wait, runsc kill and runsc state are stolen from the code
// that ran them, and stops the container with escalate.Policy.
func reaperMain(root, id, bundle string) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "prctl:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt := &Runtime{Root: root}
	if err := rt.Run(ctx, id, Bundle{Dir: bundle}, filepath.Join(root, id+".log")); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	var reaped atomic.Int64
	go func() {
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
	start := time.Now()
	exit, err := escalate.Policy{TermWait: reaperGrace, KillWait: reaperKillWait}.Stop(ctx, rt.Target(id))
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
		if os.Getenv("CI") == "true" {
			t.Fatalf("real runsc needed: %v (CI=true: must not be skipped)", err)
		}
		t.Skip("skipping real-runsc test: ", err)
	}
	rt := realRuntime(t)
	dir := t.TempDir()
	b, err := WriteBundle(filepath.Join(dir, "b"), ignoreTermArgs())
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), reaperEnv+"="+rt.Root+","+"stubborn"+","+b.Dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var res reaperResult
	decErr := json.NewDecoder(bufio.NewReader(out)).Decode(&res)
	require.NoError(t, cmd.Wait())
	require.NoError(t, decErr)
	t.Logf("reaper: %+v", res)

	assert.Positive(t, res.Reaped, "the reaper collected runsc's children")
	assert.Equal(t, escalate.ExitedAfterKill, res.Exit, "SIGKILL was sent and its effect seen: %s", res.Err)
	assert.GreaterOrEqual(t, res.Elapsed, reaperGrace, "the grace is given in full")
	assert.Less(t, res.Elapsed, reaperGrace+reaperKillWait, "killed within its window")
	st, err := rt.State(context.Background(), "stubborn")
	require.NoError(t, err)
	assert.Equal(t, "stopped", st.Status)
}

// A lost exit status is an error of its own, wrapping ECHILD; state still answers from
// its output.
func TestLostStatusIsReportedNotTakenForSuccess(t *testing.T) {
	err := commandError(context.Background(), []string{"wait", "x"}, &os.SyscallError{Syscall: "waitid", Err: syscall.ECHILD}, nil)
	assert.ErrorIs(t, err, ErrStatusLost)
	assert.ErrorIs(t, err, syscall.ECHILD)
}
