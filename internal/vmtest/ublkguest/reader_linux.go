//go:build linux

package ublkguest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/ublkserver"
)

// HeldRead is a read a frozen daemon holds in flight. A daemon freezes on
// a signal it handles asynchronously, so StartHeldRead reads in a loop
// until the daemon logs a read held.
type HeldRead struct {
	f    *os.File
	buf  []byte
	stop atomic.Bool
	done chan error
}

// StartHeldRead reads block 0 of /dev/ublkbN over and over until the
// daemon, frozen, logs a read held (WaitHeld on its event log, events),
// and returns then; it fails when ctx ends first.
func StartHeldRead(ctx context.Context, id int, events string) (*HeldRead, error) {
	f, buf, err := openDirect(fmt.Sprintf("/dev/ublkb%d", id), os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	h := &HeldRead{f: f, buf: buf, done: make(chan error, 1)}
	go func() {
		var err error
		for !h.stop.Load() && err == nil {
			_, err = f.ReadAt(buf, 0)
		}
		h.done <- err
	}()
	if err := WaitHeld(ctx, events, ublkserver.EventHeldRead, id); err != nil {
		h.stop.Store(true)
		return nil, err
	}
	return h, nil
}

// Finish lets the held read complete and returns its error, or ctx's
// error when it is still held when ctx ends. It ends the loop first and
// only then calls release (which lets the daemon answer, e.g. thaws it):
// a read issued after the held one could meet a disk that is going (EOF
// once STOP_DEV zeroed its capacity) and would not be the read held.
func (h *HeldRead) Finish(ctx context.Context, release func() error) error {
	h.stop.Store(true)
	if err := release(); err != nil {
		return err
	}
	select {
	case err := <-h.done:
		h.f.Close()
		_ = unix.Munmap(h.buf)
		return err
	case <-ctx.Done():
		return fmt.Errorf("read still held: %w", ctx.Err())
	}
}
