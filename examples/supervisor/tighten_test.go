//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/podstart"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/internal/ublkstep"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// The daemon step has the ublk teardown's Tighten, which drain calls when
// its budget moves SIGKILL earlier during the step or Force leaves it its
// reserve: the teardown lays its control fallback and kill out again
// before the new deadline (rows 496-498). Made by drain.NewStep alone, it
// had none, and drain only cancelled the teardown there, its late stages
// never run.
func TestDaemonStepHasTheTeardownsTighten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := parseArgs([]string{"-grace", "100s", "-daemon", "ublkd", "--", "server"}, io.Discard)
		require.NoError(t, err)
		sup, err := newSupervisor(cfg, io.Discard)
		require.NoError(t, err)
		var daemon drain.Step
		for _, st := range sup.steps {
			if st.Phase().Name == StepDaemon {
				daemon = st
			}
		}
		require.NotNil(t, daemon)
		tt, ok := daemon.(interface{ Tighten(time.Time) bool })
		require.True(t, ok, "the daemon step has a Tighten method")
		assert.False(t, tt.Tighten(time.Now().Add(time.Second)), "the teardown's: nothing to move with no teardown in progress")
	})
}

// Fault: the final sweep was laid out once, in the server step's deadline
// as it stood at the sweep's start, and a budget that moved SIGKILL
// earlier while it ran (a deletion read with a shorter grace) cancelled
// its context, which stops new pauses but leaves the ones in flight to
// the hard deadline of that layout, past the step's new deadline: the step
// did not return, drain abandoned it, the server's SIGTERM waited for the
// sweep (in the daemon step's time), and the sandbox whose pause was in
// flight was in no account. The sweep is now laid out again in what is
// left (serverStep.Tighten), in virtual time:
//
//	0 s      SIGTERM (grace 100 s): 2 sandboxes of 1 GiB paused in 2 s; a
//	         third, of 74 GiB, is being snapshotted until 3 s
//	2 s      server step (until 95 s): the sweep retries the third's 409
//	3.x s    its snapshot over, its pause starts: 75 s
//	10 s     a deletion read: SIGKILL at 30 s, the step's deadline 27 s
//	20.75 s  three quarters of the step as it is now: the sweep gives up
//	23.9 s   seven eighths: the server has not finished it: lost; SIGTERM
//	27 s     the step's deadline (before: abandoned here, the sweep's
//	         pause in flight until 71.75 s, the old three quarters)
func TestFinalSweepEndsByTheServerStepsDeadlineWhenTheBudgetMovesSIGKILLEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, big := sweptLate(t)
		t0 := time.Now()
		var sigterm time.Time
		h := hooks{
			made: func(sup *supervisor) {
				go func() {
					time.Sleep(10 * time.Second)
					assert.True(t, sup.budget.Tighten(t0.Add(30*time.Second)), "the deletion's 30 s")
				}()
			},
			atSIGTERM: func() { sigterm = time.Now() },
		}
		rep := drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{srv.Handler()}}, h, "-grace", "100s")

		step := rep.Phase(StepServer)
		require.NotNil(t, step)
		assert.Equal(t, t0.Add(27*time.Second), step.Deadline, "the 30 s grace's margin is 3 s")
		assert.Equal(t, drain.Failed, step.Result, step.Error)
		assert.Contains(t, step.Error, big, "the sandbox the sweep did not pause is named")
		assert.Equal(t, t0.Add(2*time.Second+25*time.Second*7/8), sigterm, "the server's SIGTERM at seven eighths of the step as it is now")
		require.NotNil(t, rep.Preserve)
		e, ok := entries(rep.Preserve)[big]
		require.True(t, ok, "the sandbox whose pause the sweep gave up on is accounted for")
		assert.Equal(t, pause.TimedOut, e.Outcome)
		gaveUp := t0.Add(2*time.Second + 25*time.Second*3/4)
		assert.WithinRange(t, e.End, gaveUp, gaveUp.Add(100*time.Millisecond), "given up on at three quarters of the step as it is now")
		assert.Equal(t, 1, rep.Lost())
		time.Sleep(time.Minute) // the double goes on with that pause, as AgentENV would, until 78 s
	})
}

