//go:build linux

package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// Fault: the server exits on its own during the drain, after the preserve
// phase and before the server step's SIGTERM, with a sandbox its last
// listing showed running that no preserve accounted for (a readiness
// probe's listing admitted before the gate closed, answering after the
// preserve phase's last). The supervisor's Report counted it lost
// (lost_with_server) and exited 1, but drain's account did not: its log
// line and DrainFinished said 2 of 2 preserved, 0 lost, and so did the
// termination message's first line ("all 2 sandboxes preserved") above a
// note naming the lost one. The server step now gives drain's account the
// sandboxes lost with the server, in virtual time:
//
//	0 s     SIGTERM (grace 100 s): 2 sandboxes running, paused in 1 s
//	1 s     preserve phase over; a third sandbox created and listed
//	        running by the probe; the server dies (SIGKILL)
//	1 s     server step: the third is lost with the server
func TestSandboxesLostWithTheServerAreInTheDrainsAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := agentenvDouble(t, 2, fakeagentenv.Config{PauseBase: time.Second})
		termLog := filepath.Join(t.TempDir(), "termination-log")
		cfg, err := parseArgs([]string{"-api", "agentenv", "-grace", "100s", "-termination-log", termLog, "--", "server"}, io.Discard)
		require.NoError(t, err)
		cfg.apiKey, cfg.client = "k", &http.Client{Transport: handlerTransport{srv.Handler()}}
		sup, err := newSupervisor(cfg, io.Discard)
		require.NoError(t, err)
		server := &child{name: StepServer, proc: &os.Process{Pid: 1 << 22}, done: make(chan struct{})}
		sup.server = server
		var third string
		step := drain.NewStep(sup.steps[0].Phase(), func(ctx context.Context) (any, error) {
			sb, err := srv.Create(1024)
			require.NoError(t, err)
			third = sb.SandboxID
			probe := httptest.NewRecorder()
			sup.ready(probe, httptest.NewRequest("GET", "/readyz", nil))
			require.Equal(t, 200, probe.Code)
			server.status = unix.WaitStatus(unix.SIGKILL) // a crash
			close(server.done)
			return sup.stopServer(ctx)
		})
		d, err := drain.New(drain.Config{Budget: sup.budget, Sandboxes: sup.counted, Preserver: sup.preserver, Steps: []drain.Step{step}})
		require.NoError(t, err)
		sup.drainer = d
		sup.budget.OnSIGTERM(time.Now())

		rep := d.Shutdown(context.Background())

		require.NotNil(t, rep.Preserve)
		assert.Len(t, rep.Preserve.Entries, 3, "the one lost with the server has its entry")
		assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
		assert.Equal(t, 1, rep.Lost(), "drain's log line and DrainFinished count it")
		assert.Equal(t, pause.NotStarted, entries(rep.Preserve)[third].Outcome)
		assert.Error(t, rep.Err(), "DrainFinished is a Warning")
		assert.Equal(t, drain.Failed, rep.Phase(StepServer).Result)
		assert.Contains(t, rep.Phase(StepServer).Error, "exited on its own during the drain (killed by signal killed): 1 sandbox(es)")

		out := &Report{Drain: rep, Server: server.state(), ExitCode: 0}
		sup.lostWithServer(out)
		assert.Equal(t, []string{third}, out.LostWithServer)
		assert.Equal(t, 1, out.Lost(), "counted once")
		assert.Equal(t, 1, out.ExitCode)
		sup.writeTerminationMessage(out, nil)
		first, _, _ := strings.Cut(readFile(t, termLog), "\n")
		assert.True(t, strings.HasPrefix(first, "drainkit: 1 of 3 sandboxes LOST"), first)
	})
}

// The termination message's first line counts the sandboxes lost with a
// server that exited on its own before any drain report: it said "no drain
// ran" above a note naming them.
func TestTerminationMessageCountsSandboxesLostWithTheServer(t *testing.T) {
	out := &Report{LostWithServer: []string{"a", "b"}, ExitCode: 1, Note: "the server exited on its own during the drain"}
	first, _, _ := strings.Cut(summary(out, false, "", nil), "\n")
	assert.Equal(t, "drainkit: 2 sandboxes LOST with the server, which exited on its own during the drain before SIGTERM (no drain report)", first)
}

