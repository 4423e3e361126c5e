//go:build linux

package ublkguest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// HeldRead is a read a frozen daemon holds in flight. A daemon freezes on
// a signal it handles asynchronously, so StartHeldRead reads in a loop
// until one read stays in flight.
type HeldRead struct {
	f    *os.File
	buf  []byte
	stop atomic.Bool
	done chan error
}

// StartHeldRead reads block 0 of /dev/ublkbN over and over until a read
// stays in flight (the disk's inflight count shows it), and returns then;
// it fails when ctx ends first.
func StartHeldRead(ctx context.Context, id int) (*HeldRead, error) {
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
	for {
		if reads, _, _ := Inflight(id); reads > 0 {
			return h, nil
		}
		select {
		case <-ctx.Done():
			h.stop.Store(true)
			return nil, fmt.Errorf("no read held in flight on ublkb%d: %w", id, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
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
