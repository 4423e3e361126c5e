//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// Fault: the server's list call fails (an HTML page, a 500, a hang) for the
// whole termination. The server exits 0 on SIGTERM, yet the supervisor
// must not: nothing was known to be preserved. It exits 1, and the Report
// and the log say the sandboxes are unknown, with the last error.
func TestFailedListingMakesTheSupervisorExitNonZero(t *testing.T) {
	for _, mode := range []string{"html", "500", "hang"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			report := filepath.Join(dir, "report.json")
			listen, api := freeAddr(t), freeAddr(t)
			sup := startSupervisor(t,
				[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "5s", "-report", report},
				helperCommand("stubserver", "-listen", api, "-list", mode, "-exit", "0"))
			ctx := t.Context()
			require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/healthz") == 200 }, 10*time.Second, 20*time.Millisecond)
			require.Eventually(t, func() bool { return get(ctx, "http://"+api+"/healthz") != 0 }, 10*time.Second, 20*time.Millisecond)
			sup.signal(t, syscall.SIGTERM)
			code := sup.exitCode(t, 15*time.Second)
			rep := readReport(t, report)
			assert.Equal(t, code, rep.ExitCode)
			if mode == "hang" {
				// A listing that hangs to the budget's deadline may leave the
				// server step no time (item 2 of issue 18): SIGKILLed, 137.
				assert.NotZero(t, code)
			} else {
				assert.Equal(t, 1, code)
				assert.Equal(t, 0, rep.Server.Code, "the server itself exited 0")
			}
			require.NotNil(t, rep.Drain)
			require.NotNil(t, rep.Drain.Preserve)
			assert.True(t, rep.Drain.Preserve.Unknown)
			assert.NotEmpty(t, rep.Drain.Preserve.ListErr)
			assert.Contains(t, rep.Note, "unknown")
		})
	}
}

// Fault: the final sweep's listing fails (the server's list answers 500
// after the preserve phase). The log said, at ERROR, that a sandbox resumed
// since the preserve phase is not known, and the Report and the
// termination message said nothing: they read as a clean drain. They now
// say it too, and the exit status is 1 at least (row 660: it stayed the
// server's, every sandbox listed being preserved, though one resumed since
// is not known preserved).
func TestFinalSweepThatCannotListIsInTheReport(t *testing.T) {
	// Two listings answer: drain's count at SIGTERM and the preserve
	// phase's; the final sweep's gets 500s.
	n := startStubNode(t, "5s", "-list", "500", "-list-ok", "2", "-exit", "0")
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+n.listen+"/healthz") == 200 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return get(ctx, "http://"+n.api+"/healthz") != 0 }, 10*time.Second, 20*time.Millisecond)
	n.sup.signal(t, syscall.SIGTERM)
	code := n.sup.exitCode(t, 15*time.Second)
	rep := readReport(t, n.report)
	assert.Equal(t, 1, code, "a sandbox resumed since the preserve phase is not known: no clean exit")
	assert.Equal(t, code, rep.ExitCode)
	require.NotNil(t, rep.Drain)
	require.NotNil(t, rep.Drain.Preserve)
	assert.False(t, rep.Drain.Preserve.Unknown, "the preserve phase listed")
	assert.Equal(t, "exited 0", rep.Server.String(), "the server itself exited 0")
	assert.Contains(t, rep.Note, "final sweep")
	assert.Contains(t, rep.Note, "500")
	assert.Contains(t, readFile(t, n.termLog), "final sweep", "the termination message says it")
}

// A -report whose directory does not exist fails at start, naming the
// flag, instead of at exit with status 0: exit 1, the machine's refusal,
// not bad usage (row 1170).
func TestReportToMissingDirectoryFailsAtStart(t *testing.T) {
	var stderr bytes.Buffer
	code := Main(t.Context(), []string{"-report", filepath.Join(t.TempDir(), "missing", "r.json"), "--", "true"}, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "-report")
}

// A -report that names a directory (a trailing slash, or an existing
// directory) fails at start, naming the flag: at exit the Report could not
// be renamed over it and would be lost, with the supervisor's exit status
// unchanged.
func TestReportThatIsADirectoryFailsAtStart(t *testing.T) {
	dir := t.TempDir()
	for _, report := range []string{dir, dir + "/"} {
		var stderr bytes.Buffer
		code := Main(t.Context(), []string{"-hook-listen", freeAddr(t), "-listen", freeAddr(t), "-report", report, "--", "true"}, &stderr)
		assert.Equal(t, 2, code, "-report %s", report)
		assert.Contains(t, stderr.String(), "-report", "-report %s", report)
		assert.Contains(t, stderr.String(), "directory", "-report %s", report)
	}
}

