//go:build linux

package kubeletsim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/internal/realpart"
)

const roleEnv = "KUBELETSIM_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		goleak.VerifyTestMain(m)
	case "exit-on-term":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("ready")
		<-ch
		time.Sleep(100 * time.Millisecond)
		os.Exit(0)
	case "ignore-term": // and leave a grandchild in the group, like a device daemon
		signal.Ignore(syscall.SIGTERM)
		gc := exec.Command("sleep", "3600")
		if err := gc.Start(); err != nil {
			os.Exit(3)
		}
		_ = os.WriteFile(os.Getenv("PIDFILE"), []byte(strconv.Itoa(gc.Process.Pid)), 0o644)
		select {}
	case "daemonize": // leave the process group two ways, as device daemons and VMMs do
		os.Exit(daemonize())
	case "start-a-child": // as the user it was started as
		os.Exit(startAChild())
	case "killed-with-a-child": // a simulator SIGKILLed with its child running
		os.Exit(killedWithAChild(os.Getenv("CGROUP_V2") != ""))
	case "kill-events-unreadable": // in a mount namespace of its own
		os.Exit(killWithEventsUnreadable())
	case "as-pid1": // say what the container shows its first process
		os.Exit(asPID1Role())
	case "proc-mounts-here": // in a mount namespace of its own
		os.Exit(procMountsHere())
	case "leave-a-process": // not root: its child a plain one, in its process group alone
		os.Exit(leaveAProcess())
	case "say-argv-env": // say what it was started with
		fmt.Printf("argv %q\nenv %q\n", os.Args, os.Environ())
		os.Exit(0)
	}
}

// daemonize is the role of a server that starts two processes outside its
// process group: one in a session of its own (setsid), and one that also
// left it (a double fork: its parent exits, init adopts it). It writes
// their PIDs to PIDFILE, one a line, then exits on SIGTERM if EXIT_ON_TERM
// is set and ignores it otherwise.
func daemonize() int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	session := exec.Command("sleep", "3600")
	session.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := session.Start(); err != nil {
		return 3
	}
	out, err := exec.Command("setsid", "sh", "-c", "sleep 3600 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		return 3
	}
	pids := fmt.Sprintf("%d\n%s", session.Process.Pid, out)
	if err := os.WriteFile(os.Getenv("PIDFILE"), []byte(pids), 0o644); err != nil {
		return 3
	}
	for {
		<-term
		if os.Getenv("EXIT_ON_TERM") != "" {
			return 0
		}
	}
}

// startAChild is the role of a simulator run by a user who is not root:
// it starts a child with Start and says where it ran.
func startAChild() int {
	child, err := Start(exec.Command("true"))
	if err != nil {
		fmt.Println("start failed:", err)
		return 4
	}
	fmt.Printf("started, its container's cgroup %q\n", child.container.cgroup())
	if err := child.Err(); err != nil {
		fmt.Println("the child failed:", err)
		return 5
	}
	return 0
}

// killedWithAChild is the role of a simulator that is SIGKILLed (a
// test's timeout, an OOM kill, a person's kill -9) while its child runs
// in a container of the layout asked for: it says the child's PID and
// container, one line, and SIGKILLs itself once its stdin ends.
func killedWithAChild(v2 bool) int {
	for _, h := range hierarchies() {
		if h.v2 != v2 {
			continue
		}
		child, err := start(exec.Command("sleep", "3600"), []hierarchy{h})
		if err != nil {
			fmt.Println("start failed:", err)
			return 4
		}
		fmt.Printf("%d %s\n", child.Cmd.Process.Pid, child.container.cgroup())
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	fmt.Println("no such hierarchy")
	return 3
}

func TestRemainingIsTheKubeletArithmetic(t *testing.T) {
	for _, c := range []struct{ grace, elapsed, want time.Duration }{
		{30 * time.Second, 0, 30 * time.Second},
		{30 * time.Second, 999 * time.Millisecond, 30 * time.Second}, // truncated to 0 s
		{30 * time.Second, 10500 * time.Millisecond, 20 * time.Second},
		{30 * time.Second, 29 * time.Second, 2 * time.Second}, // 1 s raised to the floor
		{30 * time.Second, 30 * time.Second, 2 * time.Second}, // overrun: the one-off 2 s
		{3600 * time.Second, 3555 * time.Second, 45 * time.Second},
	} {
		assert.Equal(t, c.want, Remaining(c.grace, c.elapsed), "grace %v, hook %v", c.grace, c.elapsed)
	}
}

// The simulator's kubelet and drainkit's budget compute the same wait,
// each from its own code, on every hook duration around the whole seconds
// and the floor.
func TestRemainingAgreesWithTheBudget(t *testing.T) {
	assert.Equal(t, deadline.MinimumGracePeriod, MinimumGracePeriod)
	for _, grace := range []time.Duration{time.Second, 2 * time.Second, 30 * time.Second, 3600 * time.Second} {
		for elapsed := time.Duration(0); elapsed <= grace+3*time.Second; elapsed += 250 * time.Millisecond {
			for _, e := range []time.Duration{elapsed, elapsed + time.Second - time.Nanosecond} {
				assert.Equal(t, deadline.KubeletRemaining(grace, e), Remaining(grace, e), "grace %v, hook %v", grace, e)
			}
		}
	}
}

// 0 ........ 3.7 s hook returns; SIGTERM (10 - 3 = 7 s left) ... 4.7 s exit ... 10.7 s (SIGKILL due)
func TestHookThenSIGTERMThenCleanExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		go func() { <-p.Signals(); time.Sleep(time.Second); p.Exit() }()
		hook := HookFunc(func(ctx context.Context) error { time.Sleep(3700 * time.Millisecond); return nil })
		t0 := time.Now()
		tl, err := Terminate(context.Background(), p, hook, 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, t0, tl.Start)
		assert.Equal(t, 3700*time.Millisecond, tl.SIGTERM.Sub(t0))
		assert.Equal(t, 7*time.Second, tl.Remaining, "3.7 s truncated to 3 s")
		assert.Equal(t, 10700*time.Millisecond, tl.KillDue.Sub(t0))
		assert.False(t, tl.Killed)
		assert.Equal(t, 6*time.Second, tl.Headroom())
		assert.Contains(t, tl.String(), "SIGTERM")
	})
}

