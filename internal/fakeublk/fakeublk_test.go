package fakeublk

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/frame"
	"github.com/drainkit/drainkit/internal/gobuild"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	MainIfDaemon()
	goleak.VerifyTestMain(m)
}

func TestTreeFollowsDeviceLifecycle(t *testing.T) {
	tree, err := NewTree(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, tree.AddDevice(DeviceSpec{ID: 3, Major: 259, Minor: 7, Reads: 2, Writes: 5}))
	assert.Equal(t, []int{3}, tree.Devices())
	dev, err := os.ReadFile(filepath.Join(tree.Root, "block/ublkb3/dev"))
	require.NoError(t, err)
	assert.Equal(t, "259:7\n", string(dev))
	in, err := os.ReadFile(filepath.Join(tree.Root, "block/ublkb3/inflight"))
	require.NoError(t, err)
	assert.Equal(t, []string{"2", "5"}, strings.Fields(string(in)))
	fi, err := os.Lstat(filepath.Join(tree.Root, "class/ublk-char/ublkc3"))
	require.NoError(t, err)
	assert.True(t, fi.Mode()&os.ModeSymlink != 0, "class entries are symlinks, as in sysfs")

	require.NoError(t, tree.StopDevice(3))
	assert.False(t, tree.HasDisk(3))
	assert.True(t, tree.HasChar(3))
	require.NoError(t, tree.DeleteDevice(3))
	assert.Empty(t, tree.Devices())
	require.NoError(t, tree.DeleteDevice(3), "deleting twice is not an error")
}

func startDaemon(t *testing.T, cfg DaemonConfig) *Child {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

func waitDone(t *testing.T, d *Child) {
	t.Helper()
	select {
	case <-d.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not exit")
	}
}

func twoDevices() []DeviceSpec {
	return []DeviceSpec{{ID: 0, Major: 259, Minor: 0, Reads: 1}, {ID: 1, Major: 259, Minor: 1, Writes: 4}}
}

func TestCooperativeDaemonStopsOnSIGTERM(t *testing.T) {
	sys, log := t.TempDir(), filepath.Join(t.TempDir(), "events")
	d := startDaemon(t, DaemonConfig{SysRoot: sys, Devices: twoDevices(), EventLog: log})
	tree := &Tree{Root: sys}
	assert.Equal(t, []int{0, 1}, tree.Devices(), "devices exist once Start returns")
	require.NoError(t, syscall.Kill(d.Pid(), syscall.SIGTERM))
	waitDone(t, d)
	assert.Equal(t, 0, d.ExitCode())
	assert.Empty(t, tree.Devices())
	ev, _ := os.ReadFile(log)
	assert.Equal(t, "start\nsigterm\nstop 0\ndelete 0\nstop 1\ndelete 1\nexit\n", string(ev))
}

func TestShutdownRequestOnTheWire(t *testing.T) {
	sys, sock := t.TempDir(), filepath.Join(t.TempDir(), "d.sock")
	d := startDaemon(t, DaemonConfig{SysRoot: sys, Devices: twoDevices(), Socket: sock})
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	body := []byte(`{"kind":"shutdown"}`)
	_, err = c.Write(append([]byte{0, 0, 0, byte(len(body))}, body...))
	require.NoError(t, err)
	var hdr [4]byte
	_, err = io.ReadFull(c, hdr[:])
	require.NoError(t, err)
	resp := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err = io.ReadFull(c, resp)
	require.NoError(t, err)
	assert.JSONEq(t, `{"status":"ok"}`, string(resp))
	waitDone(t, d)
	assert.Equal(t, 0, d.ExitCode())
	assert.Empty(t, (&Tree{Root: sys}).Devices())
}

// Once stopping, the daemon reads no request, as AgentENV's, whose accept
// loop ends at its shutdown while its socket stays bound: a second request
// is taken, never answered, and its connection ends with the process.
func TestStoppingDaemonReadsNoRequest(t *testing.T) {
	sys, sock, log := t.TempDir(), filepath.Join(t.TempDir(), "d.sock"), filepath.Join(t.TempDir(), "events")
	d := startDaemon(t, DaemonConfig{SysRoot: sys, Devices: twoDevices(), Socket: sock, Step: 200 * time.Millisecond, EventLog: log})
	first, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer first.Close()
	require.NoError(t, frame.Write(first, map[string]string{"kind": "shutdown"}))
	var resp map[string]string
	require.NoError(t, frame.Read(first, &resp))
	require.Equal(t, "ok", resp["status"])

	second, err := net.Dial("unix", sock)
	require.NoError(t, err, "the socket is still bound while the daemon stops its devices")
	defer second.Close()
	require.NoError(t, frame.Write(second, map[string]string{"kind": "shutdown"}))
	err = frame.Read(second, &resp)
	ev, _ := os.ReadFile(log) // the daemon logs its exit before it exits
	assert.True(t, strings.HasSuffix(string(ev), "delete 1\nexit\n"), "the read ended only once the daemon had stopped its devices and exited:\n%s", ev)
	assert.Error(t, err, "never answered: the connection ends with the process")
	assert.Equal(t, 1, strings.Count(string(ev), "request shutdown"), "the second request was never read:\n%s", ev)
	assert.Contains(t, string(ev), "connection unread: stopping")
	waitDone(t, d)
	assert.Equal(t, 0, d.ExitCode())
}

func TestUnknownRequestIsAnError(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	d := startDaemon(t, DaemonConfig{SysRoot: t.TempDir(), Socket: sock})
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, frame.Write(c, map[string]string{"kind": "reboot"}))
	var resp map[string]string
	require.NoError(t, frame.Read(c, &resp))
	assert.Equal(t, "error", resp["status"])
	assert.Equal(t, -1, d.ExitCode(), "still running")
}