// Fault: the Report could not be written at exit (a full disk, its volume
// gone): the supervisor logged it at ERROR and exited 0, the server's
// status, and the termination message, written before the attempt, said
// "full report: PATH", where the previous shutdown's Report was, or none.
// It now exits 1, as sandboxd and gvisor-worker do, and the termination
// message says the full report could not be written, and why. Here the
// Report's directory is replaced by a regular file after the start, which
// no one, root included, can create a file in.
func TestReportThatCannotBeWrittenMakesTheSupervisorExitNonZero(t *testing.T) {
	dir := t.TempDir()
	reports := filepath.Join(dir, "reports")
	require.NoError(t, os.Mkdir(reports, 0o755))
	report, termLog := filepath.Join(reports, "report.json"), filepath.Join(dir, "termination-log")
	var log bytes.Buffer
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisorLogging(t, &log,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "5s", "-report", report, "-termination-log", termLog},
		helperCommand("stubserver", "-listen", api, "-exit", "0"))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/healthz") == 200 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return get(ctx, "http://"+api+"/healthz") != 0 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, os.RemoveAll(reports))             // with the lock file of -report the supervisor holds
	require.NoError(t, os.WriteFile(reports, nil, 0o644)) // the Report's directory is no directory now

	sup.signal(t, syscall.SIGTERM)
	code := sup.exitCode(t, 15*time.Second)
	assert.Equal(t, 1, code, "the Report is lost: not a clean exit")
	assert.Contains(t, log.String(), "writing the report")
	msg := readFile(t, termLog)
	assert.Contains(t, msg, "the full report could not be written: ")
	assert.Contains(t, msg, "not a directory")
	assert.NotContains(t, msg, "full report: "+report)
	assert.Contains(t, msg, "supervisor exit code 1")
}

// SIGHUP and SIGQUIT never reach the server: a server with the default
// disposition dies of either, taking its sandboxes with it. The supervisor
// logs them and goes on; SIGQUIT dumps its goroutines to stderr.
func TestHangupAndQuitAreNotForwardedToTheServer(t *testing.T) {
	dir := t.TempDir()
	signals := filepath.Join(dir, "signals")
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "10s"},
		helperCommand("stubserver", "-listen", api, "-signals", signals, "-exit", "0"))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return get(ctx, "http://"+api+"/sandboxes") == 200 }, 10*time.Second, 20*time.Millisecond)
	sup.signal(t, syscall.SIGHUP)
	sup.signal(t, syscall.SIGQUIT)
	sup.signal(t, syscall.SIGUSR1) // still forwarded: it comes after the two above
	require.Eventually(t, func() bool { b, _ := os.ReadFile(signals); return len(b) > 0 }, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, 200, get(ctx, "http://"+listen+"/healthz"), "the supervisor is alive")
	b, _ := os.ReadFile(signals)
	assert.Equal(t, "user defined signal 1\n", string(b), "only SIGUSR1 reached the server")
	sup.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, sup.exitCode(t, 10*time.Second))
}

// Fault: a grandchild of the server (an orphan re-parented to the
// supervisor) outlives the supervisor when it is not PID 1. At exit the
// supervisor kills and reaps its whole remaining tree.
func TestOrphansStillRunningAtExitAreKilled(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "never") // never written: the orphans run until killed
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "10s"},
		helperCommand("stubserver", "-listen", api, "-orphans", "2", "-release", release))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond)
	var orphans []int
	for _, p := range childrenOf(sup.pid()) {
		pid, _ := strconv.Atoi(p)
		if b, _ := os.ReadFile("/proc/" + p + "/cmdline"); strings.Contains(string(b), "helper:waitfile") {
			orphans = append(orphans, pid)
		}
	}
	require.Len(t, orphans, 2, "two orphans re-parented to the supervisor")
	sup.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, sup.exitCode(t, 10*time.Second))
	for _, pid := range orphans {
		_, err := os.Stat("/proc/" + strconv.Itoa(pid))
		assert.True(t, os.IsNotExist(err), "orphan %d outlived the supervisor", pid)
	}
}