// Fault: the server exits on its own during the drain before SIGTERM (row
// 126): drain posted DrainStarted at the preStop call, and nothing ended
// it, since its Shutdown, which posts DrainFinished, never ran. The
// supervisor now posts DrainFinished, a Warning counting the sandboxes
// lost with the server.
func TestServerExitBeforeSIGTERMPostsDrainFinishedWithTheLost(t *testing.T) {
	served, env := podAPI(t)
	api := served.Pod()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}

	srv, _ := agentenvDouble(t, 2, fakeagentenv.Config{})
	cfg, err := parseArgs([]string{"-api", "agentenv", "-grace", "30s", "-pod", api.Name, "--", "server"}, io.Discard)
	require.NoError(t, err)
	cfg.apiKey, cfg.client = "k", &http.Client{Transport: handlerTransport{srv.Handler()}}
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	defer sup.learned.Close()
	require.NotNil(t, sup.pod)
	probe := httptest.NewRecorder()
	sup.ready(probe, httptest.NewRequest("GET", "/readyz", nil)) // the last listing: 2 running
	require.Equal(t, 200, probe.Code)
	sup.budget.OnPreStop(time.Now()) // T0
	done := make(chan struct{})
	close(done)
	sup.server = &child{name: StepServer, proc: &os.Process{Pid: 1 << 22}, done: done, status: unix.WaitStatus(unix.SIGKILL)}

	rep := sup.serverExited(nil)

	assert.Equal(t, 2, rep.Lost())
	var finished []string
	for _, e := range api.Events() {
		if e.Reason == "DrainFinished" {
			finished = append(finished, e.Type+": "+e.Note)
		}
	}
	require.Len(t, finished, 1, "%v", api.Reasons())
	assert.Contains(t, finished[0], "Warning: the server exited on its own during the drain, before SIGTERM (killed by signal killed): 2 sandboxes lost with it; supervisor exit code 1")
}

// Fault: with -api agentenv, the last listing that lost_with_server counts
// from was the running sandboxes' only (readiness and the preserve phase
// list src's, state running), though the doc counts every sandbox the last
// listing "showed not paused": one AgentENV was snapshotting or forking,
// which it shows as paused and does not persist (only paused records do),
// died with the server and was in no account: lost in silence, before any
// termination and during the drain. Readiness now lists every sandbox not
// paused (notPaused, as the preStop wait does), and the preserve phase's
// listing of the running ones no longer overwrites that record. On
// loopback: 2 running, 1 being snapshotted.
func TestSandboxSnapshottedWhenTheServerExitsIsLostWithIt(t *testing.T) {
	for _, during := range []bool{false, true} {
		t.Run(map[bool]string{false: "before termination", true: "during the drain"}[during], func(t *testing.T) {
			srv, ids := agentenvDouble(t, 3, fakeagentenv.Config{PauseBase: time.Millisecond})
			endSnapshot, err := srv.Snapshot(ids[2]) // never ends
			require.NoError(t, err)
			defer endSnapshot()
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			cfg, err := parseArgs([]string{"-api", "agentenv", "-grace", "100s", "-server-url", ts.URL, "--", "server"}, io.Discard)
			require.NoError(t, err)
			cfg.apiKey = "k"
			sup, err := newSupervisor(cfg, io.Discard)
			require.NoError(t, err)
			defer sup.src.CloseIdleConnections()
			defer sup.sweepList.(*notPaused).closeIdleConnections()
			server := &child{name: StepServer, proc: &os.Process{Pid: 1 << 22}, done: make(chan struct{})}
			sup.server = server
			probe := httptest.NewRecorder()
			sup.ready(probe, httptest.NewRequest("GET", "/readyz", nil))
			require.Equal(t, 200, probe.Code, probe.Body.String())
			crash := func() {
				server.status = unix.WaitStatus(unix.SIGKILL)
				close(server.done)
			}

			out := &Report{Server: server.state()}
			if !during {
				crash()
				sup.exitedBefore.Store(true)
				out.Server = server.state()
			} else {
				step := drain.NewStep(sup.steps[0].Phase(), func(ctx context.Context) (any, error) {
					crash() // after the preserve phase, before the server's SIGTERM
					return sup.stopServer(ctx)
				})
				d, err := drain.New(drain.Config{Budget: sup.budget, Sandboxes: sup.counted, Preserver: sup.preserver, Steps: []drain.Step{step}})
				require.NoError(t, err)
				sup.drainer = d
				sup.budget.OnSIGTERM(time.Now())
				out.Drain = d.Shutdown(context.Background())
				out.Server = server.state()
				require.NotNil(t, out.Drain.Preserve)
				assert.Equal(t, 2, out.Drain.Preserve.Counts[pause.Preserved], "the running ones")
			}
			sup.lostWithServer(out)

			assert.Contains(t, out.LostWithServer, ids[2], "being snapshotted: not paused, gone with the server")
			assert.Equal(t, map[bool]int{false: 3, true: 1}[during], out.Lost())
			assert.Equal(t, 1, out.ExitCode)
		})
	}
}