func TestOverrunningHookGetsTheTwoSecondFloorThenSIGKILL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		hook := HookFunc(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		t0 := time.Now()
		tl, err := Terminate(context.Background(), p, hook, 30*time.Second)
		require.NoError(t, err)
		assert.True(t, tl.HookKept)
		assert.Equal(t, 30*time.Second, tl.SIGTERM.Sub(t0))
		assert.Equal(t, MinimumGracePeriod, tl.Remaining)
		assert.True(t, tl.Killed, "the process ignored SIGTERM")
		assert.Equal(t, 32*time.Second, tl.Exit.Sub(t0))
		select {
		case <-p.Killed():
		default:
			t.Fatal("Killed not closed")
		}
	})
}

func TestNoHookMeansTheWholeGraceAfterSIGTERM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		t0 := time.Now()
		tl, err := Terminate(context.Background(), p, nil, 45*time.Second)
		require.NoError(t, err)
		assert.Equal(t, t0, tl.SIGTERM)
		assert.Equal(t, 45*time.Second, tl.KillDue.Sub(t0))
		assert.True(t, tl.Killed)
	})
}

func TestRealChildExitsOnSIGTERM(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=exit-on-term")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	child, err := Start(cmd)
	require.NoError(t, err)
	line, err := bufio.NewReader(out).ReadString('\n') // its handler is in place
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	tl, err := Terminate(context.Background(), child, nil, 10*time.Second)
	require.NoError(t, err)
	assert.False(t, tl.Killed)
	require.NoError(t, child.Err())
}

func TestRealChildIgnoringSIGTERMIsKilledWithItsWholeGroup(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "grandchild.pid")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=ignore-term", "PIDFILE="+pidfile)
	child, err := Start(cmd)
	require.NoError(t, err)
	var gc int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidfile)
		if err != nil || len(b) == 0 {
			return false
		}
		gc, err = strconv.Atoi(string(b))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	gc = hostPIDs(t, child, []int{gc})[0]
	hook := Exec{Path: "sh", Args: []string{"-c", "sleep 1.2"}}
	tl, err := Terminate(context.Background(), child, hook, 3*time.Second)
	require.NoError(t, err)
	// 1.2 s truncated to 1 s leaves 3 - 1 = 2 s; a hook slowed past 2 s on
	// a loaded machine leaves 1 s, raised to the same 2 s floor.
	assert.Equal(t, 2*time.Second, tl.Remaining, "the hook's whole seconds subtracted, at least the 2 s floor")
	assert.True(t, tl.Killed)
	require.Error(t, child.Err())
	require.Eventually(t, func() bool { return !alive(gc) }, 10*time.Second, 10*time.Millisecond,
		"the grandchild in the group died with it")
}

// hostPIDs returns the PIDs this machine's /proc gives the processes a
// child's role wrote down as pids: its own PIDs, of the child's PID
// namespace, where the child is PID 1 of one (PID1), a process of the
// machine's under the same number. Each is looked up by its namespace's
// PID among the processes of the child's namespace (NSpid in
// /proc/PID/status), while the child runs.
func hostPIDs(t *testing.T, child *Child, pids []int) []int {
	t.Helper()
	if !child.PID1() {
		return pids
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", child.Cmd.Process.Pid))
	require.NoError(t, err, "the child's PID namespace")
	inNS := map[int]int{} // the namespace's PID -> the machine's
	stats, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, p := range stats {
		dir := filepath.Dir(p)
		if link, err := os.Readlink(filepath.Join(dir, "ns/pid")); err != nil || link != ns {
			continue
		}
		status, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(status)) {
			if ids, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(ids)
				host, err1 := strconv.Atoi(f[0])
				own, err2 := strconv.Atoi(f[len(f)-1])
				if err1 == nil && err2 == nil {
					inNS[own] = host
				}
			}
		}
	}
	out := make([]int, len(pids))
	for i, pid := range pids {
		host, ok := inNS[pid]
		require.True(t, ok, "process %d of the child's namespace not found", pid)
		out[i] = host
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && st.State != 'Z'
}