// Who may start a drain (issue 18, item 14): the -listen port (probes, on
// every interface) does not serve the hook; the hook's own port refuses a
// request without the secret or with a wrong one, 403, logged, readiness
// untouched; the secret's holder drains. A hook beyond loopback without a
// secret is refused at start.
func TestOnlyTheHookSecretStartsADrainThroughTheSupervisor(t *testing.T) {
	listen, hook, api := freeAddr(t), freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-hook-listen", hook, "-server-url", "http://" + api, "-grace", "10s"},
		helperCommand("stubserver", "-listen", api, "-exit", "0"), EnvHookSecret+"=kubelet-only")
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, 404, get(ctx, "http://"+listen+"/drain"), "the probe port does not serve the hook")
	assert.Equal(t, 403, get(ctx, "http://"+hook+"/drain"), "no secret")
	assert.Equal(t, 403, getWith(ctx, "http://"+hook+"/drain", "guess"), "wrong secret")
	assert.Equal(t, 200, get(ctx, "http://"+listen+"/readyz"), "a refused request does not drain")
	assert.Equal(t, 200, getWith(ctx, "http://"+hook+"/drain?wait=1ms", "kubelet-only"))
	assert.Equal(t, 503, get(ctx, "http://"+listen+"/readyz"), "the secret's holder drained the node")
	sup.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, sup.exitCode(t, 10*time.Second))

	var stderr bytes.Buffer
	assert.Equal(t, 2, Main(t.Context(), []string{"-hook-listen", "0.0.0.0:0", "--", "true"}, &stderr))
	assert.Contains(t, stderr.String(), EnvHookSecret)
}

// Fault: the server dies on its own after the preStop hook fixed T0 (a
// crash during an hour's preStop wait). The kubelet's SIGKILL is still due
// at T0 + grace, so the daemon's teardown must end before it: a daemon
// that does not stop (here one that ignores its SIGTERM, with live devices
// on a kernel not known fixed) is given until the budget's deadline, not a
// whole grace from the server's death, which would leave the last resort
// and the daemon's stop to happen after SIGKILL.
func TestServerDyingAfterThePreStopStopsTheDaemonBeforeSIGKILL(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	events := filepath.Join(dir, "daemon.log")
	b, err := json.Marshal(fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}},
		Mode:     fakeublk.Hung,
		EventLog: events,
	})
	require.NoError(t, err)
	const grace = 6 * time.Second
	listen, hook, api := freeAddr(t), freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-hook-listen", hook, "-server-url", "http://" + api, "-grace", grace.String(),
			"-report", report, "-daemon", strings.Join(helperCommand("daemon", string(b)), " ")},
		helperCommand("stubserver", "-listen", api, "-exit", "3"),
		EnvSysfsRoot+"="+filepath.Join(dir, "sys"), EnvProcfsRoot+"="+emptyProcfs(filepath.Join(dir, "sys")))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond, "readyz 200")

	require.Equal(t, 200, get(ctx, "http://"+hook+"/drain"), "the preStop hook: no sandbox runs, it returns at once")
	t0 := time.Now() // T0 is before this: SIGKILL is due by t0 + grace
	server := serverOf(t, sup, "stubserver")
	daemonStarted(t, events)                                  // its device made: else the teardown has nothing to wait for
	require.NoError(t, syscall.Kill(server, syscall.SIGTERM)) // not the supervisor's doing: it dies "on its own"

	killHeldDaemon(t, report) // the hung daemon with its live device holds the supervisor's exit
	assert.Equal(t, 3, sup.exitCode(t, 2*grace), "the server's status")
	rep := readReport(t, report)
	require.NotNil(t, rep.Ublk)
	assert.Len(t, rep.Ublk.Devices, 1, "the daemon's device, left live")
	require.False(t, rep.Ublk.Deadline.IsZero())
	t.Logf("the daemon's teardown deadline: T0 + %v at most", rep.Ublk.Deadline.Sub(t0))
	assert.True(t, rep.Ublk.Deadline.Before(t0.Add(grace)),
		"the daemon's teardown ends by the budget's deadline, %v after T0, not after SIGKILL (its deadline is %v after T0 at most)",
		rep.Ublk.Deadline.Sub(t0), grace)
}

