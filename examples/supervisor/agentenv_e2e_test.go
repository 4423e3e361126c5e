//go:build linux

package main

import (
	"cmp"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// The supervisor in front of AgentENV as it really is (the double in
// internal/fakeagentenv): 200 running sandboxes listed through GET
// /v2/sandboxes in pages of 37 (x-next-token), keyed by sandboxID, sized by
// memoryMB (512 MB to 4 GB, pauses of 30 to 100 ms), every tenth sandbox's
// first pause failing with a 500, the API key required; the ublk daemon is
// the server's own child, never answers its shutdown request, and is found
// by the supervisor through its socket. Scaled down from 3600 s to a 10 s
// grace period.
//
//	0s    preStop GET /drain: 200 running, the plan leaves no wait: the
//	      drain deadline is already past
//	~0s   SIGTERM: 200 pauses through the API, 16 at a time, the 500s
//	      retried; the list again: nothing running
//	~1s   SIGTERM to the server: it pauses nothing more, stops its daemon
//	      (or leaves it, in the second case: the supervisor asks it over
//	      its socket), exits 0
//	~1s   daemon step: the daemon has stopped its devices and exited;
//	      supervisor exits 0, long before SIGKILL
const (
	aeGrace     = 10 * time.Second
	aeSandboxes = 200
	aePage      = 37
)

func TestEndToEndAgentENVBehindTheSupervisor(t *testing.T) {
	t.Run("server stops its daemon", func(t *testing.T) { runAgentENV(t, aeCase{stopDaemon: fakeagentenv.StopWait}) })
	t.Run("server leaves its daemon to the supervisor", func(t *testing.T) { runAgentENV(t, aeCase{stopDaemon: fakeagentenv.StopLeave}) })
	// Fault (row 383): AgentENV's server asks its daemon to stop and exits
	// without waiting; the daemon, stopping its devices one at a time,
	// reads no request any more (its accept loop has ended, its socket
	// still bound). The supervisor's own request, unanswered past its 5 s
	// RequestTimeout, was a failed request: the control fallback at once
	// under a daemon stopping its devices in order. It is now taken as
	// delivered (Unconfirmed) and waited for.
	t.Run("server asks its daemon first and does not wait", func(t *testing.T) {
		runAgentENV(t, aeCase{stopDaemon: fakeagentenv.StopSend, step: 1500 * time.Millisecond, grace: 20 * time.Second})
	})
}

// aeCase is one run of the supervisor in front of AgentENV: how the server
// treats its daemon at its shutdown, and the daemon's time per device step
// (fakeublk's default when zero) and the grace period (aeGrace when zero).
type aeCase struct {
	stopDaemon string
	step       time.Duration
	grace      time.Duration
}

func runAgentENV(t *testing.T, c aeCase) {
	stopDaemon, grace := c.stopDaemon, cmp.Or(c.grace, aeGrace)
	dir := t.TempDir()
	state, events, report, sock := filepath.Join(dir, "state"), filepath.Join(dir, "daemon.log"), filepath.Join(dir, "report.json"), filepath.Join(dir, "ublkd.sock")
	keyFile := filepath.Join(dir, "api-key")
	require.NoError(t, os.WriteFile(keyFile, []byte("s3cret\n"), 0o600))
	api, listen, hook := freeAddr(t), freeAddr(t), freeAddr(t)

	daemon := fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}, {ID: 1, Major: 4000, Minor: 1}},
		Socket:   sock,
		EventLog: events,
		Step:     c.step,
		// AgentENV's daemon answers a shutdown at once; the others never
		// answer here, the worst a supervisor can meet.
		Silent: stopDaemon != fakeagentenv.StopSend,
		// With the server stopping it, it also stops when its parent goes
		// (as AgentENV's does); left to the supervisor, only the request
		// stops it, so the test sees who did.
		StopWithParent: stopDaemon != fakeagentenv.StopLeave,
	}
	cfg, err := json.Marshal(daemon)
	require.NoError(t, err)
	require.NotContains(t, string(cfg), " ", "-daemon is split on spaces")

	argv := append(helperCommand("supervisor",
		"-api", "agentenv", "-api-key-file", keyFile,
		"-listen", listen, "-hook-listen", hook, "-server-url", "http://"+api, "-grace", grace.String(), "-concurrency", "16",
		"-daemon-socket", sock, "-report", report, "--"),
		helperCommand("agentenv", "-listen", api, "-state", state, "-sandboxes", "200", "-page-size", "37",
			"-pause-base", "20ms", "-pause-per-gib", "20ms", "-fail-first", "10",
			"-daemon", strings.Join(helperCommand("daemon", string(cfg)), " "), "-daemon-socket", sock,
			"-stop-daemon", stopDaemon)...)
	cmd := withSysfs(helperCmd(argv), daemon.SysRoot)
	cmd.Env = append(cmd.Env, fakeagentenv.EnvAPIKey+"=s3cret")
	child := kubeletsimtest.Start(t, cmd)

	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 20*time.Second, 20*time.Millisecond,
		"supervisor ready: the server answers its list with the key")
	tl, err := kubeletsim.Terminate(ctx, child, kubeletsim.HTTPGet{URL: "http://" + hook + "/drain", Client: noKeepAlive()}, grace)
	require.NoError(t, err)
	t.Logf("timeline:\n%s", tl)
	assert.Equal(t, http.StatusOK, tl.HookStatus, "the hook reached the drain (the kubelet takes a 404 for a hook that returned)")
	rep := readReport(t, report)
	if t.Failed() {
		b, _ := json.MarshalIndent(rep, "", "  ")
		t.Logf("report: %s", b)
	}

	assert.False(t, tl.Killed, "nothing was SIGKILLed")
	assert.NoError(t, child.Err(), "the supervisor exited 0, with the server's status")
	require.NotNil(t, rep.Drain)
	require.NotNil(t, rep.Drain.Preserve)
	assert.Equal(t, aeSandboxes, rep.Drain.Preserve.Counts[pause.Preserved], "every running sandbox paused through the API")
	assert.Zero(t, rep.Drain.Lost())
	retried := 0
	for _, e := range rep.Drain.Preserve.Entries {
		assert.Positive(t, e.Size, "%s: memoryMB is its size", e.ID)
		if e.Attempts > 1 {
			retried++
		}
	}
	assert.Equal(t, aeSandboxes/10, retried, "the 500s were retried")
	assert.Equal(t, "exited 0", rep.Server.String())

	require.NotNil(t, rep.OwnedDaemon, "the server's daemon was found by its socket")
	assert.Positive(t, rep.OwnedDaemon.Pid)
	assert.True(t, rep.OwnedDaemon.Exited)
	assert.Nil(t, rep.Daemon, "no daemon of the supervisor's own")
	ur := ublkDetail(t, rep.Drain)
	if stopDaemon == fakeagentenv.StopWait {
		// The server waited for its daemon, which stopped and deleted both
		// devices and exited before the daemon step: nothing was left to
		// ask of it, and the step says so (row 2201), where it sent a
		// request to a process that had exited and said "stopped".
		assert.Equal(t, ublk.VerdictNothingToDo, ur.Verdict, ur.Note)
		assert.Contains(t, ur.Note, "the daemon is not running")
		assert.False(t, ur.Daemon.Requested)
	} else {
		assert.Equal(t, ublk.VerdictStopped, ur.Verdict, "both devices stopped and deleted by the daemon")
		assert.True(t, ur.Daemon.Requested)
	}
	assert.Empty(t, ur.Daemon.RequestError)
	assert.False(t, ur.Daemon.Killed)
	log := readFile(t, events)
	assert.Equal(t, 1, strings.Count(log, "start"), "one daemon, started by the server: the supervisor never spawned one")
	assert.Equal(t, 1, strings.Count(log, "request shutdown"), "one request read:\n%s", log)
	if stopDaemon == fakeagentenv.StopSend {
		assert.True(t, ur.Daemon.Unconfirmed, "the supervisor's request, unread by a daemon already stopping, taken as delivered")
		assert.Contains(t, log, "connection unread: stopping")
		for _, st := range ur.Steps {
			assert.NotEqual(t, "control fallback", st.Name, "no STOP_DEV under a daemon stopping its devices in order")
		}
	}
	assert.Contains(t, log, "delete 1")
	assert.True(t, strings.HasSuffix(log, "exit\n"), "the daemon stopped its devices and exited:\n%s", log)
	assert.Positive(t, rep.Drain.Headroom)

	recs, err := fakeagentenv.LoadRecords(state)
	require.NoError(t, err)
	assert.Len(t, recs, aeSandboxes, "every sandbox has its durable paused record")
	t.Logf("preserve phase: %v for %d sandboxes; margin before SIGKILL %v",
		rep.Drain.Preserve.End.Sub(rep.Drain.Preserve.Start).Round(time.Millisecond), aeSandboxes, tl.Headroom().Round(time.Millisecond))
}
