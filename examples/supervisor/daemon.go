//go:build linux

package main

import (
	"context"
	"syscall"
)

// stopDaemon is the daemon step: SIGTERM, then wait for the daemon's exit
// until the step's deadline.
// TODO: replace with the ublk teardown step (kernel rule) once it lands.
func (s *supervisor) stopDaemon(ctx context.Context) error {
	if err := s.daemon.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := s.daemon.wait(ctx); err != nil {
		return err
	}
	return s.daemon.exitErr()
}
