//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/drainkit/drainkit/ublk"
)

// Fault: a SIGTERM during the daemon's teardown after the server exited on
// its own did not reach the budget. The server dies during the preStop
// wait (which then keeps waiting: a listing that fails is no count), the
// teardown runs to the budget's deadline, T0 + grace - margin, and the
// kubelet, whose grace is shorter than -grace (a node shutdown's slice,
// an eviction, a manifest whose terminationGracePeriodSeconds is not
// -grace), gives up on the hook still open and sends SIGTERM: SIGKILL in
// 2 s. The supervisor logged that SIGTERM and went on, the teardown laid
// out for a deadline long past SIGKILL, which took the daemon with its
// device live. A SIGTERM while a preStop request is open is now the
// budget's OnHookAbandoned, as drain's Shutdown takes it (OnSIGTERM with
// none open), and the teardown follows the deadline it moves to. Real
// processes, -grace 12 s, a daemon that ignores its SIGTERM with a live
// device, SIGTERM once the teardown has asked the daemon to stop (the
// before measured with it 1 s later still):
//
//	before: the teardown's deadline T0 + 10.5 s, SIGTERM + 9.2 s: 7 s past
//	        SIGKILL, the Report not written by then
//	now:    SIGTERM + 1 s (2 s less the margin), before SIGKILL: counted
//	        from when the supervisor took the SIGTERM (its log line), which
//	        a loaded machine may deliver late
func TestSIGTERMWithThePreStopOpenDuringTheTeardownMovesItsDeadline(t *testing.T) {
	n := startHungDaemonNode(t)
	sup, logFile, listen, hook, ctx := n.sup, n.logFile, n.listen, n.hook, t.Context()
	t0 := time.Now()
	hookDone := make(chan int, 1)
	go func() { hookDone <- get(ctx, "http://"+hook+"/drain") }() // waits: 2 sandboxes run
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 503 }, 10*time.Second, 10*time.Millisecond,
		"the preStop wait began: readiness 503")
	require.NoError(t, syscall.Kill(serverOf(t, sup, "stubserver"), syscall.SIGKILL), "the server dies on its own")
	// The kubelet's grace runs out a while into the teardown: once the daemon was asked
	// to stop, which it ignores, and the teardown waits for it with its device live.
	require.Eventually(t, func() bool { return strings.Contains(readFile(t, logFile), "ublk: request stop") }, 10*time.Second, 10*time.Millisecond,
		"the teardown asked the daemon to stop")
	select {
	case code := <-hookDone:
		require.Failf(t, "the preStop wait ended", "status %d", code)
	default:
	}
	sigterm := time.Now()
	sup.signal(t, syscall.SIGTERM) // the kubelet gave up on the hook: SIGKILL due at sigterm + 2 s

	rep := n.teardownOver(t)
	took := sigtermTakenAt(t, readFile(t, logFile))
	t.Logf("the teardown's deadline: T0 + %v, SIGTERM + %v; the SIGTERM taken %v after it was sent, the deadline that + %v",
		rep.Ublk.Deadline.Sub(t0), rep.Ublk.Deadline.Sub(sigterm), took.Sub(sigterm), rep.Ublk.Deadline.Sub(took))
	assert.True(t, rep.Ublk.Deadline.Before(took.Add(2*time.Second)),
		"the teardown ends before the SIGKILL due 2 s after the SIGTERM that came with the hook open: its deadline is SIGTERM + %v (taken + %v)",
		rep.Ublk.Deadline.Sub(sigterm), rep.Ublk.Deadline.Sub(took))
}