// Fault: when the server exits on its own during a drain (after the preStop hook fixed
// T0, before SIGTERM), the supervisor stops the daemon within the budget's deadline
// (serverExited), through a context that took that deadline once (Budget.Context does
// not follow the budget) and a teardown never told of a move: a budget that moved SIGKILL
// earlier while it ran (the preStop wait's read of a deletion with a shorter grace) left
// the teardown's stages, the kill of a daemon that does not stop among them, laid out
// for the old deadline, past the new SIGKILL, which would take the daemon with its
// devices live. A real fake device daemon, hung, on a kernel declared fixed (the kill
// allowed), grace 60 s, SIGKILL moved to 6 s once the teardown has asked the daemon to stop.
func TestDaemonTeardownAfterTheServerExitedFollowsABudgetThatMovesSIGKILLEarlier(t *testing.T) {
	dir := t.TempDir()
	sys, events := filepath.Join(dir, "sys"), filepath.Join(dir, "daemon.log")
	b, err := json.Marshal(fakeublk.DaemonConfig{SysRoot: sys, Devices: []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}},
		Mode: fakeublk.Hung, EventLog: events})
	require.NoError(t, err)
	t.Setenv(EnvSysfsRoot, sys)
	t.Setenv(EnvProcfsRoot, emptyProcfs(sys))
	cfg, err := parseArgs([]string{"-grace", "60s", "-ublk-kernel", "fixed=*",
		"-daemon", strings.Join(helperCommand("daemon", string(b)), " "), "--", "server"}, io.Discard)
	require.NoError(t, err)
	asked := logbuf.NewSignal("ublk: request stop")
	sup, err := newSupervisor(cfg, asked)
	require.NoError(t, err)
	defer sup.learned.Close()
	sup.daemon, err = sup.procs.start(StepDaemon, cfg.daemon)
	require.NoError(t, err)
	reapCtx, stopReaping := context.WithCancel(context.Background())
	reaped := make(chan struct{})
	go func() { defer close(reaped); sup.procs.reapLoop(reapCtx) }()
	defer func() {
		_ = sup.daemon.signal(syscall.SIGKILL) // a daemon still running: this test's own
		_ = sup.daemon.wait(context.Background())
		stopReaping()
		<-reaped
	}()
	exited := make(chan struct{})
	close(exited)
	sup.server = &child{name: StepServer, done: exited} // exited on its own
	daemonStarted(t, events)

	t0 := time.Now()
	require.True(t, sup.budget.OnPreStop(t0))
	kill := t0.Add(6 * time.Second)
	go func() {
		<-asked.Seen() // the teardown has laid its stages out and asked the daemon to stop
		assert.True(t, sup.budget.Tighten(kill), "the deletion's 6 s")
	}()
	rep := sup.serverExited(nil)
	assert.True(t, time.Now().Before(kill), "the teardown over before the new SIGKILL")

	require.NotNil(t, rep.Ublk)
	t.Logf("the teardown's deadline: T0 + %v: %s", rep.Ublk.Deadline.Sub(t0), rep.Ublk.String())
	assert.True(t, rep.Ublk.Deadline.Before(kill), "the teardown ends before the new SIGKILL")
	assert.True(t, rep.Ublk.Daemon.Killed, "the hung daemon killed before the new SIGKILL")
	assert.False(t, rep.Ublk.Daemon.LeftRunning)
	assert.True(t, sup.daemon.state().Exited, "the daemon gone by the teardown's end")
}

