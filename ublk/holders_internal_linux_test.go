//go:build linux

package ublk

import (
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// busyRing writes a fake /proc/42, "spdk", with an io_uring at fd 9 whose
// registered files the kernel does not list (the ring's lock was held at
// every read: "UserFiles: 2" and no slot lines), and returns its fdinfo.
func busyRing(t *testing.T, f *fixture) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(f.proc, "42", "fd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.proc, "42", "comm"), []byte("spdk\n"), 0o644))
	require.NoError(t, os.Symlink("anon_inode:[io_uring]", filepath.Join(f.proc, "42", "fd", "9")))
	require.NoError(t, os.MkdirAll(filepath.Join(f.proc, "42", "fdinfo"), 0o755))
	info := filepath.Join(f.proc, "42", "fdinfo", "9")
	require.NoError(t, os.WriteFile(info, []byte("SqThread:\t-1\nUserFiles:\t2\nUserBufs:\t0\nPollList:\n"), 0o644))
	return info
}

// 0 .. a process's io_uring is busy: the kernel does not list its
// registered files, so it may hold the disk (a possible holder); the step
// scans again every PollInterval .. 2 s: the ring is listed at last, and
// holds nothing .. the next scan finds no holder, and the daemon is asked
// to stop then. Before, the step went on at 0, naming the process only in
// the holders step's error, and asked the daemon to stop under a ring that
// might hold the disk.
func TestStepWaitsForAPossibleHolderUntilItsRingIsListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		info := busyRing(t, f)
		go func() {
			time.Sleep(2 * time.Second)
			idle := info + ".idle"
			if os.WriteFile(idle, []byte("UserFiles:\t0\nUserBufs:\t0\n"), 0o644) == nil {
				_ = os.Rename(idle, info)
			}
		}()
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 3600*time.Second)
		require.NoError(t, err)
		h, req := rep.Step("holders"), rep.Step("request stop")
		require.NotNil(t, h)
		require.NotNil(t, req)
		assert.Equal(t, "no holders", h.Result)
		assert.Empty(t, h.Err)
		assert.GreaterOrEqual(t, req.Start.Sub(rep.Start), 2*time.Second, "not asked while the ring may hold the disk")
		assert.Less(t, req.Start.Sub(rep.Start), 2*time.Second+2*td.cfg.poll, "asked at the first scan after it is listed")
		require.NotEmpty(t, rep.Device(0).Holders)
		p := rep.Device(0).Holders[0]
		assert.Equal(t, Holder{PID: 42, Comm: "spdk", Kind: blockdev.Possible, Detail: p.Detail}, p, "the Report names who was waited for")
		assert.Contains(t, p.Detail, "io_uring fd 9: the registered files not listed")
		assert.Equal(t, VerdictStopped, rep.Verdict)
	})
}

// A ring the kernel never lists through the holder wait (its lock held all
// along) is waited for to the end of the wait, then set aside: with the
// last resort off nothing is killed, and the daemon is asked to stop all
// the same, the Report's "possible holders" step naming the process once
// however many numbers the disk has. Before, the daemon was asked at once;
// in the first version of the rule, never (HeldError), leaving it to die
// with the disk live.
func TestStepSetsAsideAPossibleHolderAtTheEndOfTheHolderWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		busyRing(t, f)
		part := filepath.Join(f.tree.Root, "block", "ublkb0", "ublkb0p1") // a partition: a second number
		require.NoError(t, os.MkdirAll(part, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(part, "dev"), []byte("4001:1\n"), 0o644))
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{HolderWait: 2 * time.Second, NoLastResort: true}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		h := rep.Step("holders")
		require.NotNil(t, h)
		assert.Contains(t, h.Err, "still held open")
		aside, req := rep.Step("possible holders"), rep.Step("request stop")
		require.NotNil(t, aside)
		require.NotNil(t, req)
		assert.Equal(t, "1 process(es) set aside", aside.Result, "listed once, however many numbers the disk has")
		assert.Contains(t, aside.Err, "pid 42 (spdk) possible io_uring fd 9: the registered files not listed")
		assert.GreaterOrEqual(t, req.Start.Sub(rep.Start), 2*time.Second, "not asked before the holder wait ends")
		assert.Less(t, req.Start.Sub(rep.Start), 2*time.Second+2*td.cfg.poll, "asked when it ends")
		assert.Equal(t, VerdictStopped, rep.Device(0).Verdict)
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "exit done"}, d.Events(), "the daemon was asked to stop, and stopped its device")
	})
}
