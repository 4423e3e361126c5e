//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/supervisor/internal/naiveserver"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// The proof, scaled down from AgentENV's 3600 s: a grace period of 6 s, 10
// sandboxes that never finish on their own, 500 ms per pause.
//
//	without the supervisor (the naive server is the container's process):
//	  0s   preStop GET /prestop ........ waits for sandboxes to finish: never
//	  6s   kubelet gives up on the hook; SIGTERM, SIGKILL due in 2 s (floor)
//	  6s   naive SIGTERM handler pauses one at a time: 500 ms each
//	  8s   SIGKILL: the sandboxes not reached are lost, the daemon is killed
//
//	with the supervisor in front of the same, unmodified server:
//	  0s   preStop GET /drain .......... waits while sandboxes run, until the
//	                                      drain deadline leaves room for the rest
//	 ~2s   SIGTERM: 10 pauses through the server's API, 8 at a time: ~1 s
//	 ~3s   SIGTERM to the server (nothing left to pause: it exits at once),
//	       then the daemon stops its devices and exits cleanly
//	 ~3s   supervisor exits 0, seconds before SIGKILL was due
//
// After each run the server restarts from its state directory: the test
// counts the sandboxes that come back paused.
const (
	e2eGrace     = 6 * time.Second
	e2eSandboxes = 10
	e2ePause     = 500 * time.Millisecond
)

func TestEndToEndNaiveServerLosesSandboxesWithoutTheSupervisor(t *testing.T) {
	dir := t.TempDir()
	state, events, api := filepath.Join(dir, "state"), filepath.Join(dir, "daemon.log"), freeAddr(t)
	server := helperCmd(helperCommand("naiveserver", "-listen", api, "-state", state,
		"-pause", e2ePause.String(), "-daemon", strings.Join(daemonCommand(t, dir, events), " ")))
	child := kubeletsimtest.Start(t, server)

	created := createSandboxes(t, "http://"+api)
	tl, err := kubeletsim.Terminate(t.Context(), child,
		kubeletsim.HTTPGet{URL: "http://" + api + "/prestop", Client: noKeepAlive()}, e2eGrace)
	require.NoError(t, err)
	t.Logf("timeline:\n%s", tl)

	assert.True(t, tl.HookKept, "the naive preStop held the whole grace period")
	assert.Equal(t, kubeletsim.MinimumGracePeriod, tl.Remaining, "SIGTERM got only the 2 s floor")
	assert.True(t, tl.Killed, "SIGKILL landed in the middle of the naive shutdown")
	assert.NotContains(t, readFile(t, events), "exit", "the device daemon was killed, not stopped")

	paused := restartAndCountPaused(t, state, created)
	t.Logf("paused after restart: %d of %d", paused, len(created))
	assert.Less(t, paused, len(created), "sandboxes were lost")
}

func TestEndToEndSupervisorBringsEverySandboxBackPaused(t *testing.T) {
	t.Run("preStop then SIGTERM", func(t *testing.T) { runBehindSupervisor(t, true) })
	t.Run("SIGTERM without preStop", func(t *testing.T) { runBehindSupervisor(t, false) })
}