// The simulator's SIGTERM and exit agree within 0.2 s with what the real
// kubelet did in the same scenarios (Measured), and under a graceful node
// shutdown (MeasuredNodeShutdown), whose slice it terminates with.
func TestSimulatorMatchesTheMeasuredKubelet(t *testing.T) {
	for _, s := range append(append([]Scenario(nil), Measured...), MeasuredNodeShutdown...) {
		t.Run(s.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				term, exit, err := s.Simulate(context.Background())
				require.NoError(t, err)
				assert.InDelta(t, s.SIGTERM.Seconds(), term.Seconds(), 0.2, "SIGTERM: simulated %v, measured %v", term, s.SIGTERM)
				assert.InDelta(t, s.Exit.Seconds(), exit.Seconds(), 0.2, "exit: simulated %v, measured %v", exit, s.Exit)
			})
		})
	}
}

// Without a hook the kubelet still applies the 2 s floor: a grace of 1 s
// SIGKILLs 2 s after SIGTERM.
func TestNoHookGraceOfOneSecondGetsTheTwoSecondFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		t0 := time.Now()
		tl, err := Terminate(context.Background(), p, nil, time.Second)
		require.NoError(t, err)
		assert.Equal(t, MinimumGracePeriod, tl.Remaining)
		assert.Equal(t, 2*time.Second, tl.Exit.Sub(t0))
	})
}

// A hook that overruns is not cancelled at the grace period: it still runs
// after SIGTERM, and its context ends only when the process has exited.
func TestOverrunningHookIsNotCancelledUntilTheProcessExits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		t0 := time.Now()
		var hookEnded time.Time
		hook := HookFunc(func(ctx context.Context) error { <-ctx.Done(); hookEnded = time.Now(); return ctx.Err() })
		go func() {
			<-p.Signals()
			time.Sleep(1500 * time.Millisecond) // shutting down, with the hook still running
			p.Exit()
		}()
		tl, err := Terminate(context.Background(), p, hook, 5*time.Second)
		require.NoError(t, err)
		assert.True(t, tl.HookKept)
		assert.Equal(t, 5*time.Second, tl.SIGTERM.Sub(t0))
		assert.Equal(t, 6500*time.Millisecond, hookEnded.Sub(t0), "the hook ran until the process exited")
		assert.False(t, tl.Killed)
	})
}

// A sleep hook of 4 s out of 10: SIGTERM at 4 s leaves 6 s; the container
// saw nothing before SIGTERM.
func TestSleepHookLeavesGraceMinusTheSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		t0 := time.Now()
		tl, err := Terminate(context.Background(), p, Sleep(4*time.Second), 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 4*time.Second, tl.SIGTERM.Sub(t0))
		assert.Equal(t, 6*time.Second, tl.Remaining)
		assert.Equal(t, 10*time.Second, tl.Exit.Sub(t0), "killed at T0 + grace")
	})
}

// 0 .. hook call 1 (grace 30 s) .. 5 s: the kubelet restarts and reads a
// grace of 10 s (the pod was deleted again): call 1 ends with the old
// kubelet, the new one runs the hook again and times 10 s from there: the
// hook overruns again, SIGTERM at 15 s, SIGKILL at 17 s.
func TestRestartedKubeletRunsTheHookAgainWithTheGraceItReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		t0 := time.Now()
		var mu sync.Mutex
		var calls, ended []time.Duration
		hook := HookFunc(func(ctx context.Context) error {
			mu.Lock()
			calls = append(calls, time.Since(t0))
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			ended = append(ended, time.Since(t0))
			mu.Unlock()
			return ctx.Err()
		})
		tl, err := TerminateRestarted(context.Background(), p, hook, 30*time.Second, KubeletRestart{After: 5 * time.Second, Grace: 10 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{0, 5 * time.Second}, calls, "the hook ran twice")
		assert.Equal(t, []time.Duration{5 * time.Second, 17 * time.Second}, ended,
			"the first call ended with the old kubelet, the second with the process")
		assert.Equal(t, 5*time.Second, tl.Restart.Sub(t0))
		assert.True(t, tl.HookKept)
		assert.Equal(t, 15*time.Second, tl.SIGTERM.Sub(t0))
		assert.Equal(t, 17*time.Second, tl.Exit.Sub(t0), "the 2 s floor after the second call overran")
	})
}

// The second call returns after 3 s: 10 - 3 = 7 s after SIGTERM.
func TestRestartedKubeletTimesTheGraceFromTheSecondCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		t0 := time.Now()
		var n atomic.Int32
		hook := HookFunc(func(ctx context.Context) error {
			if n.Add(1) == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			time.Sleep(3 * time.Second)
			return nil
		})
		tl, err := TerminateRestarted(context.Background(), p, hook, 30*time.Second, KubeletRestart{After: 5 * time.Second, Grace: 10 * time.Second})
		require.NoError(t, err)
		assert.False(t, tl.HookKept)
		assert.Equal(t, 8*time.Second, tl.SIGTERM.Sub(t0))
		assert.Equal(t, 7*time.Second, tl.Remaining)
		assert.Equal(t, 15*time.Second, tl.Exit.Sub(t0))
	})
}

// A restart with the pod's grace unchanged gives the whole grace again,
// from the restart: a hook that overruns is given up at 5 + 30 s.
func TestRestartedKubeletGivesTheWholeGraceAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		t0 := time.Now()
		hook := HookFunc(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		tl, err := TerminateRestarted(context.Background(), p, hook, 30*time.Second, KubeletRestart{After: 5 * time.Second, Grace: 30 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, 35*time.Second, tl.SIGTERM.Sub(t0))
		assert.Equal(t, 37*time.Second, tl.Exit.Sub(t0))
	})
}

