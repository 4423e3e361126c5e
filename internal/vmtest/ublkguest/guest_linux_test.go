//go:build linux

package ublkguest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/ublkserver"
	"github.com/drainkit/drainkit/internal/vmtest"
	"github.com/drainkit/drainkit/ublk"
)

// TestInVM runs every guest test below in one boot of the cached 6.12
// kernel.
func TestInVM(t *testing.T) {
	vmtest.RunGuestTests(t, vmtest.Config{Run: "^TestGuest", Modules: []string{"ublk_drv"}, Timeout: 150 * time.Second, Env: raceOptions()})
}

// raceOptions passes the host's GORACE, when it is set, to the guest's tests, whose
// environment is otherwise only what /init gives them: .ci/run sets the race runtime's
// sleep at a program's exit to 50 ms, and in the guest, under TCG, every daemon that
// exits on its own (each step test waits for it) and the guest test binary slept the
// default second there.
func raceOptions() []string {
	if v, ok := os.LookupEnv("GORACE"); ok {
		return []string{"GORACE=" + v}
	}
	return nil
}

const diskSize = 16 << 20

// rig is one daemon with a backing store and an event log, and the
// outside control handle.
type rig struct {
	t       *testing.T
	dir     string
	daemon  *ublkserver.Daemon
	ctl     *ublkserver.Control
	logFrom int
}

func newRig(t *testing.T, cfg ublkserver.DaemonConfig) *rig {
	t.Helper()
	log, err := vmtest.KernelLog()
	require.NoError(t, err)
	r := &rig{t: t, dir: t.TempDir(), logFrom: len(log)}
	cfg.BackingDir = r.dir
	cfg.EventLog = r.events()
	if cfg.Size == 0 {
		cfg.Size = diskSize
	}
	r.ctl, err = ublkserver.OpenControl()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if cfg.UID != 0 {
		defer asUdev(t, r.dir, cfg.UID)()
	}
	r.daemon, err = ublkserver.StartDaemon(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(r.cleanup)
	return r
}

// asUdev sets the guest up for a daemon run as user uid, as a node's
// udev rules do for a user's ublk server: /dev/ublk-control writable by
// all (ublksrv's rule), dir the user's, and each /dev/ublkcN given to the
// user as it appears, until the returned stop is called.
func asUdev(t *testing.T, dir string, uid int) (stop func()) {
	t.Helper()
	require.NoError(t, os.Chmod(ublkserver.ControlPath, 0o666))
	t.Cleanup(func() { _ = os.Chmod(ublkserver.ControlPath, 0o600) })
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711)) // t.TempDir's parent, root's alone
	require.NoError(t, os.Chown(dir, uid, uid))
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			nodes, _ := filepath.Glob("/dev/ublkc[0-9]*")
			for _, n := range nodes {
				var st unix.Stat_t
				if unix.Stat(n, &st) == nil && int(st.Uid) != uid {
					_ = os.Chown(n, uid, uid)
				}
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// cleanup leaves nothing behind even when a test failed half-way: thaw
// the daemon (so no request is held), stop its devices from outside, then
// kill it, which is safe once they are stopped.
func (r *rig) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	select {
	case <-r.daemon.Exited():
	default:
		_ = r.daemon.Cmd.Process.Signal(ublkserver.SignalThaw)
		for _, id := range r.daemon.Devices {
			_ = r.ctl.StopDev(ctx, id)
		}
		_ = r.daemon.Cmd.Process.Kill()
		_ = r.daemon.Wait(ctx)
	}
	for _, id := range r.daemon.Devices {
		_ = r.ctl.DelDev(ctx, id)
	}
	_ = r.ctl.Close()
}

// events is the daemon's event log.
func (r *rig) events() string { return filepath.Join(r.dir, "events") }

func (r *rig) disk(id int) string { return fmt.Sprintf("/dev/ublkb%d", id) }

func (r *rig) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(r.t.Context(), d)
	r.t.Cleanup(cancel)
	return ctx
}