func TestHungDaemonIgnoresSIGTERMAndRequests(t *testing.T) {
	sys, sock := t.TempDir(), filepath.Join(t.TempDir(), "d.sock")
	d := startDaemon(t, DaemonConfig{SysRoot: sys, Devices: twoDevices(), Socket: sock, Mode: Hung})
	require.NoError(t, syscall.Kill(d.Pid(), syscall.SIGTERM))
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, frame.Write(c, map[string]string{"kind": "shutdown"}))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	var resp map[string]string
	err = frame.Read(c, &resp)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "a hung daemon never answers")
	assert.Equal(t, -1, d.ExitCode())
	assert.Equal(t, []int{0, 1}, (&Tree{Root: sys}).Devices())
	d.Close()
	assert.True(t, d.Signaled(syscall.SIGKILL))
}

func TestCrashingDaemonLeavesRemainingDevices(t *testing.T) {
	sys := t.TempDir()
	d := startDaemon(t, DaemonConfig{SysRoot: sys, Devices: twoDevices(), Mode: Crash})
	require.NoError(t, syscall.Kill(d.Pid(), syscall.SIGTERM))
	waitDone(t, d)
	assert.Equal(t, CrashStatus, d.ExitCode())
	tree := &Tree{Root: sys}
	assert.Equal(t, []int{1}, tree.Devices())
	assert.True(t, tree.HasDisk(1), "the device it did not reach stays live")
}

func TestConfigValidation(t *testing.T) {
	_, err := Start(context.Background(), DaemonConfig{})
	assert.ErrorContains(t, err, "SysRoot")
	_, err = Start(context.Background(), DaemonConfig{SysRoot: "x", Mode: "sleepy"})
	assert.ErrorContains(t, err, "Mode")
}

func TestParseArgs(t *testing.T) {
	cfg, err := ParseArgs([]string{"-sysfs", "/tmp/s", "-devices", "2,5", "-major", "7", "-inflight", "3,4",
		"-socket", "/tmp/d.sock", "-mode", "slow", "-crash-after", "2", "-events", "/tmp/ev"})
	require.NoError(t, err)
	assert.Equal(t, DaemonConfig{SysRoot: "/tmp/s", Socket: "/tmp/d.sock", Mode: Slow, Step: time.Second, CrashAfter: 2, EventLog: "/tmp/ev",
		Devices: []DeviceSpec{{ID: 2, Major: 7, Minor: 2, Reads: 3, Writes: 4}, {ID: 5, Major: 7, Minor: 5, Reads: 3, Writes: 4}}}, cfg)
	for _, bad := range [][]string{{}, {"-sysfs", "x", "-devices", "a"}, {"-sysfs", "x", "-inflight", "3"}, {"-sysfs", "x", "-mode", "odd"}, {"-nope"}} {
		_, err := ParseArgs(bad)
		assert.Error(t, err, "%v", bad)
	}
}

func TestFakeublkdCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin, err := gobuild.Program(t.TempDir(), "./internal/fakeublk/fakeublkd")
	require.NoError(t, err)
	sys := t.TempDir()
	cmd := exec.Command(bin, "-sysfs", sys, "-devices", "0,1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "ready\n", line)
	assert.Equal(t, []int{0, 1}, (&Tree{Root: sys}).Devices())
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
	assert.Empty(t, (&Tree{Root: sys}).Devices())
}