// Fault: the server step sent a server still running at its deadline SIGKILL and then
// waited up to 1 s for its reap, past the step's context, where drain abandons a step
// that has not returned 100 ms after it: a server whose exit outlasts that (a VMM with
// much memory to free, a thread blocked on a device) made drain abandon the step with
// "did not return by its deadline; abandoned", the final sweep's account, the step's
// Detail, dropped from the Report with the sandbox it paused. A real server process that
// ignores SIGTERM, its reap after the SIGKILL 300 ms late; a sandbox the final sweep
// alone finds running.
func TestServerSlowToDieAfterItsSIGKILLKeepsTheSweepsAccount(t *testing.T) {
	// "late" runs again once a listing found nothing running: the preserve phase's last.
	var quiet atomic.Bool
	var pausedMu sync.Mutex
	paused := map[string]bool{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		pausedMu.Lock()
		defer pausedMu.Unlock()
		ids := []string{"first"}
		if quiet.Load() {
			ids = append(ids, "late")
		}
		var items []string
		running := false
		for _, id := range ids {
			state := "running"
			if paused[id] {
				state = "paused"
			}
			running = running || !paused[id]
			items = append(items, fmt.Sprintf(`{"id":%q,"state":%q}`, id, state))
		}
		quiet.Store(quiet.Load() || !running)
		fmt.Fprintf(w, "[%s]", strings.Join(items, ","))
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		pausedMu.Lock()
		defer pausedMu.Unlock()
		paused[r.PathValue("id")] = true
		w.WriteHeader(http.StatusNoContent)
	})
	cfg, err := parseArgs([]string{"-grace", "5s", "--", "server"}, io.Discard)
	require.NoError(t, err)
	cfg.client = &http.Client{Transport: handlerTransport{mux}}
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	defer sup.learned.Close()
	sup.drainer, err = drain.New(drain.Config{Budget: sup.budget, Sandboxes: sup.counted, Preserver: sup.preserver, Steps: sup.steps})
	require.NoError(t, err)
	sup.server, err = sup.procs.start(StepServer, []string{"sh", "-c", "trap '' TERM; exec sleep 60"})
	require.NoError(t, err)
	reapCtx, stopReaping := context.WithCancel(context.Background())
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		for !sup.server.sentKill() && reapCtx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // its exit, slow
		sup.procs.reapLoop(reapCtx)
	}()
	defer func() {
		_ = sup.server.signal(syscall.SIGKILL)
		_ = sup.server.wait(t.Context())
		stopReaping()
		<-reaped
	}()

	sup.budget.OnSIGTERM(time.Now())
	rep := sup.drainer.Shutdown(context.Background())

	step := rep.Phase(StepServer)
	require.NotNil(t, step)
	t.Logf("server step %s by %v past its deadline: %s", step.Result, step.End.Sub(step.Deadline), step.Error)
	assert.NotEqual(t, drain.Abandoned, step.Result, step.Error)
	assert.Contains(t, step.Error, "SIGKILL")
	require.NotNil(t, rep.Preserve)
	e, ok := entries(rep.Preserve)["late"]
	require.True(t, ok, "the sandbox the final sweep paused is in the account")
	assert.Equal(t, pause.Preserved, e.Outcome)
}

// sentKill reports whether the supervisor sent the child SIGKILL, reaped or not.
func (c *child) sentKill() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killed
}

// Fault: a Force (a second SIGTERM) while the final sweep ran laid the
// sweep out again in the step's reserve (serverStep.Tighten), but its
// pauses went on starting until the half of that layout, where a Force
// landing before the sweep makes it send none (listForced) and the
// preserve phase starts none after one: the sweep's pauses took the
// reserve's time from the server's SIGTERM and the daemon after it. In
// virtual time, 6 sandboxes paused by the preserve phase, resumed as the
// server step begins, the sweep pausing them one at a time (1 s each):
//
//	0 s    the server step: the sweep's first pause
//	1.5 s  Force: the second pause in flight
//	2 s    the second pause done: no other starts (before: the rest did)
func TestForceDuringTheFinalSweepStartsNoOtherPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids := agentenvDouble(t, 6, fakeagentenv.Config{PauseBase: time.Second})
		var mu sync.Mutex
		var starts []time.Time
		handler := srv.Handler()
		client := &http.Client{Transport: handlerTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pause") {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
			}
			handler.ServeHTTP(w, r)
		})}}
		var sup *supervisor
		var forcedAt time.Time
		h := hooks{
			made: func(s *supervisor) { sup = s },
			beforeStep: func() {
				mu.Lock()
				starts = nil // the preserve phase's
				mu.Unlock()
				for _, id := range ids {
					done, err := srv.BeginResume(id)
					require.NoError(t, err)
					done()
				}
				go func() {
					time.Sleep(1500 * time.Millisecond)
					forcedAt = time.Now()
					sup.drainer.Force()
				}()
			},
		}
		rep := drainBeforeSIGTERM(t, client, h, "-grace", "100s", "-concurrency", "1")

		mu.Lock()
		defer mu.Unlock()
		require.False(t, forcedAt.IsZero(), "forced during the sweep")
		var after []time.Duration
		for _, s := range starts {
			if s.After(forcedAt) {
				after = append(after, s.Sub(forcedAt))
			}
		}
		assert.Empty(t, after, "pauses the sweep started after the Force, by how long after it")
		assert.Len(t, starts, 2, "the sweep's pauses: the first, and the one in flight at the Force")
		require.NotNil(t, rep.Preserve)
		assert.Equal(t, 4, rep.Lost(), "the sandboxes the sweep did not pause are lost, in the Report")
		step := rep.Phase(StepServer)
		require.NotNil(t, step)
		assert.NotEqual(t, drain.OK, step.Result, "the step says the sweep could not pause them")
	})
}

