package pid1

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
)

// A pod with `tty: true` runs its command on a terminal: runc makes the container's console
// the controlling terminal of PID 1, whose process group is the terminal's foreground one.
// The init's child runs in a process group of its own, which was left in the background:
// the program's first read of the terminal stopped it (SIGTTIN) for good, and a Ctrl-C,
// which went to the init and was forwarded, stayed pending. As tini does, the init now makes the child's group the
// terminal's foreground one before the program starts:
//
//	runc: setsid, TIOCSCTTY ── PID 1 (init) ── child, its own group, made foreground
//	test types "hello\n" ─────────────────────────> the program reads it
//	test types Ctrl-C ────────────────────────────> SIGINT to the program's group
//	program exits 42 ──────── PID 1 exits 42
func TestProgramOwnsTheTerminalOfATTYPod(t *testing.T) {
	p, console := startOnConsole(t, syscall.CLONE_NEWPID, "tty")
	p.waitLine(t, "foreground: true")
	typeHelloThenCtrlC(t, p, console)
	p.exits(t, 42, "the program's exit status")
}

// The init of a tty: true pod that cannot start its child (no /proc/self/exe) runs the
// program as PID 1 itself. The child it tried to start had made its own group the
// terminal's foreground one before its exec failed, and nothing gave the terminal back:
// the program was in the background of its own terminal, its read failed (EIO: PID 1's
// group is orphaned) and a Ctrl-C went to the group of the dead child. The init now gives
// the terminal back to its own group when the child could not be started:
//
//	runc: setsid, TIOCSCTTY ── PID 1 (init) ── child: TIOCSPGRP, exec fails
//	PID 1: "running as PID 1 without it", the terminal its group's again
//	test types "hello\n" ─────────────────────────> the program (PID 1) reads it
//	test types Ctrl-C ────────────────────────────> SIGINT to PID 1's group
func TestFailedChildStartLeavesTheTerminalToTheProgram(t *testing.T) {
	p, console := startOnConsole(t, syscall.CLONE_NEWPID, "tty", noChildEnv+"=1")
	p.waitLine(t, "pid1.test: built-in init: starting /proc/self/exe: ")
	p.waitLine(t, "foreground: true")
	typeHelloThenCtrlC(t, p, console)
	p.exits(t, 42, "the program's exit status")
}

// An init started by hand under `unshare --pid --fork` from a shell is PID 1 of its
// namespace in the job's process group, which, as the terminal's foreground group, is
// outside the namespace: both read as 0 there. The init took them for the same group, so
// from a shell's background job (`unshare -pf server &`) its child took the shell's
// terminal, the shell's next read of it stopped or failed. The kernel tells the two
// apart (a read of no bytes, SIGTTIN blocked, fails with EIO in the background):
//
//	shell (session leader, terminal's foreground group) ── job & (group of its own)
//	job ── PID 1 (init, in the job's group) ── program: "foreground: false"
//	the terminal's foreground group: still the shell's
func TestInitInAShellsBackgroundJobLeavesTheTerminalToTheShell(t *testing.T) {
	p, console := startOnConsole(t, 0, "shell-bg-job")
	p.waitLine(t, "foreground: false")
	fg, err := unix.IoctlGetInt(int(console.Fd()), unix.TIOCGPGRP)
	require.NoError(t, err)
	assert.Equal(t, p.Cmd.Process.Pid, fg, "the terminal's foreground group is the shell's")
	p.exits(t, 0)
}

// Typed alone at the shell's prompt, the job is the terminal's foreground group, and so
// is the program under the init, where it reads the terminal (row 3480).
func TestInitInAShellsForegroundJobHandsTheTerminalToTheProgram(t *testing.T) {
	p, _ := startOnConsole(t, 0, "shell-fg-job")
	p.waitLine(t, "foreground: true")
	p.exits(t, 0)
}

