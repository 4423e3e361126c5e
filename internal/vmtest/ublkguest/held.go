package ublkguest

import (
	"context"
	"fmt"
	"time"

	"github.com/drainkit/drainkit/internal/ublkserver"
)

// WaitHeld waits until the event log at events (a frozen daemon's
// ublkserver.Config.EventLog) shows a request of kind
// (ublkserver.EventHeldRead or EventHeldWrite) held for device id, and
// returns ctx's error when ctx ends first. The disk's inflight count is no
// proof of a held request: a daemon freezes on a signal it handles
// asynchronously and finishes the requests it was serving, so a request
// counted in flight can still be answered a moment later.
func WaitHeld(ctx context.Context, events, kind string, id int) error {
	for {
		ev, err := ublkserver.ReadEvents(events)
		if err != nil {
			return err
		}
		if _, ok := ublkserver.First(ev, kind, id); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s on ublkb%d: %w", kind, id, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