func TestKubeletRestartRejectsWhatTheKubeletWouldNotDo(t *testing.T) {
	hook := HookFunc(func(ctx context.Context) error { return nil })
	for _, restart := range []KubeletRestart{
		{After: 5 * time.Second, Grace: 31 * time.Second}, // longer than the pod's grace
		{After: 0, Grace: time.Second},                    // not during the hook
		{After: 40 * time.Second, Grace: time.Second},     // after the grace
		{After: time.Second},                              // no grace at all
	} {
		_, err := TerminateRestarted(context.Background(), NewInProcess(), hook, 30*time.Second, restart)
		assert.ErrorContains(t, err, "KubeletRestart", "%+v", restart)
	}
	_, err := TerminateRestarted(context.Background(), NewInProcess(), nil, 30*time.Second, KubeletRestart{After: time.Second, Grace: time.Second})
	assert.ErrorContains(t, err, "needs a hook")
}

// 0 .. hook (waits for its ctx) .. 2 s: the process dies on its own
// (a crash). The real hook ends with it (an httpGet fails with EOF, an
// exec dies with its container) and the kubelet goes on at once: the
// hook's ctx ends at 2 s, SIGTERM follows, and the exit is 2 s, not the
// 30 s grace the simulator waited for a hook nobody could still answer.
func TestProcessDyingDuringTheHookEndsTheHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewInProcess()
		t0 := time.Now()
		go func() { time.Sleep(2 * time.Second); p.Exit() }()
		var hookEnded time.Time
		hook := HookFunc(func(ctx context.Context) error { <-ctx.Done(); hookEnded = time.Now(); return ctx.Err() })
		tl, err := Terminate(context.Background(), p, hook, 30*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 2*time.Second, hookEnded.Sub(t0), "the hook's ctx ends when the process exits")
		assert.False(t, tl.HookKept, "the hook did not use the grace period")
		assert.Equal(t, 2*time.Second, tl.SIGTERM.Sub(t0))
		assert.Equal(t, 2*time.Second, tl.Exit.Sub(t0), "Exit is when the process exited")
		assert.False(t, tl.Killed)
	})
}

// A real child that exits during a hook that does not return: its exit
// is recorded when it happened, before SIGTERM, not when the simulator
// got round to SIGTERM.
func TestRealChildExitingDuringTheHookIsRecordedWhenItExited(t *testing.T) {
	cmd := exec.Command("sh", "-c", "read x")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	child, err := Start(cmd)
	require.NoError(t, err)
	var exitedAt time.Time
	hook := HookFunc(func(ctx context.Context) error {
		assert.NoError(t, stdin.Close()) // the child exits on its own
		<-child.Exited()
		exitedAt = time.Now()
		<-ctx.Done()
		return ctx.Err()
	})
	tl, err := Terminate(context.Background(), child, hook, 10*time.Second)
	require.NoError(t, err)
	assert.False(t, tl.HookKept, "the hook ended with the process")
	assert.False(t, tl.Killed)
	assert.False(t, tl.Exit.Before(exitedAt.Add(-time.Second)), "Exit %v is when the child exited (%v)", tl.Exit.Sub(tl.Start), exitedAt.Sub(tl.Start))
	assert.False(t, tl.Exit.After(tl.HookEnd), "the exit (%v) ended the hook (%v)", tl.Exit.Sub(tl.Start), tl.HookEnd.Sub(tl.Start))
	assert.False(t, tl.HookEnd.After(tl.SIGTERM))
}

