//go:build linux

package main

import (
	"context"
	"os"
	"syscall"

	"github.com/drainkit/drainkit/ublk"
)

// EnvSysfsRoot, when set, is where the daemon step reads sysfs instead of
// /sys (tests point it at a fake tree). The /dev/ublk-control fallback is
// off then: its device IDs would not be the tree's.
const EnvSysfsRoot = "SUPERVISOR_SYSFS_ROOT"

// newTeardown builds the daemon step: drainkit's ublk teardown against the
// daemon child. It asks the daemon to stop with SIGTERM and sees its exit
// through the supervisor's reaper (a pidfd or wait of its own would race
// the reaper); it kills the daemon only when the kernel rule allows.
func (s *supervisor) newTeardown() (*ublk.Teardown, error) {
	opts := []ublk.Option{
		ublk.WithDaemon(ublk.DaemonFuncs{
			StopFunc: func(context.Context) error { return s.daemon.signal(syscall.SIGTERM) },
			WaitFunc: func(ctx context.Context) error { return s.daemon.wait(ctx) }, // s.daemon is set at run
			KillFunc: func(context.Context) error { return s.daemon.signal(syscall.SIGKILL) },
		}),
		ublk.WithKernelDeclarations(s.cfg.kernels...),
		ublk.WithLogger(s.log),
	}
	if root := os.Getenv(EnvSysfsRoot); root != "" {
		opts = append(opts, ublk.WithSysfsRoot(root), ublk.WithoutControl())
	}
	return ublk.New(opts...)
}

// stopDaemon is the daemon step: the ublk teardown, then the daemon's exit
// status.
func (s *supervisor) stopDaemon(ctx context.Context) error {
	if err := s.teardown.Stop(ctx); err != nil {
		return err
	}
	return s.daemon.exitErr()
}