// Fault: the device daemon crashes in the middle of its teardown, leaving
// a device registered (on a vulnerable kernel, the host-crash path). The
// Report's daemon step said failed, the log said it at ERROR, and the
// supervisor exited 0, the server's status: the pod's last state read
// "Completed". It now exits 1 when a step after the preserve phase failed,
// as drain.Server.Run does (Report.Err), and the note names the step.
func TestDaemonStepFailureMakesTheSupervisorExitNonZero(t *testing.T) {
	dir := t.TempDir()
	report, events := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log")
	cfg := fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}, {ID: 1, Major: 4000, Minor: 1}},
		EventLog: events,
		Mode:     fakeublk.Crash, // removes one device, then dies
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "5s", "-report", report,
			"-daemon", strings.Join(helperCommand("daemon", string(b)), " ")},
		helperCommand("stubserver", "-listen", api, "-exit", "0"), EnvSysfsRoot+"="+cfg.SysRoot, EnvProcfsRoot+"="+emptyProcfs(cfg.SysRoot))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { b, _ := os.ReadFile(events); return strings.Contains(string(b), "start") }, 10*time.Second, 20*time.Millisecond)
	sup.signal(t, syscall.SIGTERM)
	code := sup.exitCode(t, 15*time.Second)
	rep := readReport(t, report)
	assert.Contains(t, readFile(t, events), "crash")
	require.NotNil(t, rep.Drain)
	daemon := rep.Drain.Phase(StepDaemon)
	require.NotNil(t, daemon)
	require.Equal(t, drain.Failed, daemon.Result, daemon.Error)
	assert.Equal(t, 0, rep.Server.Code, "the server itself exited 0")
	assert.Zero(t, rep.Drain.Lost())
	assert.Equal(t, 1, code, "a failed teardown is not a clean exit")
	assert.Equal(t, code, rep.ExitCode)
	assert.Contains(t, rep.Note, "daemon")
}

// Fault: the server exits 0 on its own before any termination, and the
// daemon step that follows fails: the device daemon ignores its stop, and
// on a kernel not known fixed it is never killed with its device live (the
// host-crash risk, left for the operator). The failure was logged at ERROR
// only: the supervisor exited 0, the server's status, and the Report's note
// and the termination message said only that the server exited on its
// own. It now counts as the same failure during a drain does: exit 1, and
// the note and the termination message say the daemon step timed out
// with the device live, as a drain's Report would.
func TestDaemonStepFailureAfterTheServerExitsOnItsOwnMakesTheSupervisorExitNonZero(t *testing.T) {
	dir := t.TempDir()
	report, events, termLog := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log"), filepath.Join(dir, "termination-log")
	cfg := fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}},
		EventLog: events,
		Mode:     fakeublk.Hung, // ignores SIGTERM
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "4s", "-report", report, "-termination-log", termLog,
			"-ublk-kernel", "vulnerable=*", "-daemon", strings.Join(helperCommand("daemon", string(b)), " ")},
		helperCommand("stubserver", "-listen", api, "-die-when", filepath.Join(dir, "die"), "-exit", "0"),
		EnvSysfsRoot+"="+cfg.SysRoot, EnvProcfsRoot+"="+emptyProcfs(cfg.SysRoot))
	daemonStarted(t, events)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "die"), nil, 0o644))

	killHeldDaemon(t, report) // the hung daemon with its live device holds the supervisor's exit
	code := sup.exitCode(t, 15*time.Second)
	rep := readReport(t, report)
	assert.Equal(t, 0, rep.Server.Code, "the server itself exited 0")
	assert.Nil(t, rep.Drain)
	require.NotNil(t, rep.Ublk)
	assert.Equal(t, ublk.VerdictLeftLive, rep.Ublk.Verdict, "the device left live, the daemon not killed")
	assert.Equal(t, 1, code, "a failed teardown is not a clean exit")
	assert.Equal(t, code, rep.ExitCode)
	assert.Contains(t, rep.Note, "exited on its own")
	assert.Contains(t, rep.Note, "daemon step timed_out: ublk: 1 device(s) still live")
	msg := readFile(t, termLog)
	assert.Contains(t, msg, "daemon step timed_out: ublk: 1 device(s) still live")
	assert.Contains(t, msg, "daemon left running")
	assert.Contains(t, msg, "supervisor exit code 1")
	assert.Contains(t, msg, "\nublk teardown: left_live, 1 device", "the teardown's own line, as a drain's step has (row 2520)")
}