// An exec hook is a process tree in the container: when the container
// dies, all of it dies. The hook's shell here left a child running (one
// that keeps the hook's output open): it must die with the process too,
// and Terminate return, not wait for it until ctx gives up.
func TestExecHookDiesWithTheProcessChildrenIncluded(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=exit-on-term")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	child, err := Start(cmd)
	require.NoError(t, err)
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	pidfile := filepath.Join(t.TempDir(), "hook-child.pid")
	hook := Exec{Path: "sh", Args: []string{"-c", "sleep 3600 & echo $! > " + pidfile + "; wait"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tl, err := Terminate(ctx, child, hook, 2*time.Second)
	require.NoError(t, err, "the hook's whole tree ended with the process")
	assert.True(t, tl.HookKept)
	b, err := os.ReadFile(pidfile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	// SIGKILL was sent to the hook's group; the kernel ends a process when
	// it next runs, which on a loaded machine can be after Terminate
	// returned (sh was reaped, its child was not scheduled yet). A child
	// left alive would never die: it sleeps for an hour.
	dead := assert.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 5*time.Millisecond,
		"the hook's child died with the container")
	if !dead {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// The kubelet does not check the status an httpGet hook is answered with:
// runHTTPHandler (pkg/kubelet/lifecycle/handlers.go) returns only the
// transport's error, so a 404 (a hook sent to the wrong port) is no failed
// hook and no FailedPreStopHook event, just a hook that returned at once.
// The simulator records the status apart, where a test can check it.
func TestHTTPGetHookStatusIsRecordedNotAFailure(t *testing.T) {
	notFound := http.NotFoundHandler()
	t.Run("in process", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := NewInProcess()
			go func() { <-p.Signals(); p.Exit() }()
			tl, err := Terminate(context.Background(), p, HandlerHook{Handler: notFound, Path: "/drain"}, 10*time.Second)
			require.NoError(t, err)
			assert.Empty(t, tl.HookErr, "the kubelet does not check the status")
			assert.Equal(t, http.StatusNotFound, tl.HookStatus)
			assert.Equal(t, tl.Start, tl.SIGTERM, "the hook returned at once")
			assert.Contains(t, tl.String(), "404")
		})
	})
	t.Run("over loopback", func(t *testing.T) {
		srv := httptest.NewServer(notFound)
		defer srv.Close()
		p := NewInProcess()
		go func() { <-p.Signals(); p.Exit() }()
		tl, err := Terminate(context.Background(), p, HTTPGet{URL: srv.URL + "/drain"}, 10*time.Second)
		require.NoError(t, err)
		assert.Empty(t, tl.HookErr)
		assert.Equal(t, http.StatusNotFound, tl.HookStatus)
	})
	t.Run("refused is a failure", func(t *testing.T) {
		srv := httptest.NewServer(notFound)
		url := srv.URL
		srv.Close()
		p := NewInProcess()
		go func() { <-p.Signals(); p.Exit() }()
		tl, err := Terminate(context.Background(), p, HTTPGet{URL: url + "/drain"}, 10*time.Second)
		require.NoError(t, err)
		assert.Contains(t, tl.HookErr, "refused")
		assert.Zero(t, tl.HookStatus)
	})
}

// The kubelet's SIGKILL is the container runtime's: runc kills every
// process in the container's cgroup, and a container whose main process
// exits stops with all of it (its PID namespace ends). A process that left
// the server's process group (setsid, a double-forked daemon, a runsc
// command in a group of its own) is still in the container and dies too.
// The simulator SIGKILLed only the process group: both lived on. It does
// so on either cgroup layout: v1's pids hierarchy, and v2 (most nodes
// today), killed with cgroup.kill, or frozen and each process SIGKILLed
// where the kernel has no cgroup.kill (before 5.14), as runc does; on v2
// it fell back to the process group.
func TestSIGKILLTakesProcessesThatLeftTheProcessGroup(t *testing.T) {
	for _, layout := range containerLayouts {
		for _, c := range []struct {
			name       string
			exitOnTerm bool
		}{
			{"killed at the end of the grace", false},
			{"the server exits on SIGTERM: the container stops", true},
		} {
			t.Run(layout.name+"/"+c.name, func(t *testing.T) {
				h := machineHierarchy(t, layout.v2)
				h.freeze = layout.freeze
				child, daemons := startDaemonizing(t, h, c.exitOnTerm)
				dir := child.container.cgroup()
				require.NotEmpty(t, dir, "the child's container is a cgroup of its own in %v", h)
				tl, err := Terminate(context.Background(), child, nil, time.Second)
				require.NoError(t, err)
				assert.Equal(t, !c.exitOnTerm, tl.Killed)
				assertDaemonsDied(t, daemons)
				assert.NoDirExists(t, dir, "the container's cgroup is removed")
			})
		}
	}
}

// A runtime in the container makes cgroups below the container's and
// moves processes there (runsc does with a cgroupsPath inside its pod's
// cgroup namespace; systemd in a container does): they are still the
// container's, and its SIGKILL takes them, as runc's does (cgroup.kill
// kills the subtree; without it runc signals every process of the
// subtree). The simulator read the container's own cgroup.procs alone:
// they outlived the SIGKILL, and the removal of the container's cgroup,
// busy with the one below it, failed Kill after its retries.
func TestSIGKILLTakesProcessesInCgroupsBelowTheContainers(t *testing.T) {
	for _, layout := range containerLayouts {
		t.Run(layout.name, func(t *testing.T) {
			h := machineHierarchy(t, layout.v2)
			h.freeze = layout.freeze
			child, daemons := startDaemonizing(t, h, false)
			dir := child.container.cgroup()
			require.NotEmpty(t, dir, "the child's container is a cgroup of its own in %v", h)
			below := filepath.Join(dir, "runtime", "sandbox")
			require.NoError(t, os.MkdirAll(below, 0o755))
			for _, pid := range daemons {
				require.NoError(t, os.WriteFile(filepath.Join(below, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0))
			}
			tl, err := Terminate(context.Background(), child, nil, time.Second)
			require.NoError(t, err)
			assert.True(t, tl.Killed)
			assert.NotContains(t, tl.String(), "SIGKILL failed")
			assertDaemonsDied(t, daemons)
			assert.NoDirExists(t, dir, "the container's cgroup is removed, the ones below it first")
		})
	}
}

// containerLayouts are the cgroup layouts a Child's container can have:
// v1's pids hierarchy, v2 killed with cgroup.kill, and v2 killed as on a
// kernel without cgroup.kill (before 5.14): frozen, each process
// SIGKILLed, as runc does.
var containerLayouts = []struct {
	name   string
	v2     bool
	freeze bool
}{
	{"cgroup v1 pids", false, false},
	{"cgroup v2, cgroup.kill", true, false},
	{"cgroup v2 without cgroup.kill: frozen, each SIGKILLed", true, true},
}

// startDaemonizing starts the daemonize role in a container in h and
// returns it and its two daemons (the setsid child, the double-forked
// one), which the test's cleanup kills if the simulator left them.
func startDaemonizing(t *testing.T, h hierarchy, exitOnTerm bool) (*Child, []int) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "daemons.pid")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=daemonize", "PIDFILE="+pidfile)
	if exitOnTerm {
		cmd.Env = append(cmd.Env, "EXIT_ON_TERM=1")
	}
	child, err := start(cmd, []hierarchy{h})
	require.NoError(t, err)
	t.Cleanup(func() { _ = child.Kill(); <-child.Exited() })
	var daemons []int
	require.Eventually(t, func() bool {
		daemons = readPIDs(pidfile)
		return len(daemons) == 2
	}, 10*time.Second, 10*time.Millisecond)
	daemons = hostPIDs(t, child, daemons)
	t.Cleanup(func() {
		for _, pid := range daemons {
			_ = syscall.Kill(pid, syscall.SIGKILL) // whatever the simulator left
		}
	})
	return child, daemons
}

