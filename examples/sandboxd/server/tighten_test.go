package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

// Fault: sandboxd's ublk step is the ublk teardown wrapped so that its reserve follows the
// grace in use (reserveFollowsGrace), and the wrapper, embedding only drain.Step, hid the
// teardown's Tighten from drain. A budget that moved SIGKILL earlier while the step ran (a
// deletion read with a shorter grace) reached the teardown as a cancellation alone, its
// stages still laid out in the old window: in front of a hung daemon on a fixed kernel,
// the kill planned near the old window's end was never sent, and the pod's SIGKILL would
// take the daemon with its devices live. The real fake device daemon, a child process:
//
//	0 s      SIGTERM (grace 60 s): no sandbox; the ublk step asks the hung daemon to stop,
//	         its kill laid out near its deadline, about 53 s
//	R        the daemon logs "request shutdown"; a deletion read then: SIGKILL at R + 6 s,
//	         the step's deadline about R + 4 s
//	before:  the step cancelled there, the daemon never killed, left running
//	after:   the stages laid out again by then: the daemon killed within the new window,
//	         then reaped (its exit, however late a loaded machine schedules it)
//
// The new SIGKILL counts from the daemon's line, not from the SIGTERM: a drain that a
// loaded machine starts late leaves the step the same 6 s.
func TestUblkStepIsLaidOutAgainWhenTheBudgetMovesSIGKILLEarlier(t *testing.T) {
	daemonHook = func(c *fakeublk.DaemonConfig) { c.Mode = fakeublk.Hung }
	ublkHook = func(h *ublkhook.Hooks) { h.KernelRelease = "6.14.8" } // fixed: the kill is allowed
	defer func() {
		daemonHook = func(*fakeublk.DaemonConfig) {}
		ublkHook = func(*ublkhook.Hooks) {}
	}()
	cfg := testConfig(t)
	cfg.Grace = 60 * time.Second
	s, err := New(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer s.Close()
	b := s.Drainer().Budget()
	b.OnSIGTERM(time.Now())
	sigkill := make(chan time.Time, 1)
	go func() {
		// Once the step has asked the daemon to stop: its stages are laid out.
		events := filepath.Join(cfg.StateDir, EventLogFile)
		for !strings.Contains(readEvents(events), "request shutdown") {
			time.Sleep(10 * time.Millisecond)
		}
		kill := time.Now().Add(6 * time.Second)
		b.Tighten(kill)
		sigkill <- kill
	}()
	rep := s.Drainer().Shutdown(context.Background())
	kill := <-sigkill

	step := rep.Phase("ublk")
	require.NotNil(t, step)
	t.Logf("budget moved %v into the drain (SIGKILL at + %v); step %s by %v (deadline %v): %s", kill.Add(-6*time.Second).Sub(b.Start()),
		kill.Sub(b.Start()), step.Result, step.End.Sub(b.Start()), step.Deadline.Sub(b.Start()), step.Error)
	assert.True(t, step.Deadline.Before(kill), "the step's deadline moved before the new SIGKILL")
	td, ok := step.Detail.(*ublk.Report)
	require.True(t, ok, "the teardown's account is the step's Detail: %T", step.Detail)
	assert.True(t, td.Daemon.Killed, "the hung daemon killed within the step's new window: %s", td.String())
	assert.False(t, td.Daemon.LeftRunning, td.String())
	if td.Daemon.Killed {
		// A SIGKILLed process always exits: its reaping is the event to wait for, however
		// long a loaded machine takes to schedule it, and the step's kill is what ended it.
		<-s.daemon.Done()
		assert.True(t, s.daemon.Signaled(syscall.SIGKILL), "the step's SIGKILL ended the daemon: %s", s.daemon.State())
	}
}

// readEvents returns the fake device daemon's event log, "" before it has one.
func readEvents(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// Fault: sandboxd's ublk step had its reserve follow the grace in use in the drain plan
// (sizedByGrace) while the teardown laid its own stages out from -grace's (UblkReserve,
// given to ublk.New at start). -grace 10m and a deletion with a 20 s grace: the plan gave
// the step its 1 s reserve and, with no sandbox, a window of about 17.5 s; inside it the
// teardown kept 30 s for its stages, more than the window, so the holder wait got
// nothing, and a disk held by a stacked device that lets go 1 s in was given up on at
// once (the last resort at 0 s) where the step's 1 s reserve leaves it 16.5 s. The real
// fake device daemon, a child process, on a kernel not known fixed:
//
//	0 s      SIGTERM (-grace 10m); the pod's deletion read: SIGKILL at 20 s. No sandbox:
//	         the ublk step starts, ublkb0 held by dm-0
//	before:  the holder wait over at once, the last resort at 0 s, the daemon never asked
//	         to stop (*HeldError), left to the pod's SIGKILL with its device live
//	1 s      dm-0 lets go: the daemon is asked to stop, and exits with no device live
func TestUblkStepWaitsForHoldersWithTheReserveOfTheGraceInUse(t *testing.T) {
	ublkHook = func(h *ublkhook.Hooks) { h.KernelRelease = "6.8.0-45-generic" } // vulnerable
	defer func() { ublkHook = func(*ublkhook.Hooks) {} }()
	cfg := testConfig(t)
	cfg.Grace = 10 * time.Minute
	s, err := New(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer s.Close()
	holders := filepath.Join(sysRoot(cfg.StateDir), "block", "ublkb0", "holders")
	require.NoError(t, os.MkdirAll(holders, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(holders, "dm-0"), nil, 0o644))
	b := s.Drainer().Budget()
	b.OnSIGTERM(time.Now())
	b.Tighten(b.Start().Add(20 * time.Second)) // the deletion's grace, read at SIGTERM
	let := time.AfterFunc(time.Second, func() { _ = os.Remove(filepath.Join(holders, "dm-0")) })
	defer let.Stop()
	rep := s.Drainer().Shutdown(context.Background())

	step := rep.Phase("ublk")
	require.NotNil(t, step)
	td, ok := step.Detail.(*ublk.Report)
	require.True(t, ok, "the teardown's account is the step's Detail: %T", step.Detail)
	t.Logf("step %s by %v (deadline %v): %s\n%s", step.Result, step.End.Sub(b.Start()), step.Deadline.Sub(b.Start()), step.Error, td.String())
	assert.Equal(t, drain.OK, step.Result, step.Error)
	assert.Nil(t, td.LastResort, "no last resort: the holder let go within the holder wait")
	h := td.Step("holders")
	require.NotNil(t, h)
	assert.GreaterOrEqual(t, h.Duration, time.Second, "the holder wait ran until dm-0 let go")
	assert.True(t, td.Daemon.Exited, td.String())
	if !assert.False(t, td.Daemon.LeftRunning, td.String()) {
		s.daemon.Close() // Close would wait for it (holdWhileDaemonServes) until the test's timeout
	}
}
