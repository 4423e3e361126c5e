package ready

import (
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fresh gives the test the package as a process starts with it (no pipe taken, no
// hold, Ready not called), and again when it ends.
func fresh(t *testing.T) {
	reset := func() { fd, once, release = -1, sync.Once{}, nil }
	reset()
	t.Cleanup(reset)
}

// readyPipe returns a pipe as the built-in init hands it: its write end a descriptor
// number (the value of pid1.ChildEnv) that is not close-on-exec.
func readyPipe(t *testing.T) (r *os.File, v string) {
	var p [2]int
	// No O_CLOEXEC, as inherited across exec; O_NONBLOCK so that the read end
	// takes a deadline.
	require.NoError(t, syscall.Pipe2(p[:], syscall.O_NONBLOCK))
	r = os.NewFile(uintptr(p[0]), "ready-read")
	t.Cleanup(func() { r.Close() })
	return r, strconv.Itoa(p[1])
}

// closeOnExec reports whether descriptor n is close-on-exec.
func closeOnExec(t *testing.T, n int) bool {
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(n), syscall.F_GETFD, 0)
	require.Zero(t, errno)
	return flags&syscall.FD_CLOEXEC != 0
}

// Take keeps the pipe close-on-exec, so that no process the program starts holds
// it open; the init sees its end only when Ready closes it, and a second Ready
// closes nothing more, not the descriptor a later open got the same number as.
func TestReadyClosesTheTakenPipeOnce(t *testing.T) {
	fresh(t)
	r, v := readyPipe(t)
	n, _ := strconv.Atoi(v)
	Take(v)
	assert.True(t, closeOnExec(t, n), "the taken pipe is close-on-exec")
	require.NoError(t, r.SetReadDeadline(time.Now())) // is the end there yet: no wait
	_, err := r.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the pipe's end before Ready")

	Ready()
	require.NoError(t, r.SetReadDeadline(time.Time{}))
	_, err = r.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the init reads the pipe's end once Ready returns")

	again, v2 := readyPipe(t) // a later pipe: its read end on the number Ready closed
	require.Equal(t, uintptr(n), again.Fd(), "the freed number reused")
	m, _ := strconv.Atoi(v2)
	t.Cleanup(func() { _ = syscall.Close(m) })
	Ready()
	_, err = syscall.Write(m, []byte("x"))
	require.NoError(t, err)
	_, err = again.Read(make([]byte, 1))
	require.NoError(t, err, "the second Ready closed the later pipe")
}

// A value that names no pipe (an environment set by hand, the standard
// descriptors, a file) is left alone: Ready closes nothing.
func TestTakeLeavesAloneAValueThatNamesNoPipe(t *testing.T) {
	file, err := os.Create(t.TempDir() + "/f")
	require.NoError(t, err)
	defer file.Close()
	for _, v := range []string{"", "x", "-1", "0", "2", "999", strconv.Itoa(int(file.Fd()))} {
		fresh(t)
		Take(v)
		Ready()
		assert.Equal(t, -1, fd, "Take(%q)", v)
	}
	_, err = file.Write([]byte("x"))
	assert.NoError(t, err, "the file Take was given is still open")
}

// Ready ends the init's hold (Hold) in its caller, before it returns, and once.
func TestReadyEndsTheHoldBeforeItReturnsOnce(t *testing.T) {
	fresh(t)
	ended := 0
	Hold(func() { ended++ })
	Ready()
	assert.Equal(t, 1, ended, "the hold ended when Ready returned")
	Ready()
	assert.Equal(t, 1, ended, "a second Ready")
}