// assertDaemonsDied checks that the daemonize role's two daemons died.
func assertDaemonsDied(t *testing.T, daemons []int) {
	t.Helper()
	for i, pid := range daemons {
		assert.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 5*time.Millisecond,
			"%s (pid %d) died with the container", []string{"the setsid child", "the double-forked daemon"}[i], pid)
	}
}

// machineHierarchy returns this machine's cgroup hierarchy of the layout
// asked for, v2 or v1's pids, as Start finds it; where there is none, or
// the test is not root (who alone may make a cgroup there), the test says
// what is missing.
func machineHierarchy(t *testing.T, v2 bool) hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		realpart.Missing(t, "root, to make the child's container a cgroup of its own")
	}
	for _, h := range hierarchies() {
		if h.v2 == v2 {
			return h
		}
	}
	if v2 {
		realpart.Missing(t, "cgroup v2 (a cgroup2 mount in /proc/self/mountinfo: a pure v2 /sys/fs/cgroup or the unified mount) and a kernel that forks into a v2 cgroup (clone3's CLONE_INTO_CGROUP, Linux 5.7)")
	}
	realpart.Missing(t, "cgroup v1's pids hierarchy (a cgroup mount with the pids controller in /proc/self/mountinfo)")
	return hierarchy{}
}

// readPIDs reads the PIDs in file, one a line; none while it is incomplete.
func readPIDs(file string) []int {
	b, err := os.ReadFile(file)
	if err != nil || !strings.HasSuffix(string(b), "\n") {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		pids = append(pids, pid)
	}
	return pids
}

// The container's hierarchy is found where /proc/self/mountinfo says it is
// mounted, never at a path written in: cgroup v2 on a pure v2 node, the
// unified mount beside v1's (this machine), a mount of a part of the
// hierarchy (a container's view), a mount point with a space; v2 first,
// and only where the kernel forks into a v2 cgroup.
func TestContainerHierarchiesAreFoundInMountinfo(t *testing.T) {
	root := t.TempDir()
	cgroupDir := func(parts ...string) string {
		dir := filepath.Join(append([]string{root}, parts...)...)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), nil, 0o644))
		return dir
	}
	pure := cgroupDir("pure", "system.slice", "node.service")
	unified, pids := cgroupDir("hybrid", "unified", "job"), cgroupDir("hybrid", "pids", "job")
	part := cgroupDir("part", "ctr")
	spaced := cgroupDir("with space", "job")
	for _, c := range []struct {
		name, mountinfo, own string
		cloneV2              bool
		want                 []hierarchy
	}{
		{"pure v2", "30 23 0:26 / " + root + "/pure rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
			"0::/system.slice/node.service\n", true, []hierarchy{{v2: true, parent: pure}}},
		{"v1 with the unified mount", "39 31 0:36 / " + root + "/hybrid/pids rw,relatime - cgroup cgroup rw,pids\n" +
			"41 31 0:38 / " + root + "/hybrid/unified rw,relatime - cgroup2 cgroup2 rw\n",
			"8:pids:/job\n1:cpu:/\n0::/job\n", true, []hierarchy{{v2: true, parent: unified}, {parent: pids}}},
		{"a kernel that cannot fork into a v2 cgroup", "39 31 0:36 / " + root + "/hybrid/pids rw - cgroup cgroup rw,pids\n" +
			"41 31 0:38 / " + root + "/hybrid/unified rw - cgroup2 cgroup2 rw\n",
			"8:pids:/job\n0::/job\n", false, []hierarchy{{parent: pids}}},
		{"a part of the hierarchy mounted", "30 23 0:26 /kubepods/pod1 " + root + "/part rw - cgroup2 cgroup2 rw\n",
			"0::/kubepods/pod1/ctr\n", true, []hierarchy{{v2: true, parent: part}}},
		{"a cgroup beside the mounted part", "30 23 0:26 /kubepods/pod1 " + root + "/part rw - cgroup2 cgroup2 rw\n",
			"0::/kubepods/pod12\n", true, nil},
		{"a mount point with a space", "30 23 0:26 / " + strings.ReplaceAll(root+"/with space", " ", `\040`) + " rw - cgroup2 cgroup2 rw\n",
			"0::/job\n", true, []hierarchy{{v2: true, parent: spaced}}},
	} {
		assert.Equal(t, c.want, findHierarchies(c.mountinfo, c.own, c.cloneV2), c.name)
	}
}

// slowKill is a container whose runtime takes the main process at once on
// SIGKILL and then spends took more on the rest of the container (a cgroup
// that stays busy, a process slow to die), and returns err.
type slowKill struct {
	*InProcess
	took time.Duration
	err  error
}

func (p slowKill) Kill() error {
	_ = p.InProcess.Kill()
	time.Sleep(p.took)
	return p.err
}