// Fault: the server crashes during the drain, after the preStop hook fixed
// T0 and before SIGTERM, with its 4 sandboxes running (the hook was
// waiting for them). The Report said "the server exited on its own before
// termination" and counted nothing lost: the 4 sandboxes were in no
// account. The ones its last listing showed are now lost with it, in the
// Report (lost_with_server), its note, the log and the exit status.
func TestSandboxesOfAServerThatExitsDuringTheDrainAreLost(t *testing.T) {
	dir := t.TempDir()
	report, logFile := filepath.Join(dir, "report.json"), filepath.Join(dir, "supervisor.log")
	termLog := filepath.Join(dir, "termination-log")
	listen, hook, api := freeAddr(t), freeAddr(t), freeAddr(t)
	logs, err := os.Create(logFile)
	require.NoError(t, err)
	defer logs.Close()
	sup := startSupervisorLogging(t, logs,
		[]string{"-api", "agentenv", "-listen", listen, "-hook-listen", hook, "-server-url", "http://" + api, "-grace", "10s", "-report", report,
			"-termination-log", termLog},
		helperCommand("agentenv", "-listen", api, "-sandboxes", "4"))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond)
	hooked := make(chan int, 1)
	go func() { hooked <- get(ctx, "http://"+hook+"/drain") }() // waits: 4 sandboxes run
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 503 }, 5*time.Second, 20*time.Millisecond, "draining")
	require.NoError(t, syscall.Kill(serverOf(t, sup, "helper:agentenv"), syscall.SIGKILL)) // a crash

	code := sup.exitCode(t, 10*time.Second)
	<-hooked
	rep := readReport(t, report)
	assert.NotZero(t, code)
	assert.Equal(t, code, rep.ExitCode)
	assert.Nil(t, rep.Drain, "no SIGTERM came: no drain report")
	assert.Len(t, rep.LostWithServer, 4, "the 4 sandboxes it last listed are lost with it")
	assert.Equal(t, 4, rep.Lost())
	assert.Contains(t, rep.Note, "during the drain")
	assert.Contains(t, rep.Note, "4 sandbox(es)")
	log := readFile(t, logFile)
	assert.Contains(t, log, `level=ERROR msg="supervisor: the server exited on its own during the drain (killed by signal killed): 4 sandbox(es)`)
	assert.Regexp(t, `msg="supervisor: report" exit_code=\d+ .* lost=4`, log)
	first, _, _ := strings.Cut(readFile(t, termLog), "\n")
	assert.True(t, strings.HasPrefix(first, "drainkit: 4 sandboxes LOST with the server"), first)
}

// Fault: the server exits 0 on its own before any termination, with the
// two sandboxes the supervisor's last listing (a readiness probe's) showed
// running: they went with it. The Report counted nothing lost and the
// supervisor exited 0, the server's status: the pod's last state read
// Completed, "no drain ran". They are now lost with the server, as during
// a drain: in the Report (lost_with_server), its note, the termination
// message's first line and the exit status, 1.
func TestSandboxesOfAServerThatExitsBeforeTerminationAreLost(t *testing.T) {
	die := filepath.Join(t.TempDir(), "die")
	n := startStubNode(t, "4s", "-list", "running", "-die-when", die, "-exit", "0")
	require.Eventually(t, func() bool { return get(t.Context(), "http://"+n.listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond,
		"readyz 200: the supervisor listed the two running sandboxes")
	require.NoError(t, os.WriteFile(die, nil, 0o644))

	code := n.sup.exitCode(t, 10*time.Second)
	rep := readReport(t, n.report)
	assert.Equal(t, 0, rep.Server.Code, "the server itself exited 0")
	assert.Equal(t, 1, code, "sandboxes were lost: not a clean exit")
	assert.Equal(t, code, rep.ExitCode)
	assert.Nil(t, rep.Drain, "no termination: no drain report")
	assert.Equal(t, []string{"sb-1", "sb-2"}, rep.LostWithServer)
	assert.Equal(t, 2, rep.Lost())
	assert.Contains(t, rep.Note, "the server exited on its own before termination (exited 0): 2 sandbox(es)")
	assert.Equal(t, 1, strings.Count(rep.Note, "the server exited on its own"), "said once: %s", rep.Note)
	first, _, _ := strings.Cut(readFile(t, n.termLog), "\n")
	assert.Equal(t, "drainkit: 2 sandboxes LOST with the server, which exited on its own before termination (no drain ran)", first)
}

// The same, on a pod the supervisor knows: the loss is an Event on the pod
// (SandboxesLost, a Warning), as a drain's losses are. Before, no Event: a
// drain that never started posts none, and `kubectl describe pod` said
// nothing of the two sandboxes.
func TestServerThatExitsBeforeTerminationPostsSandboxesLost(t *testing.T) {
	served, env := podAPI(t)
	api := served.Pod()
	die := filepath.Join(t.TempDir(), "die")
	listen, server := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + server, "-grace", "4s", "-report", filepath.Join(t.TempDir(), "report.json")},
		helperCommand("stubserver", "-listen", server, "-list", "running", "-die-when", die, "-exit", "0"),
		append(env, "POD_NAME=agentenv-node-x7k2p")...)
	require.Eventually(t, func() bool { return get(t.Context(), "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, os.WriteFile(die, nil, 0o644))

	assert.Equal(t, 1, sup.exitCode(t, 10*time.Second))
	var lost []string
	for _, ev := range api.Events() {
		if ev.Reason == "SandboxesLost" {
			lost = append(lost, ev.Type+": "+ev.Note)
		}
	}
	require.Len(t, lost, 1, "%v", api.Reasons())
	assert.Contains(t, lost[0], "Warning: the server exited on its own before termination (exited 0), no drain ran: 2 sandboxes lost with it; supervisor exit code 1")
}

// Fault: a SIGTERM during the termination forced it, as a SIGINT does. Only
// the container runtime sends a pod's process SIGTERM, and a runtime that
// re-signals on a shortened grace sends it again (drain's row 187): no
// one asked for force, and force sends no new pause. Eight sandboxes paused
// one at a time, 400 ms each, SIGTERM again as the first pause runs: all
// eight paused (before: force mode, the ones not yet sent lost, exit 1); a
// SIGINT then still forces.
func TestSIGTERMAgainDoesNotForceTheSupervisor(t *testing.T) {
	for name, second := range map[string]syscall.Signal{"SIGTERM again": syscall.SIGTERM, "SIGINT": syscall.SIGINT} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			report, logFile := filepath.Join(dir, "report.json"), filepath.Join(dir, "supervisor.log")
			listen, api := freeAddr(t), freeAddr(t)
			logs, err := os.Create(logFile)
			require.NoError(t, err)
			defer logs.Close()
			sup := startSupervisorLogging(t, logs,
				[]string{"-api", "agentenv", "-listen", listen, "-server-url", "http://" + api, "-grace", "60s", "-concurrency", "1", "-report", report},
				helperCommand("agentenv", "-listen", api, "-sandboxes", "8", "-pause-base", "400ms", "-pause-per-gib", "0s"))
			ctx := t.Context()
			require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond)
			sup.signal(t, syscall.SIGTERM)
			require.Eventually(t, func() bool { return strings.Contains(readFile(t, logFile), "pause: pass started") }, 10*time.Second, 20*time.Millisecond)
			sup.signal(t, second)

			code := sup.exitCode(t, 30*time.Second)
			rep := readReport(t, report)
			require.NotNil(t, rep.Drain)
			if second == syscall.SIGTERM {
				assert.Equal(t, 0, code, readFile(t, logFile))
				assert.False(t, rep.Drain.Forced)
				assert.Equal(t, 8, rep.Drain.Preserve.Counts[pause.Preserved])
				assert.Contains(t, readFile(t, logFile), "drain: SIGTERM during the shutdown: not forcing")
				assert.Equal(t, "SIGTERM", rep.Drain.Cause)
				assert.Equal(t, []string{"SIGTERM", "SIGTERM"}, signalNames(rep.Drain.Signals))
				return
			}
			assert.NotZero(t, code)
			assert.True(t, rep.Drain.Forced)
			assert.Equal(t, []string{"SIGTERM", "SIGINT"}, signalNames(rep.Drain.Signals), "the Report says which signal forced it")
			assert.Less(t, rep.Drain.Preserve.Counts[pause.Preserved], 8, "force sends no new pause")
		})
	}
}

