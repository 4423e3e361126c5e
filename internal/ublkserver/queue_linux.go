//go:build linux

package ublkserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/uring"
)

// queue serves one hardware queue of a device: one FETCH_REQ per tag kept
// in the kernel, each completion a request to serve, each answer a
// COMMIT_AND_FETCH_REQ. Before Linux 6.15 every command of a queue must
// come from the same thread (the queue's "daemon" task), so the whole life
// of a queue runs on one locked OS thread.
type queue struct {
	dev   *device
	qid   uint16
	depth int
	descs []byte // the driver's ublksrv_io_desc array, mapped read-only
	bufs  []byte // one I/O buffer of dev.ioBytes per tag
	ring  *uring.Ring

	pending []uint16 // tags received while frozen, not answered yet
	aborted int      // tags the driver completed with ABORT
}

// run sets the queue up, reports on ready, and serves until every tag was
// aborted (the device was stopped). It returns the queue's first
// unexpected error.
func (q *queue) run(ready chan<- error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := q.setup(); err != nil {
		ready <- err
		return err
	}
	defer q.teardown()
	fetches := make([]uring.SQE, q.depth)
	for tag := range q.depth {
		fetches[tag] = q.sqe(ioFetchReq, uint16(tag), 0)
	}
	if _, err := q.ring.Submit(fetches...); err != nil {
		ready <- fmt.Errorf("ublkserver: dev %d queue %d: FETCH_REQ: %w", q.dev.id, q.qid, err)
		return err
	}
	ready <- nil
	return q.serve()
}

func (q *queue) setup() error {
	var err error
	descSize := (q.depth*ioDescSize + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	q.descs, err = unix.Mmap(int(q.dev.cdev.Fd()), int64(q.qid)*cmdBufStride, descSize,
		unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("ublkserver: dev %d queue %d: mmap descriptors: %w", q.dev.id, q.qid, err)
	}
	q.bufs, err = unix.Mmap(-1, 0, q.depth*q.dev.ioBytes, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		_ = unix.Munmap(q.descs)
		return fmt.Errorf("ublkserver: I/O buffers: %w", err)
	}
	q.ring, err = uring.New(uint32(q.depth), 0)
	if err != nil {
		_ = unix.Munmap(q.descs)
		_ = unix.Munmap(q.bufs)
		return err
	}
	return nil
}

func (q *queue) teardown() {
	_ = q.ring.Close()
	_ = unix.Munmap(q.descs)
	_ = unix.Munmap(q.bufs)
}

// sqe builds an I/O command for tag; the buffer address is always the
// tag's own buffer.
func (q *queue) sqe(op uint32, tag uint16, result int32) uring.SQE {
	addr := uint64(uintptr(unsafe.Pointer(&q.bufs[int(tag)*q.dev.ioBytes])))
	return uring.URingCmd(int(q.dev.cdev.Fd()), op, ioCmd(q.qid, tag, result, addr), uint64(tag))
}

// serve answers requests until every tag is aborted. While the server is
// frozen, requests are held (the I/O stays in flight) and answered on thaw.
func (q *queue) serve() error {
	for q.aborted < q.depth {
		if !q.dev.srv.frozen.Load() && len(q.pending) > 0 {
			held := q.pending
			q.pending = nil
			for _, tag := range held {
				if err := q.answer(tag); err != nil {
					return err
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		cqe, err := q.ring.WaitCQE(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if err != nil {
			return fmt.Errorf("ublkserver: dev %d queue %d: %w", q.dev.id, q.qid, err)
		}
		tag := uint16(cqe.UserData)
		switch {
		case cqe.Res == ioResAbort:
			q.aborted++
		case cqe.Res != ioResOK:
			q.aborted++ // the tag is lost to us; count it so that we still end
			q.dev.srv.logf("dev %d queue %d tag %d: command failed: %v", q.dev.id, q.qid, tag, unix.Errno(-cqe.Res))
		case q.dev.srv.frozen.Load():
			q.pending = append(q.pending, tag)
			q.held(tag)
		default:
			if err := q.answer(tag); err != nil {
				return err
			}
		}
	}
	return nil
}

// held logs the request the server now holds for tag: a read or a write.
func (q *queue) held(tag uint16) {
	switch decodeIODesc(q.descs[int(tag)*ioDescSize:]).Op {
	case opRead:
		q.dev.srv.event(EventHeldRead, q.dev.id)
	case opWrite:
		q.dev.srv.event(EventHeldWrite, q.dev.id)
	}
}

// answer serves the request the driver described for tag and commits its
// result, fetching the tag's next request in the same command.
func (q *queue) answer(tag uint16) error {
	d := decodeIODesc(q.descs[int(tag)*ioDescSize:])
	if delay := q.dev.srv.cfg.IODelay; delay > 0 {
		time.Sleep(delay)
	}
	res := q.dev.do(d, q.bufs[int(tag)*q.dev.ioBytes:int(tag+1)*q.dev.ioBytes])
	if _, err := q.ring.Submit(q.sqe(ioCommitAndFetch, tag, res)); err != nil {
		return fmt.Errorf("ublkserver: dev %d queue %d: COMMIT_AND_FETCH_REQ: %w", q.dev.id, q.qid, err)
	}
	return nil
}