// Fault: a child the supervisor sent SIGKILL and that was not reaped yet
// (its exit still freeing its memory: the server step waits 50 ms for the
// reap since row 793, where it waited 1 s) was in the Report as "still
// running", killed false, its exit status 1: the Report read as if the
// supervisor had never killed it, where ChildState.Killed says the
// supervisor sent SIGKILL. Real process, no reaper running.
func TestChildSIGKILLedButNotReapedYetIsReportedKilled(t *testing.T) {
	procs := newProcTable(slog.New(slog.DiscardHandler))
	c, err := procs.start(StepServer, []string{"sleep", "60"})
	require.NoError(t, err)
	defer func() {
		require.Eventually(t, func() bool { procs.reap(); return c.state().Exited }, 10*time.Second, 5*time.Millisecond)
	}()

	require.NoError(t, c.signal(syscall.SIGKILL))
	st := c.state()

	assert.False(t, st.Exited, "not reaped: no reaper ran")
	assert.True(t, st.Killed, "the supervisor sent SIGKILL")
	assert.Equal(t, "sent SIGKILL, not reaped", st.String())
}

// A sandbox whose pause returns only when its context ends.
type pausedUntilCut struct{ id string }

func (s pausedUntilCut) ID() string { return s.id }
func (s pausedUntilCut) Preserve(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// beginSweep begins a final sweep (sweepWindow.begin) in a step whose
// deadline is 100 s away, with its Preserver, which lists one sandbox whose
// pause returns only when its context ends, listed (when not nil) called
// with each listing's context. It returns the Preserver, the sweep's
// window, the context in which its pauses start, and cancel, which ends
// the step's context. The sweep ends with the test.
func beginSweep(t *testing.T, listed func(context.Context)) (*pause.Preserver, *sweepWindow, context.Context, context.CancelFunc) {
	p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		if listed != nil {
			listed(ctx)
		}
		return []pause.Sandbox{pausedUntilCut{"late"}}, nil
	}), pause.Config{Limit: 1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(100*time.Second))
	t.Cleanup(cancel)
	w := &sweepWindow{}
	starts, _, end := w.begin(ctx, p)
	t.Cleanup(end)
	return p, w, starts, cancel
}

// Fault: a move of the server step's deadline that landed after the sweep
// read its hard deadline (sweepWindow.hard) and before its Preserver's Run
// was in progress laid the sweep out again, but the Preserver, with no Run
// to tell, did nothing (pause.Preserver.Tighten): its pauses in flight ran
// to the old three quarters, and were ended only at the step's new
// deadline, when its context ended, leaving the server no time between
// its SIGTERM and its SIGKILL. The interleaving, made in order, in
// virtual time: a step until 100 s, moved to 20 s.
func TestSweepLaidOutAgainBeforeItsPreserverRunsEndsItsPausesByTheNewThreeQuarters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		p, w, starts, cancel := beginSweep(t, nil)

		hard := w.hard() // 75 s
		require.True(t, w.tighten(t0.Add(20*time.Second)), "laid out again")
		cut := time.AfterFunc(20*time.Second, cancel) // drain ends the step's context at its new deadline
		defer cut.Stop()
		rep := p.Run(starts, hard)

		e, ok := entries(rep)["late"]
		require.True(t, ok)
		assert.Equal(t, pause.TimedOut, e.Outcome)
		assert.Equal(t, t0.Add(15*time.Second), e.End, "given up on at three quarters of the step as laid out again")
	})
}

// Fault: the context in which the final sweep's pauses start was made once,
// with the first layout's half as its deadline, and a layout again (a
// budget that moved SIGKILL earlier, a Force) cancelled it at its own half
// but left its Deadline at the old one: the sweep's Preserver, called
// after the move (row 822's interleaving), took that half for its phase
// deadline, in its Report, its log's time_left and its listing's context,
// 42 s later than the pauses really stopped starting. In virtual time, a
// step until 100 s moved to 20 s, then to 16 s.
func TestSweepLaidOutAgainSaysItsNewHalfAsItsPausesDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var listedBy time.Time
		t0 := time.Now()
		p, w, starts, _ := beginSweep(t, func(ctx context.Context) { listedBy, _ = ctx.Deadline() })
		starts, stop := context.WithCancelCause(starts) // as sweepRun's
		defer stop(nil)
		ended := make(chan time.Time, 1)
		context.AfterFunc(starts, func() { ended <- time.Now() })
		dl, ok := starts.Deadline()
		require.True(t, ok)
		assert.Equal(t, t0.Add(50*time.Second), dl, "the first layout's half")

		require.True(t, w.tighten(t0.Add(20*time.Second)))
		dl, _ = starts.Deadline()
		assert.Equal(t, t0.Add(10*time.Second), dl, "the half as laid out again")
		require.False(t, w.tighten(t0.Add(30*time.Second)), "never later")
		require.True(t, w.tighten(t0.Add(16*time.Second)))
		dl, _ = starts.Deadline()
		assert.Equal(t, t0.Add(8*time.Second), dl, "the half of the newest layout")

		rep := p.Run(starts, w.hard())
		assert.Equal(t, t0.Add(8*time.Second), rep.Deadline, "the sweep's Run took the newest half for its phase deadline")
		assert.Equal(t, t0.Add(8*time.Second), listedBy, "its listing's context")
		assert.Equal(t, t0.Add(8*time.Second), <-ended, "the context ended at the half it says")
	})
}

