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
// device, SIGTERM about 1 s after the server's death:
//
//	before: the teardown's deadline T0 + 10.5 s, SIGTERM + 9.2 s: 7 s past
//	        SIGKILL, the Report not written by then
//	now:    SIGTERM + 1 s (2 s less the margin), before SIGKILL
func TestSIGTERMWithThePreStopOpenDuringTheTeardownMovesItsDeadline(t *testing.T) {
	dir := t.TempDir()
	report, events := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log")
	b, err := json.Marshal(fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}},
		Mode:     fakeublk.Hung,
		EventLog: events,
	})
	require.NoError(t, err)
	listen, hook, api := freeAddr(t), freeAddr(t), freeAddr(t)
	logFile := filepath.Join(dir, "supervisor.log")
	logs, err := os.Create(logFile)
	require.NoError(t, err)
	defer logs.Close()
	sup := startSupervisorLogging(t, logs,
		[]string{"-listen", listen, "-hook-listen", hook, "-server-url", "http://" + api, "-grace", "12s",
			"-report", report, "-daemon", strings.Join(helperCommand("daemon", string(b)), " ")},
		helperCommand("stubserver", "-listen", api, "-list", "running", "-exit", "3"),
		EnvSysfsRoot+"="+filepath.Join(dir, "sys"), EnvProcfsRoot+"="+emptyProcfs(filepath.Join(dir, "sys")))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond, "readyz 200")
	daemonStarted(t, events)

	t0 := time.Now()
	hookDone := make(chan int, 1)
	go func() { hookDone <- get(ctx, "http://"+hook+"/drain") }() // waits: 2 sandboxes run
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 503 }, 10*time.Second, 10*time.Millisecond,
		"the preStop wait began: readiness 503")
	require.NoError(t, syscall.Kill(serverOf(t, sup, "stubserver"), syscall.SIGKILL), "the server dies on its own")
	require.Eventually(t, func() bool { return strings.Contains(readFile(t, logFile), "ublk: request stop") }, 10*time.Second, 10*time.Millisecond,
		"the teardown asked the daemon to stop")
	time.Sleep(time.Second) // the kubelet's grace runs out a while into the teardown
	select {
	case code := <-hookDone:
		require.Failf(t, "the preStop wait ended", "status %d", code)
	default:
	}
	sigterm := time.Now()
	sup.signal(t, syscall.SIGTERM) // the kubelet gave up on the hook: SIGKILL due at sigterm + 2 s

	killHeldDaemon(t, report) // the hung daemon with its live device holds the supervisor's exit
	sup.exitCode(t, 20*time.Second)
	rep := readReport(t, report)
	require.NotNil(t, rep.Ublk)
	require.False(t, rep.Ublk.Deadline.IsZero())
	t.Logf("the teardown's deadline: T0 + %v, SIGTERM + %v", rep.Ublk.Deadline.Sub(t0), rep.Ublk.Deadline.Sub(sigterm))
	assert.True(t, rep.Ublk.Deadline.Before(sigterm.Add(2*time.Second)),
		"the teardown ends before the SIGKILL due 2 s after the SIGTERM that came with the hook open: its deadline is SIGTERM + %v",
		rep.Ublk.Deadline.Sub(sigterm))
}