// signalNames are the names of the signals a Report received, in order.
func signalNames(sigs []drain.ReceivedSignal) []string {
	var names []string
	for _, s := range sigs {
		names = append(names, s.Name)
	}
	return names
}

// Fault: the supervisor's own exit killed its device daemon with a live
// device. The daemon child is started with Pdeathsig SIGKILL (and as PID 1
// the kernel kills the whole namespace at its exit), so when the daemon
// step ended with the daemon left running on a kernel not known fixed
// (UnsafeError: "daemon left running, unsafe to kill"), the supervisor
// wrote that Report, exited, and the kernel SIGKILLed the daemon with its
// device live at once: the host-crash path, by the supervisor's own hand,
// and with no SIGKILL due at all when the server had exited on its own.
// Here a slow daemon (2.5 s per stop and per delete) needs 5 s where the
// step's window is 2.5 s: before, the supervisor exited at the window's
// end and the daemon never logged its "exit" (killed between its stop and
// its delete); now the supervisor does not exit until the daemon has
// exited, and says at ERROR that it waits.
func TestSupervisorDoesNotExitWhileItsDaemonServesALiveDevice(t *testing.T) {
	dir := t.TempDir()
	report, events, logFile := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log"), filepath.Join(dir, "supervisor.log")
	cfg := fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}},
		EventLog: events,
		Mode:     fakeublk.Slow,
		Step:     2500 * time.Millisecond,
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	logs, err := os.Create(logFile)
	require.NoError(t, err)
	defer logs.Close()
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisorLogging(t, logs,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "4s", "-report", report,
			"-ublk-kernel", "vulnerable=*", "-daemon", strings.Join(helperCommand("daemon", string(b)), " ")},
		helperCommand("stubserver", "-listen", api, "-die-when", filepath.Join(dir, "die"), "-exit", "0"),
		EnvSysfsRoot+"="+cfg.SysRoot, EnvProcfsRoot+"="+emptyProcfs(cfg.SysRoot))
	daemonStarted(t, events)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "die"), nil, 0o644))

	code := sup.exitCode(t, 20*time.Second)
	got := readFile(t, events)
	assert.Contains(t, got, "delete 0", "the daemon deleted its device")
	assert.Contains(t, got, "exit", "the daemon exited on its own, not killed by the supervisor's exit")
	rep := readReport(t, report)
	require.NotNil(t, rep.Ublk)
	assert.Equal(t, ublk.VerdictLeftLive, rep.Ublk.Verdict, "the step's window ended with the device live")
	assert.Equal(t, 1, code, "the step failed all the same")
	assert.Contains(t, readFile(t, logFile), "not exiting while the device daemon serves")
}