// Fault: when the server exits on its own, the supervisor tears the device
// daemon down outside drain (serverExited) and read no signal while it did:
// an operator's SIGINT, which forces during a termination (the daemon step
// then gets its reserve from the Force, its stages laid out again in it),
// did nothing, and a Force reaching the drainer was not followed either:
// the teardown of a daemon that does not stop ran to the budget's deadline,
// up to the whole grace period. A SIGINT now forces, and the teardown gets
// the daemon step's reserve from it, its stages laid out again there by
// ublk's rules: on this kernel, not known fixed, the daemon is killed only
// once STOP_DEV has completed. A SIGTERM, the kubelet's, forces nothing;
// with the preStop request still open it says the kubelet gave up on the
// hook, and the budget's SIGKILL 2 s after it ends the teardown (row 961).
// In virtual time, grace 100 s (the budget's deadline T0 + 95 s, the
// step's reserve 10 s), the in-process daemon hung:
//
//	0 s    the server has exited; the teardown asks the daemon to stop
//	1 s    SIGINT: the teardown's deadline is now 11 s
//	       STOP_DEV through the control device, then the kill, by 11 s
//	       (before: at 90 s and 93 s, the SIGINT never read)
//	1 s    or SIGTERM with the hook open: the deadline is now 2 s (SIGKILL
//	       at 3 s, less the margin); STOP_DEV at 1.3 s, the kill at 1.8 s
//	       (before: at 90 s and 93 s, long past SIGKILL)
func TestSIGINTDuringTheDaemonTeardownAfterTheServerExitedForcesIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sig      syscall.Signal
		forced   bool
		hookOpen bool // the preStop request still open: the kubelet gave up on it
	}{{"SIGINT", syscall.SIGINT, true, false}, {"SIGTERM", syscall.SIGTERM, false, false}, {"SIGTERM with the hook open", syscall.SIGTERM, false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log logbuf.Buffer
				sup, d := hungTeardown(t, &log)
				t0 := time.Now()
				require.True(t, sup.budget.OnPreStop(t0))
				if tc.hookOpen {
					sup.hooksOpen.Add(1)
				}
				sigs := make(chan os.Signal, 1)
				time.AfterFunc(time.Second, func() { sigs <- tc.sig })
				rep := sup.serverExited(sigs)

				require.NotNil(t, rep.Ublk)
				t.Logf("%v: the teardown's deadline T0 + %v, over at T0 + %v: %s; the daemon: %v",
					tc.sig, rep.Ublk.Deadline.Sub(t0), time.Since(t0), rep.Ublk.String(), d.timeline(t0))
				assert.Equal(t, []string{"request", "STOP_DEV 0", "done 0", "kill"}, d.events(),
					"the daemon killed only once STOP_DEV completed")
				assert.True(t, rep.Ublk.Daemon.Killed)
				if tc.hookOpen {
					assert.Equal(t, t0.Add(2*time.Second), rep.Ublk.Deadline, "SIGKILL 2 s after the SIGTERM, less the margin (row 961)")
					assert.Contains(t, log.String(), "the kubelet gave up on it")
					return
				}
				if !tc.forced {
					assert.Equal(t, t0.Add(95*time.Second), rep.Ublk.Deadline, "the budget's deadline: a SIGTERM forces nothing")
					assert.Contains(t, log.String(), "it forces nothing")
					return
				}
				assert.Equal(t, t0.Add(11*time.Second), rep.Ublk.Deadline, "the step's reserve from the SIGINT")
				assert.Less(t, time.Since(t0), 11*time.Second, "the teardown over within its reserve")
				assert.Contains(t, log.String(), "drain: forced")
			})
		})
	}
}