// 0 SIGTERM (ignored) ........ 2 s SIGKILL, the main process exits at once
// ... 3.1 s the runtime's kill returns, failed or not. The timeline reads
// in time order: SIGKILL at 2 s, the exit at 2 s. The simulator stamped
// the SIGKILL when its kill returned (3.1 s) and appended the exit (2 s)
// after it.
func TestTimelineReadsInTimeOrderWhenTheKillIsSlow(t *testing.T) {
	for _, c := range []struct {
		name, kill string
		err        error
	}{
		{"the kill failed", "SIGKILL failed: cgroup busy", errors.New("cgroup busy")},
		{"the kill succeeded", "SIGKILL to the container", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := slowKill{InProcess: NewInProcess(), took: 1100 * time.Millisecond, err: c.err}
				tl, err := Terminate(context.Background(), p, nil, 2*time.Second)
				require.NoError(t, err)
				assert.Equal(t, []string{
					"0s SIGTERM (SIGKILL due in 2s)",
					"2s " + c.kill,
					"2s process exited after SIGKILL",
				}, eventsSinceT0(tl))
				assert.True(t, slices.IsSortedFunc(tl.Events, func(a, b Event) int { return a.At.Compare(b.At) }), "%v", tl)
			})
		})
	}
}

// eventsSinceT0 lists tl's events as "<time since T0> <what>", in the
// order the timeline holds them.
func eventsSinceT0(tl *Timeline) []string {
	var lines []string
	for _, e := range tl.Events {
		lines = append(lines, fmt.Sprintf("%v %s", e.At.Sub(tl.Start), e.What))
	}
	return lines
}

// A simulator run by a user who is not root, in a cgroup v2 whose
// directory is theirs but not its cgroup.procs (a directory handed over
// without the rest of a delegation): the container's cgroup can be made
// there, but the kernel refuses to fork into it (moving a process needs
// write access to the cgroup.procs of the common ancestor). Start failed
// every child with "fork/exec: permission denied"; it goes on to the next
// hierarchy, here the process group, and leaves no cgroup behind.
func TestStartThatMayNotForkIntoTheCgroupFallsBack(t *testing.T) {
	h := machineHierarchy(t, true)
	parent := filepath.Join(h.parent, fmt.Sprintf("kubeletsimtest-user-%d", os.Getpid()))
	require.NoError(t, os.Mkdir(parent, 0o755))
	t.Cleanup(func() { assert.NoError(t, removeCgroup(parent)) })
	const nobody = 65534
	require.NoError(t, os.Chown(parent, nobody, nobody))
	fd, err := unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)

	cmd := exec.Command(executableByAnyone(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=start-a-child")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: nobody, Gid: nobody},
		UseCgroupFD: true, CgroupFD: fd, // the simulator runs in parent
	}
	out, errOut, err := outputOf(cmd)
	require.NoError(t, err, errOut)
	assert.Equal(t, "started, its container's cgroup \"\"\n", string(out), "the container is the process group")
	subs, err := subCgroups(parent)
	require.NoError(t, err)
	assert.Empty(t, subs, "no cgroup left behind")
}

// executableByAnyone copies this test binary where any user may run it.
func executableByAnyone(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kubeletsim-test-bin-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	bin := filepath.Join(dir, "kubeletsim.test")
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	return bin
}

// 0 a simulator starts a child in a container, and is SIGKILLed (a test's
// timeout, an OOM kill): nothing removes the container's cgroup, and its
// child runs on, on the CI machine, across runs. The next simulator's
// Start removes the cgroups of simulators that are gone, killing what
// ran in them, and keeps those of simulators still running, its own
// included. It left them: 1 cgroup of 1, and its child alive.
func TestStartRemovesTheCgroupsOfASimulatorThatWasKilled(t *testing.T) {
	for _, layout := range containerLayouts[:2] { // v1 pids, v2
		t.Run(layout.name, func(t *testing.T) {
			h := machineHierarchy(t, layout.v2)
			own, _ := startDaemonizing(t, h, false) // a container of a simulator still running
			orphan, leftDir := startInASimulatorKilled(t, layout.v2, nil)

			child, err := start(exec.Command("true"), []hierarchy{h})
			require.NoError(t, err)
			require.NoError(t, child.Err())

			assert.NoDirExists(t, leftDir, "the killed simulator's cgroup is removed")
			assert.Eventually(t, func() bool { return !alive(orphan) }, 10*time.Second, 5*time.Millisecond,
				"the child it left is killed")
			assert.DirExists(t, own.container.cgroup(), "a running simulator's container is kept")
			assert.True(t, alive(own.Cmd.Process.Pid))
		})
	}
}

// startInASimulatorKilled runs the killed-with-a-child role in the layout
// asked for, calls whileAlive (if not nil) with the PID of its child and
// that child's container before the simulator is killed (a simulator
// still running has its cgroups left alone, by another test binary's
// Start too), and returns them. The test's cleanup kills the child and
// removes the container if Start left them.
func startInASimulatorKilled(t *testing.T, v2 bool, whileAlive func(pid int, dir string)) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=killed-with-a-child")
	if v2 {
		cmd.Env = append(cmd.Env, "CGROUP_V2=1")
	}
	kill, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	var pid int
	var dir string
	_, scanErr := fmt.Sscanf(line, "%d %s", &pid, &dir)
	if err == nil && scanErr == nil {
		t.Cleanup(func() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_, _ = (&container{dir: dir, v2: v2}).kill()
		})
		if whileAlive != nil {
			whileAlive(pid, dir)
		}
	}
	_ = kill.Close()
	require.ErrorContains(t, cmd.Wait(), "killed", "%s", line)
	require.NoError(t, scanErr, "%s", line)
	require.NotEmpty(t, dir)
	return pid, dir
}

