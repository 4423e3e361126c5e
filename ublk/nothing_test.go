package ublk

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkhook"
)

// A node without ublk (the ublk_drv module not loaded: no
// /sys/class/ublk-char, no /dev/ublk-control) has nothing for the step
// to do, and its Report says so and why, whatever the server configured
// as its daemon: none, a socket no server listens on (the daemon a
// server is wired for does not run on this node), a process that had
// exited. Before, the last two read as VerdictStopped ("the daemon
// stopped and deleted the device"), with no note, after a stop request
// that reached no daemon; and no Note said the module was not loaded. A
// daemon that runs is still asked to stop, with or without devices.
func TestANodeWithoutUblkHasNothingToDo(t *testing.T) {
	for name, daemon := range map[string]func(t *testing.T, tree *fakeublk.Tree) (Daemon, func() []string){
		"no daemon": func(*testing.T, *fakeublk.Tree) (Daemon, func() []string) { return nil, nil },
		"a socket no server listens on": func(t *testing.T, _ *fakeublk.Tree) (Daemon, func() []string) {
			return &Socket{Path: filepath.Join(t.TempDir(), "ublkd.sock")}, nil
		},
		"a daemon that exited": func(t *testing.T, tree *fakeublk.Tree) (Daemon, func() []string) {
			d := newMemDaemon(tree)
			d.exit("before the step")
			t.Cleanup(d.close)
			return d, d.Events
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d, events := daemon(t, nil)
				rep, took, err := runFor(t, withoutUblk(t, d), time.Minute)
				require.NoError(t, err)
				assert.Equal(t, VerdictNothingToDo, rep.Verdict)
				assert.Contains(t, rep.Note, "no ublk devices (no class/ublk-char in sysfs: the ublk_drv module is not loaded)")
				assert.Empty(t, rep.Devices)
				assert.Zero(t, took)
				if d != nil {
					assert.Contains(t, rep.Note, "the daemon is not running: nothing to ask it")
					assert.False(t, rep.Daemon.Requested)
					assert.True(t, rep.Daemon.Exited)
					assert.Nil(t, rep.Step("request stop"), "no request to a daemon that is not there")
				}
				if events != nil {
					assert.Equal(t, []string{"exit before the step"}, events())
				}
			})
		})
	}
	t.Run("a daemon that runs", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			d := newMemDaemon(nil)
			defer d.close()
			rep, _, err := runFor(t, withoutUblk(t, d), time.Minute)
			require.NoError(t, err)
			assert.Equal(t, VerdictStopped, rep.Verdict)
			assert.Equal(t, []string{"request", "exit done"}, d.Events())
		})
	})
}

// withoutUblk is a Teardown for daemon on a node whose sysfs has no ublk
// class and no control device.
func withoutUblk(t *testing.T, daemon Daemon) *Teardown {
	t.Helper()
	td, err := New(daemon, ublkhook.With(Config{ControlPath: filepath.Join(t.TempDir(), "ublk-control")},
		ublkhook.Hooks{SysfsRoot: t.TempDir(), ProcfsRoot: t.TempDir(), KernelRelease: vulnerable}))
	require.NoError(t, err)
	return td
}

// The step's discovery sees two live devices; before it asks, the daemon
// (told by its server, as AgentENV's is) stops and deletes both itself
// and exits, and its socket refuses connections. The devices seen are
// gone, stopped by the daemon: the Report says "stopped", each device's
// steps "by the daemon", and the step does not ask a daemon that had
// exited: its "request stop" step says so, and no request error stands in
// the Report. Before, the request went to the exited daemon, and the
// Report carried its "connection refused" as the request's error.
//
//	0s   discover: ublkb0, ublkb1 live
//	0s   the daemon stops and deletes both itself (2 × 2 × 500 ms), exits
//	2s   the step looks at its daemon: exited; no request; devices gone
func TestADaemonThatStoppedItselfBeforeTheRequestIsNotAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.step = 500 * time.Millisecond
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{}))
		require.NoError(t, err)
		td.cfg.beforeRequest = func() { // the daemon's own stop, ordered by its server
			require.NoError(t, d.RequestStop(t.Context()))
			<-d.exited
			d.failRequest = true // what an exited daemon's socket answers
		}
		rep, took, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		assert.Equal(t, 2*time.Second, took)
		assert.Equal(t, VerdictStopped, rep.Verdict)
		require.Len(t, rep.Devices, 2)
		for _, dev := range rep.Devices {
			assert.Equal(t, VerdictStopped, dev.Verdict)
			require.NotEmpty(t, dev.Steps)
			assert.Equal(t, "by the daemon", dev.Steps[0].Result)
		}
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events(),
			"the daemon's own stop alone: no request from the step")
		assert.False(t, rep.Daemon.Requested)
		assert.Empty(t, rep.Daemon.RequestError)
		assert.True(t, rep.Daemon.Exited)
		req := rep.Step("request stop")
		require.NotNil(t, req)
		assert.Empty(t, req.Err)
		assert.Equal(t, "not sent: the daemon had exited before the step asked (it stopped what it served itself)", req.Result)
	})
}

// What the operator reads of the step without the JSON, its one-line
// summary (Report.String) and its log line, says why it ended as it did:
// the Report's Note. Before, both said "nothing_to_do" alone, and that
// the ublk_drv module is not loaded was only in the JSON.
func TestTheReportsTextAndLogLineSayItsNote(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		td, err := New(nil, ublkhook.With(Config{ControlPath: filepath.Join(t.TempDir(), "ublk-control"),
			Logger: slog.New(slog.NewTextHandler(&logs, nil))},
			ublkhook.Hooks{SysfsRoot: t.TempDir(), ProcfsRoot: t.TempDir(), KernelRelease: vulnerable}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, time.Minute)
		require.NoError(t, err)
		const why = "the ublk_drv module is not loaded"
		require.Contains(t, rep.Note, why)

		lines := strings.Split(rep.String(), "\n")
		assert.Contains(t, lines[0], "ublk teardown: nothing_to_do")
		assert.Equal(t, "  note: "+rep.Note, lines[1], "the Note on the line after the verdict")
		var done string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "ublk teardown done") {
				done = l
			}
		}
		assert.Contains(t, done, "verdict=nothing_to_do")
		assert.Contains(t, done, why, "the log line carries the Note")
	})
}
