package ublk

import (
	"path/filepath"
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
