//go:build linux

package ublkguest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/ublkserver"
)

// ExitWatch records the driver's state of a daemon's devices at the moment
// the daemon process exits, an oracle independent of the teardown step's
// own report: after a safe teardown no device is LIVE when its daemon
// dies.
type ExitWatch struct {
	done   chan struct{}
	stop   chan struct{}
	at     time.Time
	states map[int]ublkserver.DeviceState
	err    error
}

// WatchExit starts watching process pid (through a pidfd) and its devices
// ids (through its own /dev/ublk-control handle).
func WatchExit(pid int, ids []int) (*ExitWatch, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	ctl, err := ublkserver.OpenControl()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	w := &ExitWatch{done: make(chan struct{}), stop: make(chan struct{}), states: map[int]ublkserver.DeviceState{}}
	go func() {
		defer close(w.done)
		defer unix.Close(fd)
		defer ctl.Close()
		if !w.waitExit(fd) {
			return
		}
		w.at = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, id := range ids {
			st, err := ctl.State(ctx, id)
			w.states[id] = st
			w.err = errors.Join(w.err, err)
		}
	}()
	return w, nil
}

// waitExit polls the pidfd until the process exits (true) or Result gives
// up (false).
func (w *ExitWatch) waitExit(fd int) bool {
	for {
		select {
		case <-w.stop:
			return false
		default:
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 5); err == nil && n > 0 {
			return true
		}
	}
}

// Result waits for the exit until ctx ends and returns when it happened
// and each device's state then. Without an exit by then it returns ctx's
// error and stops watching.
func (w *ExitWatch) Result(ctx context.Context) (time.Time, map[int]ublkserver.DeviceState, error) {
	select {
	case <-w.done:
		return w.at, w.states, w.err
	case <-ctx.Done():
		close(w.stop)
		<-w.done
		return time.Time{}, nil, fmt.Errorf("daemon did not exit: %w", ctx.Err())
	}
}
