//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
)

// startDaemon starts a fake daemon (silent, as AgentENV's may be) as a
// child of the test process and returns it and its socket.
func startDaemon(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	return startDaemonOn(t, filepath.Join(t.TempDir(), "ublkd.sock"))
}

func startDaemonOn(t *testing.T, sock string) (*exec.Cmd, string) {
	t.Helper()
	dir := t.TempDir()
	cfg, err := json.Marshal(fakeublk.DaemonConfig{SysRoot: filepath.Join(dir, "sys"), Socket: sock, Silent: true,
		Devices: []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}}})
	require.NoError(t, err)
	cmd := helperCmd(helperCommand("daemon", string(cfg)))
	cmd.Stdout = nil
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool { _, err := peerPid(sock); return err == nil }, 10*time.Second, 10*time.Millisecond)
	return cmd, sock
}

func TestOwnedDaemonIsFoundByItsSocketAmongTheServersDescendants(t *testing.T) {
	d, sock := startDaemon(t)
	var log bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&log, nil))

	// The test process plays the server: the daemon is its child.
	o := newOwnedDaemon(sock, lg, func() (int, bool) { return os.Getpid(), true })
	defer o.close()
	require.NoError(t, o.find())
	st := o.state()
	assert.Equal(t, d.Process.Pid, st.Pid, "SO_PEERCRED names the listener")
	assert.Contains(t, st.Argv, "helper:daemon")
	assert.False(t, st.Exited)

	// A socket served by a process outside the server's tree is refused:
	// here the supervisor's own.
	strangerSock := filepath.Join(t.TempDir(), "other.sock")
	ln, err := net.Listen("unix", strangerSock)
	require.NoError(t, err)
	defer ln.Close()
	other := exec.Command("sleep", "30")
	require.NoError(t, other.Start())
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	stranger := newOwnedDaemon(strangerSock, lg, func() (int, bool) { return other.Process.Pid, true })
	assert.ErrorContains(t, stranger.find(), "is neither a descendant")

	// Stopped over its socket without an answer, then its exit: delivered.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, o.RequestStop(ctx))
	require.NoError(t, o.Wait(ctx))
	assert.True(t, o.state().Exited)
}

func TestOwnedDaemonThatIsNotRunningNeedsNoStop(t *testing.T) {
	o := newOwnedDaemon(filepath.Join(t.TempDir(), "none.sock"), slog.New(slog.DiscardHandler),
		func() (int, bool) { return os.Getpid(), true })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	assert.NoError(t, o.RequestStop(ctx), "nothing listens: nothing to stop")
	assert.NoError(t, o.Wait(ctx))
	assert.Zero(t, o.state().Pid, "never found")
}

// A server that starts its daemon again: the exited one is replaced by the
// one listening now.
func TestOwnedDaemonThatIsReplacedIsFoundAgain(t *testing.T) {
	first, sock := startDaemon(t)
	o := newOwnedDaemon(sock, slog.New(slog.DiscardHandler), func() (int, bool) { return os.Getpid(), true })
	defer o.close()
	require.NoError(t, o.find())
	require.Equal(t, first.Process.Pid, o.state().Pid)
	require.NoError(t, first.Process.Kill())
	_ = first.Wait()
	require.NoError(t, o.find(), "nothing listens: the exited one stays")
	assert.True(t, o.state().Exited)

	second, _ := startDaemonOn(t, sock)
	require.NoError(t, o.find())
	assert.Equal(t, second.Process.Pid, o.state().Pid)
	assert.False(t, o.state().Exited)
}
