package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/ublk"
)

// EventLogFile is the file in the state directory where the fake device daemon logs what
// it did, ending in "exit" when it stopped on its own.
const EventLogFile = "ublkd.events"

// sysRoot is the fake sysfs tree of the device daemon's devices in stateDir.
func sysRoot(stateDir string) string { return filepath.Join(stateDir, "sys") }

// daemonSocket is the fake device daemon's socket in stateDir.
func daemonSocket(stateDir string) string { return filepath.Join(stateDir, "ublkd.sock") }

// maxSocketPath is the longest path a Unix socket can be bound to (sun_path's 108 bytes,
// a NUL included).
const maxSocketPath = 107

// daemonConfig is the fake device daemon's configuration for devices devices in stateDir.
func daemonConfig(stateDir string, devices int) fakeublk.DaemonConfig {
	cfg := fakeublk.DaemonConfig{SysRoot: sysRoot(stateDir), Socket: daemonSocket(stateDir),
		EventLog: filepath.Join(stateDir, EventLogFile)}
	for i := range devices {
		cfg.Devices = append(cfg.Devices, fakeublk.DeviceSpec{ID: i, Major: 259, Minor: uint32(4000 + i)})
	}
	daemonHook(&cfg)
	return cfg
}

// daemonHook is a test's: it changes the fake device daemon's configuration (a daemon
// slower than the ublk step's window).
var daemonHook = func(*fakeublk.DaemonConfig) {}

// StartDeviceDaemon starts the fake device daemon as a child process with devices fake
// ublk devices in stateDir (sysfs tree sys/, socket ublkd.sock, event log EventLogFile),
// after removing the tree an earlier process left, and returns it with the Socket that
// asks it to stop. It returns by ctx's deadline, or 10 s at most; on an error no daemon is
// left running. The process must call fakeublk.MainIfDaemon first thing in main.
func StartDeviceDaemon(ctx context.Context, stateDir string, devices int) (*fakeublk.Child, *ublk.Socket, error) {
	sys := sysRoot(stateDir)
	if err := os.RemoveAll(sys); err != nil { // the devices of an earlier process died with it
		return nil, nil, err
	}
	cfg := daemonConfig(stateDir, devices)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := fakeublk.Start(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("device daemon: %w", err)
	}
	proc, err := ublk.FindProcess(d.Pid())
	if err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("device daemon: %w", err)
	}
	return d, &ublk.Socket{Path: cfg.Socket, Process: proc}, nil
}
