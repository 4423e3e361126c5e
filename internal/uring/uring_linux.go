//go:build linux

package uring

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Setup flags for New (include/uapi/linux/io_uring.h).
const (
	// SetupSQE128 makes every submission entry 128 bytes, so that a
	// URING_CMD can carry an 80-byte payload (ublk control commands need 32).
	SetupSQE128 uint32 = 1 << 10
	// SetupCQE32 makes every completion entry 32 bytes (CQE.Extra is filled).
	SetupCQE32 uint32 = 1 << 11
)

// Opcodes used by drainkit. Any other opcode can be put in SQE.Opcode.
const (
	// OpNop completes immediately with Res 0; useful to probe a ring.
	OpNop uint8 = 0
	// OpRead reads SQE.Len bytes at offset SQE.Off into the buffer at
	// SQE.Addr (IORING_OP_READ, Linux 5.6).
	OpRead uint8 = 22
	// OpURingCmd passes SQE.Cmd to the driver behind SQE.Fd with command
	// SQE.CmdOp (IORING_OP_URING_CMD).
	OpURingCmd uint8 = 46
)

// SQE flags (SQE.Flags).
const (
	// SQEFixedFile makes SQE.Fd an index into the ring's registered files
	// (RegisterFiles) instead of a file descriptor (IOSQE_FIXED_FILE).
	SQEFixedFile uint8 = 1 << 0
)

// Feature bits reported by the kernel in Ring.Features.
const (
	FeatSingleMmap uint32 = 1 << 0
	FeatExtArg     uint32 = 1 << 8
)

const (
	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	registerFiles = 2 // IORING_REGISTER_FILES

	enterGetEvents = 1 << 0
	enterExtArg    = 1 << 3

	paramsSize = 120
)

// PollSlice bounds one kernel wait when ctx has no deadline, so that a
// cancellation is seen within this time.
const PollSlice = 100 * time.Millisecond

// ErrRingFull is returned by Submit when the submission queue has no free
// entry; reap completions or submit fewer entries.
var ErrRingFull = errors.New("uring: submission queue full")

// SQE is one submission queue entry in Go form. Fields not used by an
// opcode stay zero. For OpURingCmd, CmdOp goes to byte 8 and Cmd to byte 48
// (at most 16 bytes on a plain ring, 80 bytes with SetupSQE128).
type SQE struct {
	Opcode   uint8
	Flags    uint8
	IOPrio   uint16
	Fd       int32
	Off      uint64 // byte 8 (off/addr2); replaced by CmdOp for OpURingCmd
	CmdOp    uint32 // byte 8 for OpURingCmd
	Addr     uint64
	Len      uint32
	OpFlags  uint32 // rw_flags, uring_cmd_flags, ...
	UserData uint64
	BufIndex uint16
	Personal uint16
	FileIdx  int32  // splice_fd_in / file_index
	Addr3    uint64 // byte 48 when Cmd is empty
	Cmd      []byte // command payload at byte 48
}

// Nop returns a no-op entry tagged with userData.
func Nop(userData uint64) SQE { return SQE{Opcode: OpNop, UserData: userData} }

// URingCmd returns an IORING_OP_URING_CMD entry for the file fd, with the
// driver command cmdOp and its payload cmd, tagged with userData.
func URingCmd(fd int, cmdOp uint32, cmd []byte, userData uint64) SQE {
	return SQE{Opcode: OpURingCmd, Fd: int32(fd), CmdOp: cmdOp, Cmd: cmd, UserData: userData}
}

// CQE is one completion queue entry. Res is the operation's result: a
// negative errno on failure. Extra holds the second 16 bytes of a 32-byte
// entry on a ring set up with SetupCQE32.
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
	Extra    [16]byte
}

// Err returns nil when Res is not negative, and the errno otherwise.
func (c CQE) Err() error {
	if c.Res >= 0 {
		return nil
	}
	return unix.Errno(-c.Res)
}

