//go:build linux

package ublkserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Server is a running ublk server: its devices, their queues and the
// in-memory disks behind them.
type Server struct {
	cfg     Config
	ctrl    *control
	devices []*device
	frozen  atomic.Bool

	queues   sync.WaitGroup
	errMu    sync.Mutex
	queueErr error
	done     chan struct{} // closed when every queue has ended
}

// device is one ublk device pair (/dev/ublkcN, /dev/ublkbN) and its disk.
type device struct {
	srv     *Server
	id      uint32
	ioBytes int
	cdev    *os.File

	mu   sync.RWMutex
	disk []byte
}

// Start creates cfg.Devices devices and serves them until Stop, or until
// they are stopped from outside (STOP_DEV through /dev/ublk-control). For
// each device: ADD_DEV, SET_PARAMS, queues set up with one FETCH_REQ per
// tag, then START_DEV, after which /dev/ublkbN exists. On error every
// device created so far is stopped and deleted again. ctx bounds the
// control commands; the queues outlive it.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctrl, err := openControl()
	if err != nil {
		return nil, err
	}
	ctrl.unprivileged = cfg.Unprivileged
	s := &Server{cfg: cfg, ctrl: ctrl, done: make(chan struct{})}
	for range cfg.Devices {
		if err = s.addDevice(ctx); err != nil {
			break
		}
	}
	go func() { s.queues.Wait(); close(s.done) }()
	if err != nil {
		// Undo in the safe order; the queues of a failed start end
		// through STOP_DEV like any other.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = s.stopAndDelete(cleanup)
		_ = ctrl.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) addDevice(ctx context.Context) error {
	flags := uint64(flagCmdIoctl)
	if s.cfg.Unprivileged {
		flags |= flagUnprivDev
	}
	if s.cfg.Recovery {
		flags |= flagUserRecovery
	}
	info, err := s.ctrl.addDev(ctx, devInfo{
		NrHWQueues:    uint16(s.cfg.Queues),
		QueueDepth:    uint16(s.cfg.Depth),
		MaxIOBufBytes: uint32(s.cfg.MaxIOBytes),
		DevID:         autoDevID,
		Flags:         flags,
	})
	if err != nil {
		return err
	}
	d := &device{srv: s, id: info.DevID, ioBytes: int(info.MaxIOBufBytes)}
	s.devices = append(s.devices, d)
	if d.disk, err = newDisk(s.cfg, d.id); err != nil {
		return err
	}
	if s.cfg.Unprivileged {
		if err := awaitCharDev(ctx, d.id); err != nil {
			return err
		}
	}
	if err := s.ctrl.setParams(ctx, d.id, uint64(s.cfg.Size)/512, info.MaxIOBufBytes/512); err != nil {
		return err
	}
	if d.cdev, err = openCharDev(ctx, d.id); err != nil {
		return err
	}
	ready := make(chan error, info.NrHWQueues)
	for qid := range info.NrHWQueues {
		q := &queue{dev: d, qid: qid, depth: int(info.QueueDepth)}
		s.queues.Go(func() { s.recordQueueErr(q.run(ready)) })
	}
	for range info.NrHWQueues {
		if err := <-ready; err != nil {
			return err
		}
	}
	if err := s.ctrl.startDev(ctx, d.id, os.Getpid()); err != nil {
		return err
	}
	s.event(EventStarted, d.id)
	return nil
}

