//go:build linux

package loopdev

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/uring"
)

// Loop device ioctls (linux/loop.h).
const (
	loopSetFD      = 0x4C00
	loopClrFD      = 0x4C01
	loopCtlGetFree = 0x4C82
)

// Attach binds a fresh 1 MiB file to a free loop device, detaches it when
// the test ends, and returns the device node and its number. When not root
// or without /dev/loop-control the part is missing (realpart.Missing: the
// test skips, and fails under CI=true); it retries when another test
// process takes the same free device first.
func Attach(t testing.TB) (string, blockdev.DevNum) {
	t.Helper()
	ctl := control(t)
	defer ctl.Close()
	backing := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(backing, make([]byte, 1<<20), 0o600))
	return attach(t, ctl, backing)
}

// AttachFile binds backing (a file, or a block device node: a loop device
// stacked on another device, as losetup /dev/loopN /dev/ublkb0 makes) to a
// free loop device, detaches it when the test ends, and returns the device
// node and its number. A missing part is missing as for Attach.
func AttachFile(t testing.TB, backing string) (string, blockdev.DevNum) {
	t.Helper()
	ctl := control(t)
	defer ctl.Close()
	return attach(t, ctl, backing)
}

// control opens /dev/loop-control, or says the part is missing.
func control(t testing.TB) *os.File {
	t.Helper()
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to attach a loop device")
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		realpart.Missing(t, fmt.Sprintf("no loop devices: %v", err))
	}
	return ctl
}

func attach(t testing.TB, ctl *os.File, backing string) (string, blockdev.DevNum) {
	t.Helper()
	bf, err := os.OpenFile(backing, os.O_RDWR, 0)
	require.NoError(t, err)
	defer bf.Close()
	var node string
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), loopCtlGetFree)
		require.NoError(t, err, "LOOP_CTL_GET_FREE")
		node = fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(node, os.O_RDWR, 0)
		if err != nil {
			realpart.Missing(t, fmt.Sprintf("free loop device %s has no usable node here: %v", node, err))
		}
		err = unix.IoctlSetInt(int(lf.Fd()), loopSetFD, int(bf.Fd()))
		lf.Close()
		if err == nil {
			break
		}
		// Another test process may have taken the same free device.
		require.ErrorIs(t, err, unix.EBUSY, "LOOP_SET_FD")
		require.Less(t, attempt, 10, "no free loop device")
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(node, os.O_RDWR, 0); err == nil {
			_ = unix.IoctlSetInt(int(f.Fd()), loopClrFD, 0)
			f.Close()
		}
	})
	dev, err := blockdev.ReadDevNum("/sys", filepath.Base(node))
	require.NoError(t, err)
	return node, dev
}

// holdMapped keeps the first page of node mapped, its fd closed, until
// stdin closes.
func holdMapped(node string) int {
	f, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		fmt.Println("error: mmap:", err)
		return 1
	}
	defer unix.Munmap(mem)
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// needRing says the part is missing when this kernel has no io_uring (ENOSYS)
// or has it turned off (EPERM: kernel.io_uring_disabled).
func needRing(t testing.TB) {
	t.Helper()
	r, err := uring.New(1, 0)
	if err != nil {
		realpart.Missing(t, fmt.Sprintf("io_uring unavailable here (%v); see /proc/sys/kernel/io_uring_disabled", err))
	}
	r.Close()
}

