// Package uring is a small io_uring client in pure Go over
// golang.org/x/sys/unix: ring setup (including IORING_SETUP_SQE128 and
// IORING_SETUP_CQE32), building submission queue entries, submitting them and
// reaping completions with a context deadline, and registering fixed files
// (RegisterFiles, which the holders scan's tests use to hold a device
// through a ring). It exists because the ublk
// control plane (/dev/ublk-control) and ublk queues (/dev/ublkcN) speak only
// IORING_OP_URING_CMD, and drainkit wants no cgo and no third-party ring.
//
// Typical use, one ublk control command:
//
//	r, err := uring.New(4, uring.SetupSQE128)
//	if err != nil { ... }
//	defer r.Close()
//	sqe := uring.URingCmd(ctrlFd, cmdOp, payload, 1) // payload: up to 80 bytes on SQE128
//	cqe, err := r.SubmitAndWait(ctx, sqe)
//	if err == nil && cqe.Res < 0 { err = syscall.Errno(-cqe.Res) }
//
// A server that keeps many commands in flight (for example a ublk queue with
// one FETCH_REQ per tag) calls Submit with a batch and then WaitCQE in a loop,
// matching completions to requests by CQE.UserData.
//
// Guarantees: WaitCQE and SubmitAndWait return by ctx's deadline (the kernel
// wait carries the remaining time as its timeout) and within PollSlice of a
// cancellation without deadline. A command the kernel has already taken is
// not cancelled when ctx ends: its completion stays in the ring for a later
// WaitCQE, or is discarded by Close. A Ring is safe for concurrent use; the
// submission side and the completion side each have their own lock, so one
// goroutine may wait for completions while another submits.
//
// The package is Linux-only; on other systems it contains only this
// documentation.
package uring