// observe gathers what CheckSafeTeardown needs once the teardown is over.
func (r *rig) observe(writes []Write) Observed {
	r.t.Helper()
	events, err := ublkserver.ReadEvents(r.events())
	require.NoError(r.t, err)
	disk, err := os.ReadFile(ublkserver.BackingFile(r.dir, r.daemon.Devices[0]))
	require.NoError(r.t, err)
	return Observed{
		Devices:   r.daemon.Devices,
		DaemonErr: r.daemon.Wait(r.ctx(20 * time.Second)),
		Events:    events,
		Writes:    writes,
		Disk:      disk,
		Control:   r.ctl,
		LogFrom:   r.logFrom,
	}
}

// startWriter starts a Writer over the whole disk and returns once it has
// had 20 writes acknowledged, so the teardown meets a writer in full swing.
func startWriter(t *testing.T, disk string, tag uint32) *Writer {
	t.Helper()
	w, err := StartWriter(disk, 0, diskSize, tag)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = w.Stop(context.Background()) })
	require.Eventually(t, func() bool { return len(w.Writes()) >= 20 }, 20*time.Second, 5*time.Millisecond)
	return w
}

// TestGuestKernelIsClassifiedVulnerable classifies the guest's own release
// string: Debian's 6.12.y has no backport of the ublk cancel fix.
func TestGuestKernelIsClassifiedVulnerable(t *testing.T) {
	vmtest.GuestOnly(t)
	var uts unix.Utsname
	require.NoError(t, unix.Uname(&uts))
	release := unix.ByteSliceToString(uts.Release[:])
	t.Logf("guest kernel %s", release)
	td, err := ublk.New(nil, ublk.Config{}) // reads uname itself
	require.NoError(t, err)
	got, class := td.Kernel()
	assert.Equal(t, release, got)
	assert.Equal(t, ublk.KernelVulnerable, class)
	assert.Equal(t, "vendor_build", td.KernelDecision().Rule)
	assert.False(t, class.MayKillWithLiveDevices())
}

// TestGuestDaemonOwnStopPassesTheChecks is the reference for the checks:
// a cooperative daemon stopping itself on SIGTERM (the safe order) while a
// writer loops on its disk passes every one of them.
func TestGuestDaemonOwnStopPassesTheChecks(t *testing.T) {
	vmtest.GuestOnly(t)
	r := newRig(t, ublkserver.DaemonConfig{Config: ublkserver.Config{IODelay: 2 * time.Millisecond}})
	w := startWriter(t, r.disk(r.daemon.Devices[0]), 1)
	require.NoError(t, r.daemon.Cmd.Process.Signal(unix.SIGTERM))
	<-w.Done() // the disk went away under it
	writes, err := w.Stop(r.ctx(10 * time.Second))
	require.NoError(t, err)
	assert.True(t, CheckSafeTeardown(t, r.observe(writes)))
	t.Logf("%d writes, last: %+v", len(writes), writes[len(writes)-1])
}

// TestGuestWrongOrderIsCaught runs the order drainkit prevents, killing
// the daemon with a write in flight before stopping its devices, and
// shows that the checks every teardown test applies catch it.
func TestGuestWrongOrderIsCaught(t *testing.T) {
	vmtest.GuestOnly(t)
	r := newRig(t, ublkserver.DaemonConfig{Config: ublkserver.Config{IODelay: 2 * time.Millisecond}})
	w := startWriter(t, r.disk(r.daemon.Devices[0]), 2)
	watch, err := WatchExit(r.daemon.Pid(), r.daemon.Devices)
	require.NoError(t, err)
	require.NoError(t, KillFirst(r.ctx(20*time.Second), r.daemon, r.ctl, r.events()))
	writes, err := w.Stop(r.ctx(10 * time.Second))
	require.NoError(t, err)
	_, atExit, err := watch.Result(r.ctx(10 * time.Second))
	require.NoError(t, err)
	t.Logf("driver state when the killed daemon died: %v", atExit)

	var rec Recorder
	assert.False(t, CheckSafeTeardown(&rec, r.observe(writes)), "the checks must fail on the wrong order")
	failures := strings.Join(rec.Failures, "\n")
	t.Logf("the checks reported:\n%s", failures)
	assert.Contains(t, failures, "daemon did not exit by itself")
	assert.Contains(t, failures, "a write the live disk accepted failed")
}
