package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
//	~0 s     a deletion read: SIGKILL at 6 s, the step's deadline about 4 s
//	before:  the step cancelled there, the daemon never killed, left running
//	after:   the stages laid out again by then: the daemon killed within the new window
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
	moved := make(chan time.Time, 1)
	go func() {
		// Once the step has asked the daemon to stop: its stages are laid out.
		events := filepath.Join(cfg.StateDir, EventLogFile)
		for !strings.Contains(readEvents(events), "request shutdown") {
			time.Sleep(10 * time.Millisecond)
		}
		b.Tighten(b.Start().Add(6 * time.Second))
		moved <- time.Now()
	}()
	rep := s.Drainer().Shutdown(context.Background())
	at := <-moved

	step := rep.Phase("ublk")
	require.NotNil(t, step)
	t.Logf("budget moved %v into the drain; step %s by %v (deadline %v): %s", at.Sub(b.Start()), step.Result,
		step.End.Sub(b.Start()), step.Deadline.Sub(b.Start()), step.Error)
	assert.True(t, step.Deadline.Before(b.Start().Add(6*time.Second)), "the step's deadline moved before the new SIGKILL")
	td, ok := step.Detail.(*ublk.Report)
	require.True(t, ok, "the teardown's account is the step's Detail: %T", step.Detail)
	assert.True(t, td.Daemon.Killed, "the hung daemon killed within the step's new window: %s", td.String())
	assert.False(t, td.Daemon.LeftRunning, td.String())
	select {
	case <-s.daemon.Done():
	case <-time.After(time.Second):
		t.Error("the daemon still runs after the step")
	}
}

// readEvents returns the fake device daemon's event log, "" before it has one.
func readEvents(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