// Ring is one io_uring instance with its mapped queues.
type Ring struct {
	fd       int
	flags    uint32
	features uint32
	sqeSize  int
	cqeSize  int

	sqMem, cqMem, sqeMem []byte

	sqHead, sqTail, sqMask, sqEntries *uint32
	sqArray                           unsafe.Pointer
	cqHead, cqTail, cqMask            *uint32
	cqes                              unsafe.Pointer

	sqMu   sync.Mutex
	cqMu   sync.Mutex
	closed atomic.Bool
}

// New sets up a ring with at least entries submission entries (rounded up
// to a power of two by the kernel) and the given setup flags (SetupSQE128,
// SetupCQE32, or 0). It fails with the kernel's errno when io_uring is not
// available (ENOSYS) or disabled by kernel.io_uring_disabled (EPERM).
func New(entries uint32, flags uint32) (*Ring, error) {
	if entries == 0 {
		return nil, errors.New("uring: entries must be > 0")
	}
	var p [paramsSize]byte
	put32(p[8:], flags)
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p[0])), 0)
	if errno != 0 {
		return nil, fmt.Errorf("uring: io_uring_setup: %w", errno)
	}
	r := &Ring{fd: int(fd), flags: flags, features: get32(p[20:]), sqeSize: 64, cqeSize: 16}
	if flags&SetupSQE128 != 0 {
		r.sqeSize = 128
	}
	if flags&SetupCQE32 != 0 {
		r.cqeSize = 32
	}
	if err := r.mmap(p[:]); err != nil {
		unix.Close(r.fd)
		return nil, err
	}
	return r, nil
}

func (r *Ring) mmap(p []byte) error {
	sqEntries, cqEntries := get32(p[0:]), get32(p[4:])
	sqOff, cqOff := p[40:80], p[80:120]
	sqSize := int(get32(sqOff[24:])) + int(sqEntries)*4 // array offset + array
	cqSize := int(get32(cqOff[20:])) + int(cqEntries)*r.cqeSize
	single := r.features&FeatSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
		cqSize = sqSize
	}
	var err error
	prot, fl := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	if r.sqMem, err = unix.Mmap(r.fd, offSQRing, sqSize, prot, fl); err != nil {
		return fmt.Errorf("uring: mmap sq ring: %w", err)
	}
	if single {
		r.cqMem = r.sqMem
	} else if r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, prot, fl); err != nil {
		r.unmap()
		return fmt.Errorf("uring: mmap cq ring: %w", err)
	}
	if r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(sqEntries)*r.sqeSize, prot, fl); err != nil {
		r.unmap()
		return fmt.Errorf("uring: mmap sqes: %w", err)
	}
	r.sqHead = r.u32(r.sqMem, get32(sqOff[0:]))
	r.sqTail = r.u32(r.sqMem, get32(sqOff[4:]))
	r.sqMask = r.u32(r.sqMem, get32(sqOff[8:]))
	r.sqEntries = r.u32(r.sqMem, get32(sqOff[12:]))
	r.sqArray = unsafe.Pointer(&r.sqMem[get32(sqOff[24:])])
	r.cqHead = r.u32(r.cqMem, get32(cqOff[0:]))
	r.cqTail = r.u32(r.cqMem, get32(cqOff[4:]))
	r.cqMask = r.u32(r.cqMem, get32(cqOff[8:]))
	r.cqes = unsafe.Pointer(&r.cqMem[get32(cqOff[20:])])
	return nil
}

func (r *Ring) u32(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }

func (r *Ring) unmap() {
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.cqMem != nil && &r.cqMem[0] != &r.sqMem[0] {
		_ = unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		_ = unix.Munmap(r.sqMem)
	}
	r.sqMem, r.cqMem, r.sqeMem = nil, nil, nil
}

// Close unmaps the queues and closes the ring. Commands still in the kernel
// are cancelled or completed by the kernel; their completions are lost.
// Close is idempotent.
func (r *Ring) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.sqMu.Lock()
	r.cqMu.Lock()
	defer r.sqMu.Unlock()
	defer r.cqMu.Unlock()
	r.unmap()
	return unix.Close(r.fd)
}

// Fd returns the ring's file descriptor.
func (r *Ring) Fd() int { return r.fd }