// runBehindSupervisor terminates the supervisor in front of the naive
// server with the kubelet simulator, with or without the preStop hook, and
// checks that nothing was lost or killed.
func runBehindSupervisor(t *testing.T, withHook bool) {
	dir := t.TempDir()
	state, events, report := filepath.Join(dir, "state"), filepath.Join(dir, "daemon.log"), filepath.Join(dir, "report.json")
	termLog := filepath.Join(dir, "termination-log")
	api, listen, hookAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	argv := append(helperCommand("supervisor",
		"-listen", listen, "-hook-listen", hookAddr, "-server-url", "http://"+api, "-grace", e2eGrace.String(), "-concurrency", "8",
		"-daemon", strings.Join(daemonCommand(t, dir, events), " "), "-report", report, "-termination-log", termLog, "--"),
		// the same server, unmodified, without its own daemon
		helperCommand("naiveserver", "-listen", api, "-state", state, "-pause", e2ePause.String())...)
	child := kubeletsimtest.Start(t, withSysfs(helperCmd(argv), filepath.Join(dir, "sys")))

	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond, "supervisor ready")
	created := createSandboxes(t, "http://"+api)
	unready := make(chan bool, 1) // readiness turns 503 once termination starts
	go func() {
		for get(ctx, "http://"+listen+"/readyz") == http.StatusOK {
			time.Sleep(20 * time.Millisecond)
		}
		unready <- get(ctx, "http://"+listen+"/healthz") == http.StatusOK // liveness untouched
	}()
	var hook kubeletsim.Hook
	if withHook {
		hook = kubeletsim.HTTPGet{URL: "http://" + hookAddr + "/drain", Client: noKeepAlive()}
	}
	tl, err := kubeletsim.Terminate(ctx, child, hook, e2eGrace)
	require.NoError(t, err)
	t.Logf("timeline:\n%s", tl)
	assert.True(t, <-unready, "readiness turned 503 while liveness stayed 200")
	if withHook {
		assert.Equal(t, http.StatusOK, tl.HookStatus, "the hook reached the drain (the kubelet takes a 404 for a hook that returned)")
	}

	assert.False(t, tl.Killed, "nothing was SIGKILLed")
	assert.False(t, tl.HookKept, "the preStop ended by the drain deadline")
	assert.NoError(t, child.Err(), "the supervisor exited 0, with the server's status")
	assert.Positive(t, tl.Headroom())

	rep := readReport(t, report)
	require.NotNil(t, rep.Drain)
	assert.Equal(t, withHook, rep.Drain.PreStop != nil)
	require.NotNil(t, rep.Drain.Preserve)
	assert.Equal(t, len(created), rep.Drain.Preserve.Counts[pause.Preserved], "every sandbox preserved")
	assert.Zero(t, rep.Drain.Lost())
	assert.Equal(t, "exited 0", rep.Server.String())
	assert.False(t, rep.Server.Killed)
	require.NotNil(t, rep.Daemon)
	assert.Equal(t, "exited 0", rep.Daemon.String(), "the daemon stopped cleanly")
	assert.False(t, rep.Daemon.Killed)
	assert.Contains(t, readFile(t, events), "exit")
	assert.Nil(t, rep.Ublk, "during a drain the teardown's report is the daemon step's detail")
	// The pod's last state: the summary in the termination message, within 4 KiB.
	msg := readFile(t, termLog)
	assert.LessOrEqual(t, len(msg), 4096)
	assert.True(t, strings.HasPrefix(msg, fmt.Sprintf("drainkit: all %d sandboxes preserved; exited ", len(created))), msg)
	assert.Contains(t, msg, "server exited 0; supervisor exit code 0\n")
	assert.Contains(t, msg, "full report: "+report)
	ur := ublkDetail(t, rep.Drain)
	assert.Equal(t, ublk.VerdictStopped, ur.Verdict, "both devices stopped and deleted by the daemon")
	assert.Len(t, ur.Devices, 2)
	assert.False(t, ur.Daemon.Killed)
	assert.Positive(t, rep.Drain.Headroom)

	assert.Equal(t, len(created), restartAndCountPaused(t, state, created), "every sandbox came back paused")
}

// createSandboxes creates the sandboxes through the server's API.
func createSandboxes(t *testing.T, base string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c := naiveserver.NewClient(base)
	require.NoError(t, c.Wait(ctx))
	ids := make([]string, e2eSandboxes)
	for i := range ids {
		id, err := c.Create(ctx)
		require.NoError(t, err)
		ids[i] = id
	}
	return ids
}

// restartAndCountPaused starts the server again on the state directory and
// counts the created sandboxes that came back paused.
func restartAndCountPaused(t *testing.T, state string, created []string) int {
	t.Helper()
	api := freeAddr(t)
	cmd := helperCmd(helperCommand("naiveserver", "-listen", api, "-state", state))
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c := naiveserver.NewClient("http://" + api)
	require.NoError(t, c.Wait(ctx))
	states, err := c.States(ctx)
	require.NoError(t, err)
	n := 0
	for _, id := range created {
		if states[id] == naiveserver.Paused {
			n++
		}
	}
	recs, err := naiveserver.LoadRecords(state)
	require.NoError(t, err)
	assert.Len(t, recs, n, "one record per sandbox that came back")
	return n
}

func noKeepAlive() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

// ublkDetail decodes the daemon step's detail in a drain Report read back
// from JSON: the ublk step's own report, with no wrapper.
func ublkDetail(t *testing.T, d *drain.Report) *ublk.Report {
	t.Helper()
	require.NotNil(t, d)
	step := d.Phase(StepDaemon)
	require.NotNil(t, step)
	require.NotNil(t, step.Detail, "the daemon step returned its report")
	b, err := json.Marshal(step.Detail)
	require.NoError(t, err)
	var rep ublk.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	return &rep
}
