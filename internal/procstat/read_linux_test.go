//go:build linux

package procstat

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/realpart"
)

func TestReadThisProcess(t *testing.T) {
	st, err := Read(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), st.PID)
	assert.Equal(t, os.Getppid(), st.PPID)
	name := filepath.Base(os.Args[0])
	assert.Equal(t, name[:min(len(name), 15)], st.Comm)
	assert.NotZero(t, st.StartTime)
}

// The state read is the thread's whose stat it is: this one, reading its
// own, runs. (The process's stat is its main thread's, which may sleep
// while this test runs on another: 'S' under load, seen in CI.)
func TestReadThisThreadRuns(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	st, err := Read(tid)
	require.NoError(t, err)
	assert.Equal(t, tid, st.PID)
	assert.Equal(t, byte('R'), st.State, "reading its own stat, it runs")
}

// A child of this process, started after it; killed, a zombie until its
// parent reaps it; reaped, gone: fs.ErrNotExist, whether its stat file is
// opened after the reaping (ENOENT) or was opened before and read after
// (the kernel's ESRCH).
func TestReadAChildThroughItsLife(t *testing.T) {
	self, err := Read(os.Getpid())
	require.NoError(t, err)
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		realpart.Missing(t, "no sleep binary: "+err.Error())
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	opened, err := os.Open(path)
	require.NoError(t, err)
	defer opened.Close()

	st, err := Read(pid)
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), st.PPID)
	assert.GreaterOrEqual(t, st.StartTime, self.StartTime)
	assert.NotEqual(t, byte('Z'), st.State)

	require.NoError(t, cmd.Process.Kill())
	var info unix.Siginfo
	require.NoError(t, unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)) // exited, not reaped
	zombie, err := Read(pid)
	require.NoError(t, err, "a zombie still has its stat")
	assert.Equal(t, byte('Z'), zombie.State)
	assert.Equal(t, st.StartTime, zombie.StartTime)

	_ = cmd.Wait()
	_, err = read(opened, path)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.ErrorIs(t, err, syscall.ESRCH)
	assert.EqualError(t, err, "procstat: read "+path+": file does not exist (no such process)")
	_, err = Read(pid) // reaped: gone (unless the PID was reused meanwhile)
	if err != nil {
		assert.ErrorIs(t, err, fs.ErrNotExist)
		assert.EqualError(t, err, "procstat: open "+path+": no such file or directory")
	}
}

func TestReadRefusesANonPositivePID(t *testing.T) {
	for _, pid := range []int{0, -1} {
		_, err := Read(pid)
		assert.ErrorContains(t, err, "must be > 0")
		assert.NotErrorIs(t, err, fs.ErrNotExist)
	}
}

// A malformed file's error names the file and what is wrong.
func TestReadNamesTheFile(t *testing.T) {
	_, err := read(strings.NewReader("7 (x) S\n"), "/proc/7/stat")
	assert.EqualError(t, err, "procstat: /proc/7/stat: truncated: 3 fields, want at least 22 (starttime is field 22)")
	assert.NotErrorIs(t, err, fs.ErrNotExist)
}