// Fault: the daemon step does not kill its daemon while it cannot read
// sysfs to tell whether the daemon still serves a disk the step does not
// have (row 492): the pod's SIGKILL ends it anyway, and a daemon serving
// a live disk may still stop it in the time left. But the supervisor then
// exited at once, its step having left no device of its own live, and its
// exit killed the daemon (Pdeathsig) at the very moment the step had
// refused to, the disk it might serve maybe live. Here the daemon deletes
// its one device and stays up, as one serving another disk does, and
// sysfs's block/ cannot be listed from then on: before, the supervisor
// exited once the Report was written and the daemon died with it; now it
// waits for the daemon's exit, said at ERROR, as for a device left live.
//
//	0 s      the server exits on its own: the drain, then the daemon step
//	+0.6 s   the daemon has deleted ublkb0 and stays up; block/ unlistable
//	window   the step's end: the daemon left running, cannot tell
//	         the Report written; the supervisor waits for the daemon
//	         the pod's SIGKILL (here the test's) ends the daemon, then the wait
func TestSupervisorDoesNotExitWhileItsDaemonMayServeADiskTheStepCannotSee(t *testing.T) {
	dir := t.TempDir()
	report, events, logFile := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log"), filepath.Join(dir, "supervisor.log")
	cfg := fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}},
		EventLog: events,
		Step:     300 * time.Millisecond,
		Linger:   true,
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	logs, err := os.Create(logFile)
	require.NoError(t, err)
	defer logs.Close()
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisorLogging(t, logs,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "4s", "-report", report,
			"-ublk-kernel", "vulnerable=*", "-daemon", strings.Join(helperCommand("daemon", string(b)), " ")},
		helperCommand("stubserver", "-listen", api, "-die-when", filepath.Join(dir, "die"), "-exit", "0"),
		EnvSysfsRoot+"="+cfg.SysRoot, EnvProcfsRoot+"="+emptyProcfs(cfg.SysRoot))
	daemonStarted(t, events)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "die"), nil, 0o644))

	require.Eventually(t, func() bool { return strings.Contains(readFile(t, events), "linger") }, 20*time.Second, 10*time.Millisecond,
		"the daemon deleted its device and stays up")
	// block/ cannot be read once the step has seen ublkb0 gone (the
	// Report's verdict below says so).
	require.Eventually(t, func() bool { return strings.Contains(readFile(t, logFile), "ublk: a device is gone from sysfs") }, 20*time.Second, 10*time.Millisecond,
		"the step saw ublkb0 gone")
	block := filepath.Join(cfg.SysRoot, "block")
	require.NoError(t, os.Rename(block, block+".aside")) // EMFILE or ENOMEM in the supervisor, for the rest of its life
	require.NoError(t, os.WriteFile(block, nil, 0o644))

	// The supervisor writes the Report, then says it holds its exit: the
	// daemon is killed (as the pod's SIGKILL would) only once it has said
	// so, or the kill could land between the two and the line never come.
	require.Eventually(t, func() bool {
		return strings.Contains(readFile(t, logFile), "not exiting while the device daemon may serve")
	}, 20*time.Second, 10*time.Millisecond, "the supervisor holds its exit for the daemon")
	killHeldDaemon(t, report) // fails if the supervisor's exit killed it already
	code := sup.exitCode(t, 20*time.Second)
	rep := readReport(t, report)
	require.NotNil(t, rep.Ublk)
	require.Equal(t, ublk.VerdictStopped, rep.Ublk.Verdict, "the step saw ublkb0 go before block/ could not be read")
	assert.True(t, rep.Ublk.Daemon.LeftRunning, "the step did not kill the daemon")
	assert.Contains(t, rep.Ublk.Daemon.CannotTell, "not a directory")
	assert.Equal(t, 1, code, "the daemon was left running")
}

