package pid1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// An orphan (a grandchild whose parent exited) is re-parented to PID 1, which a server's
// main never waits for: without the init it stays a zombie until the namespace ends, as
// gVisor's processes did after every runsc checkpoint. With it, it is reaped and the
// namespace holds only the init and the program.
func TestOrphanIsReaped(t *testing.T) {
	p := startPID1(t, "serve")
	p.waitLine(t, "ready env=") // the orphan exists: its parent has been reaped
	var procs []string
	ok := assert.Eventually(t, func() bool {
		procs = namespaceProcesses(t, p.cmd.Process.Pid)
		return len(procs) == 2
	}, 10*time.Second, 5*time.Millisecond)
	if !ok {
		t.Errorf("the namespace holds more than the init and the program: %v", procs)
	}
	for _, proc := range procs {
		assert.NotContains(t, proc, ") Z", "no zombie left")
		assert.Contains(t, proc, "(pid1.test)", "the child has the init's command name, not exe")
	}
}

// The kubelet sends SIGTERM to PID 1, now the init: it, and every other signal a process
// can catch, reaches the program as it arrives, and the program's exit status comes back
// as PID 1's. ChildEnv is gone from the program's environment.
func TestSignalsReachTheProgramAndItsStatusIsPID1s(t *testing.T) {
	p := startPID1(t, "serve")
	p.waitLine(t, "ready env=")
	for _, sig := range forwarded {
		require.NoError(t, p.cmd.Process.Signal(sig))
		p.waitLine(t, "got "+unix.SignalName(sig))
	}
	code, signalled := p.wait(t)
	assert.Equal(t, 42, code, "the program's exit status")
	assert.False(t, signalled, "PID 1 exited, it was not killed")
}

// A program ended by a signal (a Go program without a SIGTERM handler gets SIGTERM) gives
// PID 1 the exit status 128+n, as shells and tini report it.
func TestProgramKilledBySignalGives128PlusN(t *testing.T) {
	p := startPID1(t, "default")
	p.waitLine(t, "ready")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	code, signalled := p.wait(t)
	assert.Equal(t, 128+int(syscall.SIGTERM), code)
	assert.False(t, signalled, "PID 1 exited, it was not killed")
}

// Anywhere but PID 1, Init returns at once: the program is the process that was started,
// with no child of Init's.
func TestNotPID1RunsTheProgramItself(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), programEnv+"=serve")
	p := start(t, cmd)
	p.waitLine(t, "ready env=")
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	require.NoError(t, err)
	assert.Empty(t, bytes.TrimSpace(children), "the program runs in the process started, not in a child")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	p.waitLine(t, "got SIGTERM")
	code, _ := p.wait(t)
	assert.Equal(t, 42, code)
}

// A pid1 is a started test program and its stdout's lines.
type pid1 struct {
	cmd    *exec.Cmd
	lines  chan string
	exited chan error
}

// startPID1 starts the test program prog as PID 1 of a new PID namespace. It needs root
// (CAP_SYS_ADMIN): without it the test is skipped, and fails under CI=true.
func startPID1(t testing.TB, prog string) *pid1 {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "a new PID namespace needs root (run the tests as root)")
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), programEnv+"="+prog)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	return start(t, cmd)
}

// start starts cmd, reading its stdout line by line; the test's cleanup kills it (as PID
// 1, its whole namespace).
func start(t testing.TB, cmd *exec.Cmd) *pid1 {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	p := &pid1{cmd: cmd, lines: make(chan string, 16), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.exited <- cmd.Wait() // after the last read, as StdoutPipe requires
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range p.lines {
		}
		if err := <-p.exited; err != nil {
			p.exited <- err
		}
	})
	return p
}

// waitLine waits for the next line of stdout, which must begin with prefix.
func (p *pid1) waitLine(t testing.TB, prefix string) {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		require.True(t, ok, "stdout closed before %q", prefix)
		require.Equal(t, prefix, line[:min(len(prefix), len(line))], "line %q", line)
	case <-time.After(30 * time.Second):
		t.Fatalf("no line %q", prefix)
	}
}

// wait waits for the process to exit and returns its exit code, and whether a signal
// ended it.
func (p *pid1) wait(t *testing.T) (code int, signalled bool) {
	t.Helper()
	for range p.lines {
	}
	var err error
	select {
	case err = <-p.exited:
		p.exited <- err
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not exit")
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return p.cmd.ProcessState.ExitCode(), ws.Signaled()
}

// namespaceProcesses lists, as "pid (comm) STATE", the processes of the PID namespace of
// the host process init.
func namespaceProcesses(t *testing.T, init int) []string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	require.NoError(t, err)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, p := range stats {
		data, err := os.ReadFile(p)
		i := bytes.LastIndexByte(data, ')') // comm may hold spaces and parentheses
		if err != nil || i < 0 || i+2 >= len(data) {
			continue
		}
		if link, err := os.Readlink(filepath.Join(filepath.Dir(p), "ns/pid")); err == nil && link == ns {
			out = append(out, string(data[:i+3]))
		}
	}
	return out
}

// skipOrFail skips t for a missing real part, and fails it under CI=true, where every
// part must be there.
func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why + " (CI=true: must not be skipped)")
	}
	t.Skip(why)
}

// BenchmarkSignalForwarding measures what the init adds to a signal's way to the program:
// from kill(2) to the program's answer on stdout, sent to PID 1 (the init forwards it) and
// straight to a program that is not PID 1, alternately. It reports both and their ratio.
func BenchmarkSignalForwarding(b *testing.B) {
	underInit := startPID1(b, "serve")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), programEnv+"=serve")
	direct := start(b, cmd)
	underInit.waitLine(b, "ready env=")
	direct.waitLine(b, "ready env=")
	roundTrip := func(p *pid1) time.Duration {
		start := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			b.Fatal(err)
		}
		p.waitLine(b, "got SIGUSR1")
		return time.Since(start)
	}
	var viaInit, straight time.Duration
	n := 0
	for b.Loop() {
		viaInit += roundTrip(underInit)
		straight += roundTrip(direct)
		n++
	}
	b.ReportMetric(float64(viaInit.Microseconds())/float64(n), "init-µs/signal")
	b.ReportMetric(float64(straight.Microseconds())/float64(n), "direct-µs/signal")
	b.ReportMetric(float64(viaInit)/float64(straight), "init/direct")
}
