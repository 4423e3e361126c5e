//go:build linux

package ublkguest

import (
	"context"
	"errors"

	"github.com/drainkit/drainkit/internal/ublkserver"
)

// KillFirst is the teardown order drainkit exists to prevent, kept as a
// test helper so that tests can show their checks catch it: it kills the
// daemon while its first device is live with a write in flight, and only
// then stops and deletes the devices from outside, as a container runtime
// does when SIGKILL takes the daemon first.
//
// To keep the guest kernel itself out of the known race (fix f40139fde527
// is missing on 6.12), the daemon is frozen first, so the write in flight
// is one it holds and no request is being handed to it while it dies.
// events is the daemon's event log (ublkserver.Config.EventLog), where it
// logs each request it holds: the disk's inflight count would also count
// a write the daemon was answering when the freeze came, which completes
// (CI, under load: the next write then met a disk already stopped and got
// ENOSPC, and no write in flight was aborted).
func KillFirst(ctx context.Context, d *ublkserver.Daemon, ctl *ublkserver.Control, events string) error {
	if err := d.Cmd.Process.Signal(ublkserver.SignalFreeze); err != nil {
		return err
	}
	if err := WaitHeld(ctx, events, ublkserver.EventHeldWrite, d.Devices[0]); err != nil {
		return err
	}
	if err := d.Cmd.Process.Kill(); err != nil {
		return err
	}
	_ = d.Wait(ctx) // killed: an exit error is expected
	var errs []error
	for _, id := range d.Devices {
		errs = append(errs, ctl.StopDev(ctx, id), ctl.DelDev(ctx, id))
	}
	return errors.Join(errs...)
}