// newDisk returns the memory behind device id: anonymous, or the shared
// mapping of BackingDir/ublk<id>.img.
func newDisk(cfg Config, id uint32) ([]byte, error) {
	if cfg.BackingDir == "" {
		return unix.Mmap(-1, 0, int(cfg.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	}
	f, err := os.OpenFile(BackingFile(cfg.BackingDir, int(id)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ublkserver: backing file: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(cfg.Size); err != nil {
		return nil, fmt.Errorf("ublkserver: backing file: %w", err)
	}
	return unix.Mmap(int(f.Fd()), 0, int(cfg.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// BackingFile returns the path of device id's disk under dir (see
// Config.BackingDir).
func BackingFile(dir string, id int) string { return filepath.Join(dir, fmt.Sprintf("ublk%d.img", id)) }

// openCharDev opens /dev/ublkcN, waiting for devtmpfs to create it.
func openCharDev(ctx context.Context, id uint32) (*os.File, error) {
	path := charDevPath(id)
	for {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ublkserver: %s did not appear: %w", path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// awaitCharDev waits until this process may read and write /dev/ublkcN,
// which the driver asks of every command for an unprivileged device:
// devtmpfs makes the node root's, and udev (or a test, for it) gives it to
// the device's owner.
func awaitCharDev(ctx context.Context, id uint32) error {
	path := charDevPath(id)
	for {
		err := unix.Access(path, unix.R_OK|unix.W_OK)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ublkserver: %s not readable and writable: %w (%w)", path, err, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *Server) recordQueueErr(err error) {
	if err == nil {
		return
	}
	s.errMu.Lock()
	defer s.errMu.Unlock()
	s.queueErr = errors.Join(s.queueErr, err)
}

// Devices returns the ids N of the server's devices (/dev/ublkbN).
func (s *Server) Devices() []int {
	ids := make([]int, len(s.devices))
	for i, d := range s.devices {
		ids[i] = int(d.id)
	}
	return ids
}

// Freeze makes the queues hold every new request unanswered: I/O to the
// devices stays in flight until Thaw. Requests already being served finish.
// Each request held is logged (EventHeldRead, EventHeldWrite).
func (s *Server) Freeze() { s.frozen.Store(true) }

// Thaw answers the held requests and serves again.
func (s *Server) Thaw() { s.frozen.Store(false) }

// Done is closed when every queue has ended: after Stop, or after the
// devices were stopped from outside.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop tears the devices down in the safe order: STOP_DEV for each device
// while its queues still serve (the kernel removes the disk, waits for the
// requests in flight, then aborts the idle fetches), wait for the queues
// to end, close /dev/ublkcN, then DEL_DEV. It returns when every device is
// deleted, or with ctx's error when ctx ends first (devices may then be
// left live). Stop is for a server that is not frozen: a frozen server's
// held requests keep STOP_DEV waiting.
func (s *Server) Stop(ctx context.Context) error {
	err := s.stopAndDelete(ctx)
	return errors.Join(err, s.ctrl.Close())
}

func (s *Server) stopAndDelete(ctx context.Context) error {
	var errs []error
	for _, d := range s.devices {
		s.event(EventStopping, d.id)
		if err := s.ctrl.stopDev(ctx, d.id); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.waitQueues(ctx); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, d := range s.devices {
		if d.cdev != nil {
			_ = d.cdev.Close()
		}
		if d.disk != nil {
			_ = unix.Munmap(d.disk)
			d.disk = nil
		}
		if err := s.ctrl.delDev(ctx, d.id); err != nil {
			errs = append(errs, err)
		} else {
			s.event(EventDeleted, d.id)
		}
	}
	s.errMu.Lock()
	errs = append(errs, s.queueErr)
	s.errMu.Unlock()
	return errors.Join(errs...)
}

func (s *Server) waitQueues(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ublkserver: queues still serving: %w", ctx.Err())
	}
}

// do serves one request against the in-memory disk and returns the result
// to commit: bytes transferred, or a negative errno.
func (d *device) do(io ioDesc, buf []byte) int32 {
	const eio, eopnotsupp = -5, -95
	off, n := int64(io.StartSector)*512, int64(io.NrSectors)*512
	if io.Op == opFlush {
		return 0
	}
	if n > int64(len(buf)) || off < 0 || off+n > int64(len(d.disk)) {
		return eio
	}
	switch io.Op {
	case opRead:
		d.mu.RLock()
		copy(buf[:n], d.disk[off:off+n])
		d.mu.RUnlock()
	case opWrite:
		d.mu.Lock()
		copy(d.disk[off:off+n], buf[:n])
		d.mu.Unlock()
	default:
		return eopnotsupp
	}
	return int32(n)
}

// event appends one line to Config.EventLog, if set.
func (s *Server) event(kind string, id uint32) {
	if s.cfg.EventLog == "" {
		return
	}
	f, err := os.OpenFile(s.cfg.EventLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		s.logf("event log: %v", err)
		return
	}
	defer f.Close()
	_, _ = fmt.Fprintf(f, "%d %s %d\n", time.Now().UnixNano(), kind, id)
}

func (s *Server) logf(format string, args ...any) {
	s.cfg.Logger.Warn(fmt.Sprintf(format, args...))
}