// A foreground job whose other command reads the terminal (`cat | unshare -pf server`):
// cat, asleep in its read, holds the terminal's read lock, and the init's read of no
// bytes, which tells a foreground group from a background one, waited for it, the program
// not started until a line was typed. The init reads from a non-blocking descriptor of
// its own, which does not wait for the lock.
func TestInitInAShellsForegroundJobDoesNotWaitForAReaderOfTheTerminal(t *testing.T) {
	p, _ := startOnConsole(t, 0, "shell-fg-job", readerEnv+"=1")
	p.waitLine(t, "foreground: true")
	p.exits(t, 0)
}

// typeHelloThenCtrlC types "hello\n" on the console, which the program reads, then
// Ctrl-C, whose SIGINT the program gets.
func typeHelloThenCtrlC(t *testing.T, p *pid1, console *os.File) {
	t.Helper()
	_, err := console.WriteString("hello\n")
	require.NoError(t, err)
	p.waitLine(t, `read "hello\n" <nil>`)
	_, err = console.Write([]byte{3}) // Ctrl-C: the terminal's VINTR
	require.NoError(t, err)
	p.waitLine(t, "got SIGINT")
}

// exits waits for p to exit with code, not killed by a signal.
func (p *pid1) exits(t *testing.T, code int, msgAndArgs ...any) {
	t.Helper()
	got, signalled := p.wait(t)
	assert.Equal(t, code, got, msgAndArgs...)
	assert.False(t, signalled)
}

// inNewPIDNamespace makes cmd start as PID 1 of a new PID namespace, as
// `unshare --pid --fork` starts its command, in its starter's process group.
func inNewPIDNamespace(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	return nil
}

// startOnConsole starts the test program prog as runc starts a tty: true pod's command,
// in a session of its own whose controlling terminal is the console, its stdin, stdout
// and stderr, with cloneflags (CLONE_NEWPID: as PID 1 of a new PID namespace). It returns
// the process, whose lines are what is written to the terminal, and the console, where
// the test types.
func startOnConsole(t *testing.T, cloneflags uintptr, prog string, env ...string) (*pid1, *os.File) {
	t.Helper()
	if os.Geteuid() != 0 {
		realpart.Missing(t, "a new PID namespace needs root (run the tests as root)")
	}
	console, terminal := openConsole(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), programEnv+"="+prog), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = terminal, terminal, terminal
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, // runc's console
		Cloneflags: cloneflags, Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	p := &pid1{lines: readConsole(t, console)}
	p.Process = pid1test.Start(t, cmd)
	require.NoError(t, terminal.Close()) // the container's stdio holds it
	return p, console
}

// openConsole opens a pseudo-terminal as a container runtime makes a pod's console: the
// console, its side (kubectl attach's), and the terminal, the container's stdio, with its
// echo off so that what the test types is not read back as the program's output.
func openConsole(t *testing.T) (console, terminal *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	require.NoError(t, err)
	console = os.NewFile(uintptr(fd), "/dev/ptmx") // non-blocking: Close ends a Read
	t.Cleanup(func() { _ = console.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	require.NoError(t, err)
	ttyFD, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	terminal = os.NewFile(uintptr(ttyFD), "terminal")
	t.Cleanup(func() { _ = terminal.Close() })
	termios, err := unix.IoctlGetTermios(ttyFD, unix.TCGETS)
	require.NoError(t, err)
	termios.Lflag &^= unix.ECHO
	require.NoError(t, unix.IoctlSetTermios(ttyFD, unix.TCSETS, termios))
	return console, terminal
}

// readConsole returns the lines the container writes to its terminal, read on the console,
// without the carriage return the terminal adds (ONLCR); the channel is closed once every
// holder of the terminal has closed it (EIO), or the test's cleanup has closed the console.
func readConsole(t *testing.T, console *os.File) chan string {
	lines := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(console)
		for sc.Scan() {
			lines <- strings.TrimSuffix(sc.Text(), "\r")
		}
		close(lines)
	}()
	t.Cleanup(func() { // after pid1test.Start's, which has ended the container
		_ = console.Close()
		for range lines {
		}
		<-done
	})
	return lines
}
