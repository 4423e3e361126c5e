//go:build linux

package fakelogind_test

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakelogind"
	"github.com/drainkit/drainkit/internal/realpart"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a Logind on a real dbus-daemon under a temporary directory,
// closed when the test ends.
func start(t *testing.T, cfg fakelogind.Config) *fakelogind.Logind {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		realpart.Missing(t, "fakelogind: dbus-daemon not on PATH (apt-get install dbus-daemon)")
	}
	lg, err := fakelogind.Start(t.TempDir(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, lg.Close()) })
	return lg
}

// The calls the kubelet's shutdown manager makes
// (pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go, v1.34.4), in its
// order, over a connection of its own to the bus: the property, the delay
// lock (a descriptor it stores as a uint32), the match and the signal; it
// terminates its pods on PrepareForShutdown(true), closes the descriptor,
// and on PrepareForShutdown(false) takes a new lock.
func TestTheKubeletsShutdownManagerCalls(t *testing.T) {
	lg := start(t, fakelogind.Config{InhibitDelayMax: 90 * time.Second})
	kubelet, err := dbus.Connect(lg.Address())
	require.NoError(t, err)
	defer kubelet.Close()
	obj := kubelet.Object(fakelogind.Service, fakelogind.Path)

	delay, err := obj.GetProperty(fakelogind.ManagerInterface + ".InhibitDelayMaxUSec")
	require.NoError(t, err)
	assert.Equal(t, uint64(90_000_000), delay.Value(), "InhibitDelayMaxUSec is in microseconds")

	inhibit := func() uint32 {
		t.Helper()
		call := obj.Call(fakelogind.ManagerInterface+".Inhibit", 0, "shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay")
		require.NoError(t, call.Err)
		var fd uint32
		require.NoError(t, call.Store(&fd))
		return fd
	}
	fd := inhibit()
	require.NoError(t, kubelet.AddMatchSignal(dbus.WithMatchInterface(fakelogind.ManagerInterface),
		dbus.WithMatchMember("PrepareForShutdown"), dbus.WithMatchObjectPath(fakelogind.Path)))
	signals := make(chan *dbus.Signal, 4)
	kubelet.Signal(signals)
	defer kubelet.RemoveSignal(signals)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock, err := lg.Held(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"shutdown", "kubelet", "delay"}, []string{lock.What, lock.Who, lock.Mode})
	assert.Equal(t, os.Getpid(), lock.PID())
	assert.Zero(t, lock.ReleasedAt())

	next := func() bool {
		t.Helper()
		select {
		case s := <-signals:
			require.Len(t, s.Body, 1)
			active, ok := s.Body[0].(bool)
			require.True(t, ok, "PrepareForShutdown carries a bool: %#v", s.Body)
			return active
		case <-ctx.Done():
			t.Fatal("no PrepareForShutdown signal")
			return false
		}
	}
	require.NoError(t, lg.PrepareForShutdown(true))
	assert.True(t, next())
	select {
	case <-lock.Released():
		t.Fatal("released before the holder closed its descriptor")
	default:
	}
	closed := time.Now()
	require.NoError(t, syscall.Close(int(fd))) // ReleaseInhibitLock
	select {
	case <-lock.Released():
	case <-ctx.Done():
		t.Fatal("the lock is not released after its descriptor was closed")
	}
	assert.False(t, lock.ReleasedAt().Before(closed))

	require.NoError(t, lg.PrepareForShutdown(false))
	assert.False(t, next())
	fd2 := inhibit()
	defer syscall.Close(int(fd2))
	again, err := lg.Held(ctx)
	require.NoError(t, err)
	assert.NotSame(t, lock, again, "a new lock")
	assert.Len(t, lg.Locks(), 2)
}

// Close ends everything even with a lock held (goleak checks no goroutine
// is left), and Held says it is closed.
func TestCloseWithALockHeld(t *testing.T) {
	lg := start(t, fakelogind.Config{})
	c, err := dbus.Connect(lg.Address())
	require.NoError(t, err)
	defer c.Close()
	var fd uint32
	require.NoError(t, c.Object(fakelogind.Service, fakelogind.Path).Call(fakelogind.ManagerInterface+".Inhibit", 0,
		"shutdown", "test", "holding it", "delay").Store(&fd))
	defer syscall.Close(int(fd))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = lg.Held(ctx)
	require.NoError(t, err)
	require.NoError(t, lg.Close())
	_, err = lg.Held(ctx)
	assert.ErrorContains(t, err, "closed")
}

// Inhibit refuses a mode logind does not know, naming it.
func TestInhibitRefusesABadMode(t *testing.T) {
	lg := start(t, fakelogind.Config{})
	c, err := dbus.Connect(lg.Address())
	require.NoError(t, err)
	defer c.Close()
	err = c.Object(fakelogind.Service, fakelogind.Path).Call(fakelogind.ManagerInterface+".Inhibit", 0,
		"shutdown", "test", "why", "sometimes").Err
	assert.ErrorContains(t, err, `mode="sometimes"`)
	assert.Empty(t, lg.Locks())
}

// A lock closed as soon as it arrives (the kubelet does so to the lock it
// takes after a cancelled shutdown when the new descriptor got the old
// one's number) is released all the same, held or not, and Taken finds it.
func TestALockClosedAtOnceIsReleased(t *testing.T) {
	lg := start(t, fakelogind.Config{})
	c, err := dbus.Connect(lg.Address())
	require.NoError(t, err)
	defer c.Close()
	var fd uint32
	require.NoError(t, c.Object(fakelogind.Service, fakelogind.Path).Call(fakelogind.ManagerInterface+".Inhibit", 0,
		"shutdown", "test", "closing it at once", "delay").Store(&fd))
	require.NoError(t, syscall.Close(int(fd)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock, err := lg.Taken(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, "closing it at once", lock.Why)
	select {
	case <-lock.Released():
	case <-ctx.Done():
		t.Fatal("a lock whose every descriptor is closed is not released")
	}
	_, err = lg.Taken(ctx, 0)
	assert.Error(t, err, "there is no lock number 0")
}