// Features returns the IORING_FEAT_* bits the kernel reported at setup.
func (r *Ring) Features() uint32 { return r.features }

// Flags returns the setup flags the ring was created with.
func (r *Ring) Flags() uint32 { return r.flags }

// Entries returns the number of submission queue entries.
func (r *Ring) Entries() uint32 { return *r.sqEntries }

// CmdSize returns how many payload bytes an OpURingCmd entry can carry on
// this ring: 16, or 80 with SetupSQE128.
func (r *Ring) CmdSize() int { return r.sqeSize - 48 }

var errClosed = errors.New("uring: ring closed")

// RegisterFiles registers fds as the ring's fixed files
// (IORING_REGISTER_FILES): slot i is fds[i], and -1 leaves a slot empty.
// An entry with SQEFixedFile names a slot in SQE.Fd. The ring holds its
// own reference to each file, so the caller may close the fds afterwards:
// the files stay open, with no descriptor in any fd table, until the ring
// is closed. A ring has one set of registered files; registering a second
// one fails with EBUSY.
func (r *Ring) RegisterFiles(fds ...int) error {
	if len(fds) == 0 {
		return errors.New("uring: RegisterFiles needs at least one fd")
	}
	if r.closed.Load() {
		return errClosed
	}
	table := make([]int32, len(fds))
	for i, fd := range fds {
		table[i] = int32(fd)
	}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerFiles,
		uintptr(unsafe.Pointer(&table[0])), uintptr(len(table)), 0, 0)
	if errno != 0 {
		return fmt.Errorf("uring: io_uring_register files: %w", errno)
	}
	return nil
}

// Submit copies sqes into the submission queue and hands them to the kernel
// with one io_uring_enter. It returns how many the kernel consumed. It fails
// with ErrRingFull, without submitting anything, when fewer than len(sqes)
// entries are free, and with an error when an entry's Cmd does not fit.
// When the kernel consumes fewer than len(sqes) (it stops at an entry it
// refuses at submission, whose completion carries the error) or io_uring_enter
// fails, Submit returns an error and the entries not consumed are dropped:
// they were not submitted and never will be.
func (r *Ring) Submit(sqes ...SQE) (int, error) {
	r.sqMu.Lock()
	defer r.sqMu.Unlock()
	if r.closed.Load() {
		return 0, errClosed
	}
	head := atomic.LoadUint32(r.sqHead)
	tail := *r.sqTail
	if uint32(len(sqes)) > *r.sqEntries-(tail-head) {
		return 0, ErrRingFull
	}
	for _, s := range sqes {
		if len(s.Cmd) > r.CmdSize() {
			return 0, fmt.Errorf("uring: command payload %d bytes, ring allows %d", len(s.Cmd), r.CmdSize())
		}
	}
	for _, s := range sqes {
		idx := tail & *r.sqMask
		s.encode(r.sqeMem[int(idx)*r.sqeSize : int(idx+1)*r.sqeSize])
		*(*uint32)(unsafe.Add(r.sqArray, 4*idx)) = idx
		tail++
	}
	atomic.StoreUint32(r.sqTail, tail)
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(len(sqes)), 0, 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			r.unqueueLocked()
			return 0, fmt.Errorf("uring: io_uring_enter: %w", errno)
		}
		if int(n) < len(sqes) {
			r.unqueueLocked()
			return int(n), fmt.Errorf("uring: the kernel took %d of %d entries (the first one not taken was refused at submission or could not be allocated); the rest were not submitted", n, len(sqes))
		}
		return int(n), nil
	}
}

// unqueueLocked takes back the entries the kernel did not consume, so that
// a later Submit does not send them in place of its own. Without SQPOLL the
// kernel reads the submission queue only inside io_uring_enter, which
// Submit alone calls with entries to submit, under sqMu.
func (r *Ring) unqueueLocked() {
	atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqHead))
}