// sigtermTakenAt returns when the supervisor took a SIGTERM during the
// daemon's teardown after the server exited: the time of the line it logs
// then, in log. The supervisor counts SIGKILL's 2 s from then: how long
// the kernel and a loaded machine take to get the signal to it is not the
// supervisor's to count.
func sigtermTakenAt(t *testing.T, log string) time.Time {
	t.Helper()
	for line := range strings.Lines(log) {
		if !strings.Contains(line, "supervisor: SIGTERM during the daemon's teardown after the server exited") {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		require.NoError(t, err, line)
		return at
	}
	require.FailNow(t, "the supervisor logged no SIGTERM during the teardown", log)
	return time.Time{}
}

// Fault (row 1050, real processes): with -pod, a SIGTERM during the
// daemon's teardown after the server exited on its own before any
// termination (no preStop call) counted -grace from the SIGTERM, the pod's
// deletion unread: a deletion with a shorter grace left the teardown laid
// out past its SIGKILL. -grace 12 s, the pod deleted with a grace of 4 s
// and SIGTERM once the teardown has asked a daemon that ignores its SIGTERM
// to stop (the before measured with it 1 s later still):
//
//	before: the teardown's deadline SIGTERM + 9.5 s, 5.5 s past SIGKILL
//	now:    SIGTERM + 2.1 s (the deletionTimestamp's whole second, less
//	        the margin), before SIGKILL
func TestSIGTERMDuringTheTeardownWithNoPreStopFollowsThePodsDeletion(t *testing.T) {
	served, env := podAPI(t)
	n := startHungDaemonNode(t, append(env, "POD_NAME=agentenv-node-x7k2p")...)
	require.NoError(t, syscall.Kill(serverOf(t, n.sup, "stubserver"), syscall.SIGKILL), "the server dies on its own, before any termination")
	// SIGTERM into the teardown: once the daemon was asked to stop, which it ignores.
	require.Eventually(t, func() bool { return strings.Contains(readFile(t, n.logFile), "ublk: request stop") }, 10*time.Second, 10*time.Millisecond,
		"the teardown asked the daemon to stop")
	sigterm := time.Now()
	served.Pod().Delete(sigterm, 4*time.Second) // kubectl delete --grace-period=4
	n.sup.signal(t, syscall.SIGTERM)            // the kubelet's: SIGKILL due 4 s after the deletion

	rep := n.teardownOver(t)
	t.Logf("the teardown's deadline: SIGTERM + %v", rep.Ublk.Deadline.Sub(sigterm))
	assert.True(t, rep.Ublk.Deadline.Before(sigterm.Add(4*time.Second)),
		"the teardown ends before the deletion's SIGKILL: its deadline is SIGTERM + %v", rep.Ublk.Deadline.Sub(sigterm))
	assert.Contains(t, readFile(t, n.logFile), "the pod's deletion read at the SIGTERM")
}

// Fault (docs/faults.md row 1120): the daemon's teardown after the server
// exited on its own before any termination takes its reserve when it
// starts: -grace's, an hour's 30 s. A SIGTERM then, with the pod deleted
// with a grace of 30 s, moves its deadline to SIGTERM + 27 s (row 1050)
// but not its stages, laid out from 30 s in a 27 s window: the holder wait
// ends at once, and a disk held by kernel state is given up on. Real
// processes, -grace 1h, ublkb0 held by dm-0 (a stacked device: no kill
// releases it) until 1 s after the SIGTERM, on a kernel not known fixed:
//
//	0 s     the server dies; the teardown waits for dm-0 (until the hour's
//	        last-resort point)
//	SIGTERM the pod deleted with 30 s: the deadline SIGTERM + 27 s, the
//	        reserve in use 3 s
//	before: the last resort at once, dm-0 spared, the daemon not asked to
//	        stop: a *HeldError, the device live for the pod's SIGKILL
//	+1 s    dm-0 lets go: the daemon is asked to stop, its device goes
func TestTeardownAfterTheServerExitedTakesTheReserveOfAShorterDeletion(t *testing.T) {
	served, env := podAPI(t)
	n := startDaemonNode(t, fakeublk.Cooperative, []string{"-grace", "1h", "-ublk-kernel", "vulnerable=*"},
		append(env, "POD_NAME=agentenv-node-x7k2p")...)
	dm0 := filepath.Join(n.sys, "block", "ublkb0", "holders", "dm-0")
	require.NoError(t, os.MkdirAll(filepath.Dir(dm0), 0o755))
	require.NoError(t, os.WriteFile(dm0, nil, 0o644))
	require.NoError(t, syscall.Kill(serverOf(t, n.sup, "stubserver"), syscall.SIGKILL), "the server dies on its own, before any termination")
	require.Eventually(t, func() bool { return strings.Contains(readFile(t, n.logFile), "waiting for the devices' holders") }, 10*time.Second, 10*time.Millisecond,
		"the teardown waits for dm-0")
	sigterm := time.Now()
	served.Pod().Delete(sigterm, 30*time.Second) // kubectl delete --grace-period=30
	n.sup.signal(t, syscall.SIGTERM)
	letGo := make(chan time.Time, 1)
	let := time.AfterFunc(time.Second, func() { letGo <- time.Now(); _ = os.Remove(dm0) })
	defer let.Stop()

	require.Eventually(t, func() bool { return lastreporttest.Finished(n.report) }, 20*time.Second, 10*time.Millisecond, "the Report written")
	rep := readReport(t, n.report)
	require.NotNil(t, rep.Ublk)
	require.NotNil(t, rep.Daemon)
	if !rep.Daemon.Exited {
		_ = syscall.Kill(rep.Daemon.Pid, syscall.SIGKILL) // the pod's SIGKILL: the supervisor waits for the daemon with its device live
	}
	n.sup.exitCode(t, 20*time.Second)
	t.Logf("the teardown's deadline SIGTERM + %v: %s", rep.Ublk.Deadline.Sub(sigterm), rep.Ublk.String())
	assert.Nil(t, rep.Ublk.LastResort, "no last resort: dm-0 let go within the holder wait")
	req := rep.Ublk.Step("request stop")
	require.NotNil(t, req, "the daemon asked to stop")
	assert.False(t, req.Start.Before(<-letGo), "asked once dm-0 let go, at SIGTERM + %v", req.Start.Sub(sigterm))
	assert.Equal(t, ublk.VerdictStopped, rep.Ublk.Verdict)
	assert.True(t, rep.Ublk.Daemon.Exited, "the daemon exited on its own")
	assert.True(t, rep.Ublk.Deadline.Before(sigterm.Add(30*time.Second)), "the teardown ends before the deletion's SIGKILL")
}

// A daemonNode is the supervisor in front of a stub server listing two
// sandboxes it cannot pause (exit status 3), with a -daemon serving one
// fake device, ublkb0, in the sysfs tree sys; its log in logFile.
type daemonNode struct {
	sup                                *supProc
	report, logFile, listen, hook, sys string
}

// startHungDaemonNode starts a daemonNode with -grace 12s whose daemon
// ignores its SIGTERM with its device live, env added to the supervisor's
// environment, and returns once it is ready and its daemon has started.
func startHungDaemonNode(t *testing.T, env ...string) *daemonNode {
	t.Helper()
	return startDaemonNode(t, fakeublk.Hung, []string{"-grace", "12s"}, env...)
}

// startDaemonNode starts a daemonNode whose daemon acts in mode, with
// flags and env added to the supervisor's, and returns once it is ready
// and its daemon has started.
func startDaemonNode(t *testing.T, mode fakeublk.Mode, flags []string, env ...string) *daemonNode {
	t.Helper()
	dir := t.TempDir()
	n := &daemonNode{report: filepath.Join(dir, "report.json"), logFile: filepath.Join(dir, "supervisor.log"),
		listen: freeAddr(t), hook: freeAddr(t), sys: filepath.Join(dir, "sys")}
	events := filepath.Join(dir, "daemon.log")
	b, err := json.Marshal(fakeublk.DaemonConfig{
		SysRoot:  n.sys,
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}},
		Mode:     mode,
		EventLog: events,
	})
	require.NoError(t, err)
	api := freeAddr(t)
	logs, err := os.Create(n.logFile)
	require.NoError(t, err)
	t.Cleanup(func() { logs.Close() })
	n.sup = startSupervisorLogging(t, logs,
		append([]string{"-listen", n.listen, "-hook-listen", n.hook, "-server-url", "http://" + api,
			"-report", n.report, "-daemon", strings.Join(helperCommand("daemon", string(b)), " ")}, flags...),
		helperCommand("stubserver", "-listen", api, "-list", "running", "-exit", "3"),
		append([]string{EnvSysfsRoot + "=" + n.sys, EnvProcfsRoot + "=" + emptyProcfs(n.sys)}, env...)...)
	require.Eventually(t, func() bool { return get(t.Context(), "http://"+n.listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond, "readyz 200")
	daemonStarted(t, events)
	return n
}

// teardownOver waits for the supervisor's exit, SIGKILLing the hung daemon
// whose live device holds it once the Report is written (the pod's SIGKILL
// would), and returns the Report, which has the teardown's.
func (n *daemonNode) teardownOver(t *testing.T) *Report {
	t.Helper()
	killHeldDaemon(t, n.report)
	n.sup.exitCode(t, 20*time.Second)
	rep := readReport(t, n.report)
	require.NotNil(t, rep.Ublk)
	require.False(t, rep.Ublk.Deadline.IsZero())
	return rep
}
