//go:build linux

package uring

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/realpart"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newRing sets up a real ring, skipping when this kernel has io_uring off.
func newRing(t *testing.T, entries, flags uint32) *Ring {
	t.Helper()
	r, err := New(entries, flags)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		realpart.Missing(t, fmt.Sprintf("io_uring unavailable on this kernel (%v); see /proc/sys/kernel/io_uring_disabled", err))
	}
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.Close()) })
	return r
}

func TestNopCompletesOnSQE128Ring(t *testing.T) {
	r := newRing(t, 4, SetupSQE128)
	assert.Equal(t, 80, r.CmdSize())
	assert.GreaterOrEqual(t, r.Entries(), uint32(4))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cqe, err := r.SubmitAndWait(ctx, Nop(0xfeedface))
	require.NoError(t, err)
	assert.Equal(t, uint64(0xfeedface), cqe.UserData)
	assert.Equal(t, int32(0), cqe.Res)
	assert.NoError(t, cqe.Err())
}

func TestBatchCompletionsCarryTheirUserData(t *testing.T) {
	r := newRing(t, 8, 0)
	assert.Equal(t, 16, r.CmdSize())
	n, err := r.Submit(Nop(1), Nop(2), Nop(3))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := map[uint64]bool{}
	for range 3 {
		cqe, err := r.WaitCQE(ctx)
		require.NoError(t, err)
		got[cqe.UserData] = true
	}
	assert.Equal(t, map[uint64]bool{1: true, 2: true, 3: true}, got)
	_, ok := r.PeekCQE()
	assert.False(t, ok, "no completion left")
}

func TestCQE32RingDeliversCompletions(t *testing.T) {
	r := newRing(t, 2, SetupSQE128|SetupCQE32)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range uint64(5) { // wraps the 2-entry (4-CQE) ring
		cqe, err := r.SubmitAndWait(ctx, Nop(i))
		require.NoError(t, err)
		assert.Equal(t, i, cqe.UserData)
	}
}

func TestURingCmdReachesTheFilesDriver(t *testing.T) {
	// A regular file has no ->uring_cmd: the kernel answers EOPNOTSUPP,
	// which proves the entry was decoded as IORING_OP_URING_CMD on its fd.
	f, err := os.CreateTemp(t.TempDir(), "cmd")
	require.NoError(t, err)
	defer f.Close()
	r := newRing(t, 2, SetupSQE128)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cqe, err := r.SubmitAndWait(ctx, URingCmd(int(f.Fd()), 0x80207502, make([]byte, 32), 7))
	require.NoError(t, err)
	assert.Equal(t, uint64(7), cqe.UserData)
	assert.ErrorIs(t, cqe.Err(), unix.EOPNOTSUPP)
}

// A registered file stays usable through the ring after its fd is closed:
// the ring holds the file, with no descriptor left in the process.
func TestRegisteredFileIsReadThroughTheRingAfterItsFdIsClosed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("held by the ring"), 0o600))
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	r := newRing(t, 2, 0)
	require.NoError(t, r.RegisterFiles(-1, fd))
	require.NoError(t, unix.Close(fd))
	assert.ErrorIs(t, r.RegisterFiles(0), unix.EBUSY, "one set of files per ring")

	buf := make([]byte, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cqe, err := r.SubmitAndWait(ctx, SQE{Opcode: OpRead, Flags: SQEFixedFile, Fd: 1,
		Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), Len: uint32(len(buf)), UserData: 5})
	runtime.KeepAlive(buf)
	require.NoError(t, err)
	require.NoError(t, cqe.Err())
	assert.Equal(t, "held by the ring", string(buf[:cqe.Res]))

	cqe, err = r.SubmitAndWait(ctx, SQE{Opcode: OpRead, Flags: SQEFixedFile, Fd: 0,
		Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), Len: uint32(len(buf)), UserData: 6})
	runtime.KeepAlive(buf)
	require.NoError(t, err)
	assert.ErrorIs(t, cqe.Err(), unix.EBADF, "slot 0 was left empty")
	assert.ErrorContains(t, r.RegisterFiles(), "at least one")
}

func TestWaitReturnsAtDeadlineWithoutCompletions(t *testing.T) {
	r := newRing(t, 2, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := r.WaitCQE(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestWaitReturnsOnCancel(t *testing.T) {
	r := newRing(t, 2, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := r.WaitCQE(ctx); done <- err }()
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

func TestSubmitRejectsOversizedPayloadAndFullQueue(t *testing.T) {
	r := newRing(t, 1, 0)
	_, err := r.Submit(URingCmd(0, 1, make([]byte, 17), 0))
	assert.ErrorContains(t, err, "17 bytes")
	_, err = r.Submit(Nop(1), Nop(2))
	assert.ErrorIs(t, err, ErrRingFull)
}

func TestClosedRingRefusesWork(t *testing.T) {
	r := newRing(t, 2, 0)
	require.NoError(t, r.Close())
	require.NoError(t, r.Close(), "Close is idempotent")
	_, err := r.Submit(Nop(1))
	assert.Error(t, err)
	_, err = r.WaitCQE(context.Background())
	assert.Error(t, err)
}

func TestEncodePlacesURingCmdFieldsAtABIOffsets(t *testing.T) {
	b := make([]byte, 128)
	payload := make([]byte, 32)
	payload[0], payload[31] = 0xaa, 0xbb
	URingCmd(9, 0xc0207507, payload, 0x1122334455667788).encode(b)
	assert.Equal(t, uint8(46), b[0])
	assert.Equal(t, uint32(9), get32(b[4:]))
	assert.Equal(t, uint32(0xc0207507), get32(b[8:]))
	assert.Equal(t, uint64(0x1122334455667788), get64(b[32:]))
	assert.Equal(t, byte(0xaa), b[48])
	assert.Equal(t, byte(0xbb), b[79])
}

func TestNewRejectsZeroEntries(t *testing.T) {
	_, err := New(0, 0)
	assert.ErrorContains(t, err, "entries")
}

// The kernel stops a batch at an entry it refuses at submission (here an
// unknown opcode, completed with EINVAL): the entries after it were never
// taken. Submit says so, and they do not stay queued to be sent by a later
// Submit in place of that call's own entries (a control command that was
// never sent, and one sent that the caller had given up on).
func TestEntriesTheKernelDidNotTakeAreNotSentLater(t *testing.T) {
	r := newRing(t, 4, 0)
	n, err := r.Submit(Nop(1), SQE{Opcode: 0xfe, UserData: 2}, Nop(3))
	assert.Equal(t, 2, n, "the kernel took the Nop and the refused entry")
	assert.ErrorContains(t, err, "took 2 of 3")

	_, err = r.Submit(Nop(4))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got := map[uint64]int32{}
	for len(got) < 3 {
		cqe, err := r.WaitCQE(ctx)
		if err != nil {
			break
		}
		got[cqe.UserData] = cqe.Res
	}
	assert.Equal(t, map[uint64]int32{1: 0, 2: -int32(unix.EINVAL), 4: 0}, got, "3 was never sent; 4 was")
}