// Fault: as PID 1 of the pod's PID namespace (the AgentENV overlay runs it
// as the container's command), the supervisor's exit ends the namespace,
// and the kernel SIGKILLs every process in it: the server's own ublk
// daemon (-daemon-socket) too. A daemon step that left that daemon running
// with a live device on a kernel not known fixed was followed by the
// supervisor's exit, which killed it with the device live. Here AgentENV
// leaves its slow daemon (2.5 s per stop and per delete) to the
// supervisor, whose daemon step has 2.5 s: before, the daemon was killed
// after its stop and before its delete; now PID 1 waits for its exit.
func TestSupervisorAsPID1DoesNotExitWhileTheServersDaemonServesALiveDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "a new PID namespace needs root (run the tests as root)")
	}
	dir := t.TempDir()
	report, events, sock := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log"), filepath.Join(dir, "ublkd.sock")
	cfg := fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}},
		Socket:   sock,
		EventLog: events,
		Mode:     fakeublk.Slow,
		Step:     2500 * time.Millisecond,
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NotContains(t, string(b), " ", "-daemon is split on spaces")
	listen, api := freeAddr(t), freeAddr(t)
	argv := append(helperCommand("supervisor", "-api", "agentenv", "-listen", listen, "-hook-listen", freeAddr(t),
		"-server-url", "http://"+api, "-grace", "4s", "-report", report, "-ublk-kernel", "vulnerable=*",
		"-daemon-socket", sock, "--"),
		helperCommand("agentenv", "-listen", api, "-state", filepath.Join(dir, "state"),
			"-daemon", strings.Join(helperCommand("daemon", string(b)), " "), "-daemon-socket", sock, "-stop-daemon", "leave")...)
	cmd := withSysfs(helperCmd(argv), cfg.SysRoot)
	cmd.Env = append(cmd.Env, pid1test.ProcEnv+"=1")
	var stderr logbuf.Buffer
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	p := pid1test.StartPID1(t, cmd)
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "found the server's daemon by its socket") },
		10*time.Second, 20*time.Millisecond, "the supervisor found the server's daemon")

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, to PID 1")
	_ = p.Wait(t, 30*time.Second, "PID 1 did not exit: %s", &stderr)
	got := readFile(t, events)
	assert.Contains(t, got, "delete 0", "the daemon deleted its device")
	assert.Contains(t, got, "exit", "the daemon exited on its own, not killed with PID 1's namespace")
	rep := readReport(t, report)
	require.NotNil(t, rep.Drain)
	assert.Equal(t, 1, rep.ExitCode, "the daemon step failed all the same")
	assert.Contains(t, stderr.String(), "not exiting while the device daemon serves")
}

// Fault: the Report named every child that had exited by PID -1. A
// child's state read its *os.Process's Pid, which Release (called at the
// reap) sets to -1, and read it unsynchronised with the reaper (a data
// race the race detector reports, as serverPid's read did). The PIDs the
// supervisor started are now what the Report gives, read race-free.
func TestReportNamesTheChildrenByTheirPIDsAfterTheyExit(t *testing.T) {
	dir := t.TempDir()
	report, events := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log")
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "5s", "-report", report,
			"-daemon", strings.Join(daemonCommand(t, dir, events), " ")},
		helperCommand("stubserver", "-listen", api, "-exit", "0"),
		EnvSysfsRoot+"="+filepath.Join(dir, "sys"), EnvProcfsRoot+"="+emptyProcfs(filepath.Join(dir, "sys")))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond)
	daemonStarted(t, events)
	var server, daemon int
	for _, pid := range childrenOf(sup.pid()) {
		n, _ := strconv.Atoi(pid)
		switch cmd := readFile(t, "/proc/"+pid+"/cmdline"); {
		case strings.Contains(cmd, "stubserver"):
			server = n
		case strings.Contains(cmd, "helper:daemon"):
			daemon = n
		}
	}
	require.NotZero(t, server)
	require.NotZero(t, daemon)
	sup.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, sup.exitCode(t, 15*time.Second))
	rep := readReport(t, report)
	assert.True(t, rep.Server.Exited)
	assert.Equal(t, server, rep.Server.Pid, "the server's PID")
	require.NotNil(t, rep.Daemon)
	assert.True(t, rep.Daemon.Exited)
	assert.Equal(t, daemon, rep.Daemon.Pid, "the daemon's PID")
}
