//go:build linux

package ublk

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/fakeublk"
)

// ublkServerHolder is device 0 of a fake sysfs, its char device numbered
// 4091:m, a cooperative daemon of it (10 ms a step) in the server's
// cgroup, a control device whose STOP_DEV takes 10 ms, and pid 99 of a
// fake procfs in a cgroup below the server's (0::/kubepods/pod1/ctr), with
// ublkb0 (fd 3) and ublkc0 (fd 4) open; the step (a vulnerable kernel,
// sandboxd's 500 ms reserve, a scan every 5 s) kills as the real last
// resort does, each process pinned as pins has it (pid 99 as a fakeVMM;
// a test adds its own), and logs to the buffer returned.
func ublkServerHolder(t *testing.T) (f *fixture, d *memDaemon, srv *fakeVMM, pins map[int]pinned, td *Teardown, logs *bytes.Buffer) {
	t.Helper()
	minor := uint32(os.Getpid()*2+29) % (1 << 20)
	tree, err := fakeublk.NewTree(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 0, Major: 4000, Minor: 0, CharMajor: 4091, CharMinor: minor}))
	f = &fixture{tree: tree, proc: t.TempDir()}
	self := strconv.Itoa(os.Getpid())
	require.NoError(t, os.MkdirAll(filepath.Join(f.proc, self, "fd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.proc, self, "cgroup"), []byte("0::/kubepods/pod1/ctr\n"), 0o644))
	require.NoError(t, os.Symlink(self, filepath.Join(f.proc, "self")))

	dir := t.TempDir()
	disk, char := filepath.Join(dir, "ublkb0"), filepath.Join(dir, "ublkc0")
	require.NoError(t, unix.Mknod(disk, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
	require.NoError(t, unix.Mknod(char, unix.S_IFCHR|0o600, int(unix.Mkdev(4091, minor))))
	srv = &fakeVMM{t: t, dir: filepath.Join(f.proc, "99"), node: disk, gone: make(chan struct{})}
	srv.start("ublksrv", 1000)
	require.NoError(t, os.Symlink(char, filepath.Join(srv.dir, "fd", "4")))
	require.NoError(t, os.WriteFile(filepath.Join(srv.dir, "cgroup"), []byte("0::/kubepods/pod1/ctr/srv\n"), 0o644))

	d = newMemDaemon(f.tree, 0)
	d.step = 10 * time.Millisecond
	t.Cleanup(d.close)
	logs = &bytes.Buffer{}
	ctl := &memControl{tree: f.tree, d: d, stopIn: 10 * time.Millisecond}
	td, err = New(d, f.config(vulnerable, ctl, Config{Reserve: 500 * time.Millisecond, PollInterval: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}))
	require.NoError(t, err)
	doomedDaemon(td)
	pins = map[int]pinned{99: srv}
	td.cfg.killHolders = func(ctx context.Context, procRoot string, held map[int][]Holder, devs map[blockdev.DevNum]int, daemon int) (string, []HolderFate) {
		return killPinned(ctx, procRoot, held, devs, daemon, func(pid int) (pinned, error) {
			if p := pins[pid]; p != nil {
				return p, nil
			}
			return nil, os.ErrProcessDone
		})
	}
	return f, d, srv, pins, td, logs
}

// A ublk server, pid 99 (a per-device server the daemon forked, whose PID
// the step does not know: /dev/ublkc0 is open in it), and a VMM of the
// pod, pid 98, both in the server's cgroup, hold ublkb0 open to the end;
// 60 s window, sandboxd's 500 ms reserve, a vulnerable kernel; procfs gets
// slow at the last-resort point:
//
//	59.5 s    the last-resort point; the holder wait's last scan reads
//	          each process 200 ms after it comes to it
//	59.65 s   the last resort's part of the reserve is over, the scan not
//	59.7 s    the scan ends and the last resort begins, its window over
//
// A prompt look, begun past the window, still reads the holders' fds
// (with the slack the last resort's reads have): pid 99 is found a ublk
// server and spared, pid 98 is not one and, doomed, gets its SIGKILL, as
// a doomed holder does past the window. Before, the look gave up before
// reading any process and found no server: pid 99 was SIGKILLed with its
// device live.
func TestLastResortOutOfTimeStillTellsAUblkServerFromAVMM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _, srv, pins, td, _ := ublkServerHolder(t)
		vmm := &fakeVMM{t: t, dir: filepath.Join(f.proc, "98"), node: srv.node, gone: make(chan struct{})}
		vmm.start("qemu", 1000)
		require.NoError(t, os.WriteFile(filepath.Join(vmm.dir, "cgroup"), []byte("0::/kubepods/pod1/ctr/vmm\n"), 0o644))
		pins[98] = vmm
		start := time.Now()
		td.cfg.beforeProcess = func(string) {
			if time.Since(start) >= 59500*time.Millisecond {
				time.Sleep(200 * time.Millisecond)
			}
		}

		rep, _, _ := runFor(t, td, 60*time.Second)
		t.Log(rep.String())
		last := rep.Step("last resort")
		require.NotNil(t, last)
		require.Equal(t, 59700*time.Millisecond, last.Start.Sub(start), "the last resort begins with its window over")
		assert.Empty(t, srv.sent, "pid 99 is a ublk server: not SIGKILLed")
		assert.Len(t, vmm.sent, 1, "pid 98, a doomed VMM, gets its SIGKILL")
		for _, h := range rep.LastResort.Holders {
			if h.Holder.PID == 99 {
				assert.Contains(t, h.Reason, "a ublk server: it has /dev/ublkc0 open")
			}
		}
	})
}