// hungTeardown returns a supervisor with -grace 100s, logging to log, whose
// server has exited on its own and whose daemon is a hungDaemon on a kernel
// not known fixed (vulnerable: no kill before STOP_DEV completed), for
// serverExited in virtual time.
func hungTeardown(t *testing.T, log io.Writer) (*supervisor, *hungDaemon) {
	t.Helper()
	cfg, err := parseArgs([]string{"-grace", "100s", "-daemon", "ublkd", "--", "server"}, io.Discard)
	require.NoError(t, err)
	sup, err := newSupervisor(cfg, log)
	require.NoError(t, err)
	t.Cleanup(sup.learned.Close)
	d := newHungDaemon(t)
	sup.teardown, err = ublkstep.New(d, ublkhook.With(ublk.Config{Logger: sup.log},
		ublkhook.Hooks{SysfsRoot: d.tree.Root, ProcfsRoot: t.TempDir(), KernelRelease: "6.8.0-45-generic", // vulnerable
			OpenControl: func(context.Context) (ublkctl.Controller, error) { return d, nil }}), sup.liveStepReserve())
	require.NoError(t, err)
	exited := make(chan struct{})
	close(exited)
	sup.server = &child{name: StepServer, done: exited} // exited on its own
	return sup, d
}

// Fault: a SIGTERM during the daemon's teardown after the server exited on
// its own, with no preStop call before it, set the budget from -grace
// counted from the SIGTERM: the pod's deletion, which the supervisor reads
// with -pod as the rest of its termination does, was not read, and a
// deletion with a shorter grace (kubectl delete --grace-period, an
// eviction) SIGKILLed the daemon mid-teardown, its device live. The
// deletion is now read then, and the teardown follows it; with no deletion
// (graceful node shutdown) -kubelet-grace's grace from the SIGTERM. In
// virtual time, grace 100 s (the teardown's deadline 95 s), the in-process
// daemon hung on a vulnerable kernel:
//
//	0 s    the server has exited before any termination; the teardown asks
//	       the daemon to stop
//	1 s    the pod deleted with a grace of 10 s (SIGKILL at 11 s), SIGTERM:
//	       the deadline 9.5 s (the margin 1.5 s); STOP_DEV, then the kill,
//	       by then (before: the deadline 95 s, STOP_DEV at 90 s, the kill
//	       at 93 s, long past SIGKILL)
//	1 s    or no deletion, -kubelet-grace 8s: the deadline 7.5 s
//	1 s    or a force deletion (the pod's name another pod's): SIGKILL at
//	       3 s, the deadline 2 s
//
// Fault (row 1052): the Event the supervisor posts for a server that
// exited on its own took the budget's anchor for a drain begun: after that
// SIGTERM it was a DrainFinished, "the server exited on its own during the
// drain, before SIGTERM", for a server that exited before any termination,
// which the Report's note said. Nothing was lost here: no Event.
func TestSIGTERMDuringTheDaemonTeardownWithNoPreStopTakesThePodsDeletion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deleted func(*fakeapiserver.Served) // what the API server shows from the SIGTERM on
		kubelet time.Duration               // -kubelet-grace
		want    time.Duration               // the teardown's deadline after t0
		said    string
	}{
		{"deletion", func(api *fakeapiserver.Served) { api.Pod().Delete(time.Now(), 10*time.Second) }, 0,
			9500 * time.Millisecond, "the pod's deletion read at the SIGTERM"},
		{"kubelet's own grace", func(*fakeapiserver.Served) {}, 8 * time.Second,
			7500 * time.Millisecond, "the kubelet is terminating it on its own"},
		{"force deletion", func(api *fakeapiserver.Served) { api.Replace("uid-2") }, 0,
			2 * time.Second, "a force deletion"}, // SIGKILL 2 s after the SIGTERM, less a 1 s margin
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log logbuf.Buffer
				sup, d := hungTeardown(t, &log)
				api := fakeapiserver.NewServed(&fakeapiserver.Pod{Name: "node-x7k2p", Namespace: "sandboxes", UID: "uid-1"})
				token := filepath.Join(t.TempDir(), "token")
				require.NoError(t, os.WriteFile(token, []byte("t"), 0o600))
				var err error
				sup.pod, err = kube.New(api.Pod().Name, kube.Config{Host: "https://api.test", Namespace: api.Pod().Namespace, UID: api.Pod().UID,
					TokenFile: token, Client: &http.Client{Transport: handlerTransport{api}}})
				require.NoError(t, err)
				podstart.Read(sup.pod, sup.log) // as newSupervisor reads it: the pod found
				sup.kubelet = tc.kubelet

				t0 := time.Now()
				sigs := make(chan os.Signal, 1)
				time.AfterFunc(time.Second, func() {
					tc.deleted(api)
					sigs <- syscall.SIGTERM
				})
				rep := sup.serverExited(sigs)

				require.NotNil(t, rep.Ublk)
				t.Logf("the teardown's deadline T0 + %v, over at T0 + %v: %s; the daemon: %v",
					rep.Ublk.Deadline.Sub(t0), time.Since(t0), rep.Ublk.String(), d.timeline(t0))
				assert.Equal(t, t0.Add(tc.want), rep.Ublk.Deadline, "the teardown follows the pod's grace, not -grace's")
				assert.Equal(t, []string{"request", "STOP_DEV 0", "done 0", "kill"}, d.events(),
					"the daemon killed only once STOP_DEV completed")
				assert.Less(t, time.Since(t0), tc.want, "the teardown over by its deadline")
				assert.Contains(t, log.String(), tc.said)
				assert.Empty(t, api.Events(), "the server exited before termination, nothing lost: no drain to finish (row 1052)")
			})
		})
	}
}

