//go:build linux

package ublkguest

import (
	"context"
	"errors"
	"fmt"
	"time"

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
func KillFirst(ctx context.Context, d *ublkserver.Daemon, ctl *ublkserver.Control) error {
	if err := d.Cmd.Process.Signal(ublkserver.SignalFreeze); err != nil {
		return err
	}
	id := d.Devices[0]
	for {
		_, writes, ok := Inflight(id)
		if !ok {
			return fmt.Errorf("ublkb%d is gone before the kill", id)
		}
		if writes > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no write in flight on ublkb%d: %w", id, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
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