// A cgroup is taken for a gone simulator's only by a name that says so:
// its PID namespace this one, and no process of its PID started when it
// did; the names of running simulators (this one), of other namespaces
// and of other forms (another program's, an older simulator's) are kept.
func TestOwnerGoneTellsOnlyTheCgroupsOfSimulatorsThatAreGone(t *testing.T) {
	ns, pid := pidNamespace(), os.Getpid()
	require.NotZero(t, ns)
	st, err := procstat.Read(pid)
	require.NoError(t, err)
	exited := exec.Command("true")
	require.NoError(t, exited.Run())
	for _, c := range []struct {
		name string
		gone bool
	}{
		{cgroupName(), false},
		{fmt.Sprintf("kubeletsim-%d-%d-%d-1", ns, pid, st.StartTime), false},
		{fmt.Sprintf("kubeletsim-%d-%d-%d-1", ns, pid, st.StartTime+1), true}, // the PID given to a later process
		{fmt.Sprintf("kubeletsim-%d-%d-%d-1", ns, exited.Process.Pid, st.StartTime), true},
		{fmt.Sprintf("kubeletsim-%d-%d-%d-1", ns+1, exited.Process.Pid, st.StartTime), false},
		{fmt.Sprintf("kubeletsim-0-%d-0-1", exited.Process.Pid), false},
		{fmt.Sprintf("kubeletsim-%d-1", exited.Process.Pid), false},
		{"sb-00266ce696c9", false},
	} {
		assert.Equal(t, c.gone, ownerGone(c.name), c.name)
	}
}

// A gone simulator's child that SIGKILL cannot end (frozen by cgroup v1's
// freezer, as a paused sandbox is; in an uninterruptible sleep on a dead
// device) keeps its cgroup busy: the first Start waits for it, goneBound
// (a kill's whole killBound, 10 s, at first), and gives up; a later Start
// of the same process does not wait for it again, leaving it to the next
// simulator. Each Start waited the whole killBound again.
func TestStartWaitsForAGoneSimulatorsCgroupOnce(t *testing.T) {
	h := machineHierarchy(t, false)
	freezer := v1Freezer(t)
	frozen := filepath.Join(freezer, fmt.Sprintf("kubeletsimtest-frozen-%d", os.Getpid()))
	require.NoError(t, os.Mkdir(frozen, 0o755))
	t.Cleanup(func() { assert.NoError(t, removeCgroup(frozen)) }) // once its child was killed
	thaw := func() { _ = os.WriteFile(filepath.Join(frozen, "freezer.state"), []byte("THAWED"), 0) }
	_, leftDir := startInASimulatorKilled(t, false, func(pid int, _ string) {
		t.Cleanup(thaw) // before the child is killed
		require.NoError(t, os.WriteFile(filepath.Join(frozen, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0))
		require.NoError(t, os.WriteFile(filepath.Join(frozen, "freezer.state"), []byte("FROZEN"), 0))
	})

	for i := range 2 {
		began := time.Now()
		child, err := start(exec.Command("true"), []hierarchy{h})
		require.NoError(t, err)
		require.NoError(t, child.Err())
		took := time.Since(began)
		t.Logf("Start %d took %v", i+1, took)
		require.DirExists(t, leftDir, "the frozen child keeps the gone simulator's cgroup busy")
		if i == 1 {
			assert.Less(t, took, goneBound/2, "the second Start did not wait for it again")
		}
	}
}

// v1Freezer returns the directory of this process's cgroup in cgroup v1's
// freezer hierarchy, or says it is missing.
func v1Freezer(t *testing.T) string {
	t.Helper()
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	own, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	for _, line := range strings.Split(string(own), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[1] != "freezer" {
			continue
		}
		for _, l := range strings.Split(string(mountinfo), "\n") {
			if m, ok := parseMount(l); ok && m.fstype == "cgroup" && slices.Contains(strings.Split(m.options, ","), "freezer") {
				if dir, ok := m.dirOf(parts[2]); ok {
					return dir
				}
			}
		}
	}
	realpart.Missing(t, "cgroup v1's freezer hierarchy (a cgroup mount with the freezer controller in /proc/self/mountinfo)")
	return ""
}

// 0 SIGTERM ... 0.5 s the main process exits; the container stops, and
// the kill of what is left in it fails (a process SIGKILL cannot end,
// its cgroup busy). The timeline says so: it said nothing, a clean exit,
// with what the container held still running.
func TestTimelineSaysTheContainersStopFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := slowKill{InProcess: NewInProcess(), took: time.Second, err: errors.New("cgroup busy")}
		go func() { <-p.Signals(); time.Sleep(500 * time.Millisecond); p.Exit() }()
		tl, err := Terminate(context.Background(), p, nil, 2*time.Second)
		require.NoError(t, err)
		assert.False(t, tl.Killed)
		assert.Equal(t, []string{
			"0s SIGTERM (SIGKILL due in 2s)",
			"500ms process exited, 1.5s before SIGKILL",
			"500ms SIGKILL to the rest of the container failed: cgroup busy",
		}, eventsSinceT0(tl))
	})
}