// The context of the daemon's teardown after the server exited on its own
// (followBudget) says, from its Deadline, the deadline it ends at as the
// budget moves it: the teardown's stages, and whatever the teardown starts
// under it, read their time from there. A context that took the budget's
// deadline once (Budget.Context, as before row 792) would say 95 s while it
// ended at 27 s. In virtual time, grace 100 s, the preStop call at 0 s:
//
//	0 s   the teardown begins: the deadline 95 s
//	1 s   a deletion read: SIGKILL at 30 s, the deadline 27 s
//	2 s   the kubelet runs the termination over (a restarted kubelet, the
//	      hook called again) with the deletion's 30 s: SIGKILL later, at
//	      32 s; not followed, still 27 s
//	3 s   Force (or none): the daemon step's reserve from then, 3 s of the
//	      30 s in use: 6 s; ended then, or at 27 s, with the cause
func TestTeardownContextSaysTheDeadlineOfABudgetMovedEarlier(t *testing.T) {
	for _, tc := range []struct {
		name  string
		force bool
		ends  time.Duration
		cause error
	}{{"moved", false, 27 * time.Second, errBudgetMoved}, {"forced", true, 6 * time.Second, drain.ErrForced}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sup, _ := hungTeardown(t, io.Discard)
				t0 := time.Now()
				require.True(t, sup.budget.OnPreStop(t0))
				ctx, stop := sup.followBudget()
				defer stop()
				deadlineIs := func(want time.Duration, why string) {
					t.Helper()
					synctest.Wait() // the follower has taken the move
					dl, ok := ctx.Deadline()
					require.True(t, ok)
					assert.Equal(t, want, dl.Sub(t0), why)
					assert.NoError(t, ctx.Err(), "not ended before its deadline")
				}
				deadlineIs(95*time.Second, "the budget's deadline")
				time.Sleep(time.Second)
				require.True(t, sup.budget.Tighten(t0.Add(30*time.Second)))
				deadlineIs(27*time.Second, "the deletion's SIGKILL less its margin")
				time.Sleep(time.Second)
				require.True(t, sup.budget.OnRestart(time.Now(), 30*time.Second))
				require.True(t, sup.budget.Deadline().After(t0.Add(27*time.Second)), "the budget moved later")
				deadlineIs(27*time.Second, "a move later is not followed")
				time.Sleep(time.Second)
				if tc.force {
					sup.drainer.Force()
					deadlineIs(6*time.Second, "the step's reserve from the Force")
				}
				<-ctx.Done()
				assert.Equal(t, tc.ends, time.Since(t0), "ended at the deadline it said")
				assert.ErrorIs(t, context.Cause(ctx), tc.cause)
			})
		})
	}
}

// hungDaemon is an in-process ublk daemon, for virtual time, over a fake
// sysfs with one live device: it takes the stop request and does nothing,
// and is the control device too, whose STOP_DEV removes the disk and
// completes 200 ms later (the device DEAD then), DEL_DEV its char device.
type hungDaemon struct {
	tree   *fakeublk.Tree
	exited chan struct{}

	mu    sync.Mutex
	log   []string
	at    []time.Time
	state ublkctl.DevState
}

func newHungDaemon(t *testing.T) *hungDaemon {
	tree, err := fakeublk.NewTree(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 0, Major: 4000, Minor: 0})) // no real disk has these numbers
	return &hungDaemon{tree: tree, exited: make(chan struct{}), state: ublkctl.StateLive}
}

func (d *hungDaemon) event(e string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log, d.at = append(d.log, e), append(d.at, time.Now())
}

func (d *hungDaemon) events() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(d.log), func(e string) bool { return strings.HasPrefix(e, "DEL_DEV") })
}

// timeline is every event with its time after t0.
func (d *hungDaemon) timeline(t0 time.Time) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for i, e := range d.log {
		out = append(out, fmt.Sprintf("%s at %v", e, d.at[i].Sub(t0)))
	}
	return strings.Join(out, ", ")
}