// registeredRing opens node, registers it as fixed file 0 of a new
// io_uring and closes its fd: the ring alone holds node then.
func registeredRing(node string) (*uring.Ring, error) {
	f, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := uring.New(1, 0)
	if err != nil {
		return nil, fmt.Errorf("io_uring: %w", err)
	}
	if err := r.RegisterFiles(int(f.Fd())); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// holdRing keeps node registered as fixed file 0 of an io_uring, its fd
// closed, until stdin closes; with closeRing the ring's fd is closed too,
// and the ring lives on through its mapping.
func holdRing(node string, closeRing bool) int {
	r, err := registeredRing(node)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer r.Close()
	if closeRing {
		// r.Close (deferred) then only unmaps: the process exits anyway.
		if err := unix.Close(r.Fd()); err != nil {
			fmt.Println("error:", err)
			return 1
		}
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// userfaultfd's ioctls (linux/userfaultfd.h) and io_uring_register's
// IORING_REGISTER_FILES_UPDATE.
const (
	uffdAPI             = 0xaa
	uffdioAPI           = 0xc018aa3f // _IOWR(0xaa, 0x3f, struct uffdio_api)
	uffdioRegister      = 0xc020aa00 // _IOWR(0xaa, 0x00, struct uffdio_register)
	uffdioCopy          = 0xc028aa03 // _IOWR(0xaa, 0x03, struct uffdio_copy)
	uffdRegisterMiss    = 1          // UFFDIO_REGISTER_MODE_MISSING
	registerFilesUpdate = 6
	registerFilesSkip   = -2 // IORING_REGISTER_FILES_SKIP: leave the slot as it is
)

// newUserfaultfd opens a userfaultfd that catches the kernel's faults too
// (no UFFD_USER_MODE_ONLY), with its API handshake done.
func newUserfaultfd() (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	if errno != 0 {
		return -1, fmt.Errorf("userfaultfd: %w", errno)
	}
	api := [3]uint64{uffdAPI, 0, 0} // api, features, ioctls
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uffdioAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		unix.Close(int(fd))
		return -1, fmt.Errorf("UFFDIO_API: %w", errno)
	}
	return int(fd), nil
}

// needUserfaultfd says the part is missing when this process may not catch
// the kernel's faults with userfaultfd.
func needUserfaultfd(t testing.TB) {
	t.Helper()
	fd, err := newUserfaultfd()
	if err != nil {
		realpart.Missing(t, fmt.Sprintf("userfaultfd for kernel faults unavailable here (%v); it needs CAP_SYS_PTRACE or vm.unprivileged_userfaultfd=1", err))
	}
	unix.Close(fd)
}

// holdRingLocked is holdRing whose ring's lock is then held by an
// IORING_REGISTER_FILES_UPDATE waiting on a userfaultfd fault, until a line
// "unlock" on stdin (the fault is served with skip entries) or the end of
// stdin.
func holdRingLocked(node string) int {
	r, err := registeredRing(node)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer r.Close()
	uffd, err := newUserfaultfd()
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer unix.Close(uffd)
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Println("error: mmap:", err)
		return 1
	}
	addr := uint64(uintptr(unsafe.Pointer(&mem[0])))
	reg := [4]uint64{addr, uint64(page), uffdRegisterMiss, 0} // range, mode, ioctls
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(uffd), uffdioRegister, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		fmt.Println("error: UFFDIO_REGISTER:", errno)
		return 1
	}
	update := struct {
		offset, resv uint32
		fds          uint64
	}{fds: addr} // slot 0 from the first fd of the page, which faults
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread waits in the kernel; the process exits with it
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.Fd()), registerFilesUpdate,
			uintptr(unsafe.Pointer(&update)), 1, 0, 0)
		if errno != 0 {
			done <- errno
			return
		}
		done <- nil
	}()
	event := make([]byte, 32) // struct uffd_msg: the fault is pending, the ring's lock held
	if _, err := unix.Read(uffd, event); err != nil {
		fmt.Println("error: reading the userfaultfd:", err)
		return 1
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return 0 // the exit ends the wait in the kernel
		}
		if line != "unlock\n" {
			continue
		}
		skip := make([]byte, page)
		for i := 0; i < page; i += 4 {
			*(*int32)(unsafe.Pointer(&skip[i])) = registerFilesSkip
		}
		cp := [5]uint64{addr, uint64(uintptr(unsafe.Pointer(&skip[0]))), uint64(page), 0, 0} // dst, src, len, mode, copy
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(uffd), uffdioCopy, uintptr(unsafe.Pointer(&cp))); errno != 0 {
			fmt.Println("error: UFFDIO_COPY:", errno)
			return 1
		}
		if err := <-done; err != nil {
			fmt.Println("error: IORING_REGISTER_FILES_UPDATE:", err)
			return 1
		}
		fmt.Println("unlocked")
	}
}