func (s SQE) encode(b []byte) {
	clear(b)
	b[0], b[1] = s.Opcode, s.Flags
	put16(b[2:], s.IOPrio)
	put32(b[4:], uint32(s.Fd))
	if s.Opcode == OpURingCmd {
		put32(b[8:], s.CmdOp)
	} else {
		put64(b[8:], s.Off)
	}
	put64(b[16:], s.Addr)
	put32(b[24:], s.Len)
	put32(b[28:], s.OpFlags)
	put64(b[32:], s.UserData)
	put16(b[40:], s.BufIndex)
	put16(b[42:], s.Personal)
	put32(b[44:], uint32(s.FileIdx))
	if len(s.Cmd) > 0 {
		copy(b[48:], s.Cmd)
	} else {
		put64(b[48:], s.Addr3)
	}
}

// PeekCQE returns the oldest completion and removes it from the ring, or
// false when there is none. It never blocks.
func (r *Ring) PeekCQE() (CQE, bool) {
	r.cqMu.Lock()
	defer r.cqMu.Unlock()
	if r.closed.Load() {
		return CQE{}, false
	}
	return r.peekLocked()
}

func (r *Ring) peekLocked() (CQE, bool) {
	head := *r.cqHead
	if head == atomic.LoadUint32(r.cqTail) {
		return CQE{}, false
	}
	e := unsafe.Slice((*byte)(unsafe.Add(r.cqes, int(head&*r.cqMask)*r.cqeSize)), r.cqeSize)
	c := CQE{UserData: get64(e[0:]), Res: int32(get32(e[8:])), Flags: get32(e[12:])}
	if r.cqeSize == 32 {
		copy(c.Extra[:], e[16:32])
	}
	atomic.StoreUint32(r.cqHead, head+1)
	return c, true
}

// WaitCQE returns the oldest completion, waiting for one until ctx is done.
// On ctx's end it returns ctx.Err(); completions that arrive later stay in
// the ring.
func (r *Ring) WaitCQE(ctx context.Context) (CQE, error) {
	r.cqMu.Lock()
	defer r.cqMu.Unlock()
	for {
		if r.closed.Load() {
			return CQE{}, errClosed
		}
		if c, ok := r.peekLocked(); ok {
			return c, nil
		}
		if err := ctx.Err(); err != nil {
			return CQE{}, err
		}
		wait := PollSlice
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if wait <= 0 {
			continue // ctx.Err() is set on the next turn
		}
		if err := r.enterWait(wait); err != nil {
			return CQE{}, err
		}
	}
}

// enterWait blocks in the kernel until a completion is posted or d passes.
func (r *Ring) enterWait(d time.Duration) error {
	if r.features&FeatExtArg == 0 {
		return r.pollWait(d)
	}
	ts := unix.NsecToTimespec(int64(d))
	// struct io_uring_getevents_arg { u64 sigmask; u32 sigmask_sz; u32 min_wait_usec; u64 ts; }
	var arg [24]byte
	put64(arg[16:], uint64(uintptr(unsafe.Pointer(&ts))))
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 1,
		enterGetEvents|enterExtArg, uintptr(unsafe.Pointer(&arg[0])), uintptr(len(arg)))
	switch errno {
	case 0, unix.ETIME, unix.EINTR:
		return nil
	case unix.EAGAIN, unix.EBUSY:
		// CQ overflow backlog being flushed: yield briefly instead of spinning.
		return r.pollWait(time.Millisecond)
	default:
		return fmt.Errorf("uring: io_uring_enter wait: %w", errno)
	}
}

func (r *Ring) pollWait(d time.Duration) error {
	ms := max(int(d/time.Millisecond), 1)
	_, err := unix.Poll([]unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}}, ms)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return fmt.Errorf("uring: poll: %w", err)
	}
	return nil
}

// SubmitAndWait submits one entry and waits for a completion until ctx is
// done. It is meant for rings used by one request at a time: on a ring with
// other commands in flight the completion returned may belong to one of
// them (compare UserData).
func (r *Ring) SubmitAndWait(ctx context.Context, sqe SQE) (CQE, error) {
	if _, err := r.Submit(sqe); err != nil {
		return CQE{}, err
	}
	return r.WaitCQE(ctx)
}