func (d *hungDaemon) RequestStop(context.Context) error { d.event("request"); return nil }

func (d *hungDaemon) Wait(ctx context.Context) error {
	select {
	case <-d.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *hungDaemon) Kill(context.Context) error {
	d.event("kill")
	close(d.exited)
	return nil
}

func (d *hungDaemon) DevInfo(_ context.Context, id int) (ublkctl.DevInfo, error) {
	if !d.tree.HasChar(id) {
		return ublkctl.DevInfo{}, fmt.Errorf("dev %d: no such device", id)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return ublkctl.DevInfo{DevID: uint32(id), State: d.state, NrHWQueues: 1, QueueDepth: 128}, nil
}

func (d *hungDaemon) StopDev(ctx context.Context, id int) error {
	d.event(fmt.Sprintf("STOP_DEV %d", id))
	_ = d.tree.StopDevice(id)
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	d.mu.Lock()
	d.state = ublkctl.StateDead
	d.mu.Unlock()
	d.event(fmt.Sprintf("done %d", id))
	return nil
}

func (d *hungDaemon) DelDev(_ context.Context, id int) error {
	d.event(fmt.Sprintf("DEL_DEV %d", id))
	return d.tree.DeleteDevice(id)
}

func (d *hungDaemon) Close() error { return nil }

// Fault (row 1055): the daemon step's reserve in the plan followed the grace
// in use (liveStepReserve), but its ublk teardown was built at start with
// -grace's and laid its stages out from it: with -grace 1h (30 s) and a
// 30 s deletion (3 s) every window the step got was shorter than its
// stages, the holder wait got nothing, and a disk whose holder lets go a
// second later was given up on at once. The daemon step as drain runs it,
// its fake device held by dm-0 for 1 s, a 25 s window:
//
//	0 s     the pod's deletion read at SIGTERM: the grace in use 30 s
//	before: the holder wait over at once, "devices still open, daemon
//	        not asked to stop" (*HeldError): the device live for SIGKILL
//	1 s     dm-0 lets go: the daemon is asked to stop
func TestDaemonStepWaitsForHoldersWithTheReserveOfTheGraceInUse(t *testing.T) {
	tree, err := fakeublk.NewTree(filepath.Join(t.TempDir(), "sys"))
	require.NoError(t, err)
	require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 0, Major: 4000, Minor: 0})) // no real disk has these numbers
	holders := filepath.Join(tree.Root, "block", "ublkb0", "holders")
	require.NoError(t, os.MkdirAll(holders, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(holders, "dm-0"), nil, 0o644))
	t.Setenv(EnvSysfsRoot, tree.Root)
	t.Setenv(EnvProcfsRoot, emptyProcfs(tree.Root))
	cfg, err := parseArgs([]string{"-grace", "1h", "-daemon", "ublkd", "--", "server"}, io.Discard)
	require.NoError(t, err)
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	t.Cleanup(sup.learned.Close)
	gone := make(chan struct{})
	close(gone)
	// A daemon already reaped: asked to stop, it is seen gone at once, and its device,
	// which nothing removes, orphaned; what this test looks at is when it is asked.
	sup.daemon = &child{name: StepDaemon, done: gone}
	var step drain.Step
	for _, st := range sup.steps {
		if st.Phase().Name == StepDaemon {
			step = st
		}
	}
	require.NotNil(t, step)

	now := time.Now()
	sup.budget.OnSIGTERM(now)
	sup.budget.Tighten(now.Add(30 * time.Second)) // the deletion's grace, read at SIGTERM
	require.Equal(t, 3*time.Second, step.Phase().Reserve(), "the plan's reserve: the grace in use's")
	let := time.AfterFunc(time.Second, func() { _ = os.Remove(filepath.Join(holders, "dm-0")) })
	defer let.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	detail, err := step.Run(ctx)
	rep, ok := detail.(*ublk.Report)
	require.True(t, ok, "%T", detail)
	t.Log(rep.String())
	var held *ublk.HeldError
	assert.False(t, errors.As(err, &held), "not given up on under its holder: %v", err)
	assert.Nil(t, rep.LastResort, "no last resort: the holder let go within the holder wait")
	h := rep.Step("holders")
	require.NotNil(t, h)
	assert.GreaterOrEqual(t, h.Duration, time.Second, "the holder wait ran until dm-0 let go")
	req := rep.Step("request stop")
	require.NotNil(t, req, "the daemon asked to stop")
	assert.GreaterOrEqual(t, req.Start.Sub(now), time.Second)
}
