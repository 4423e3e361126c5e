package early

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
)

// A real PID 1 of a new PID namespace gets signals from its parent's
// namespace, as a pod's command gets the kubelet's, while nothing has taken
// its signals over (a program still on its way to main, or in a long start
// before it reads them) and after. Each is sent once the one before it is
// on the channel, so their order is the order they came:
//
//	before the take   SIGTERM SIGHUP SIGTERM SIGUSR1 (SIGCHLD SIGURG) SIGINT
//	                  held, in order, the repeat too; SIGCHLD and SIGURG
//	                  not (the reaper's and the Go runtime's)
//	take              the consumer keeps SIGTERM, SIGINT and SIGUSR1 and
//	                  gives every other back (signal.Reset); it receives
//	                  the five held, in the order they came, SIGHUP among
//	                  them (it came before)
//	after the take    SIGUSR1 SIGTERM received as they come; SIGWINCH and
//	                  SIGCHLD not (given back, and left: the Go runtime
//	                  ignores them); SIGHUP, given back, ends PID 1 as the
//	                  Go runtime's default for it does
func TestSignalsBeforeAndAfterTheConsumerTakesThemComeInOrder(t *testing.T) {
	c := startConsumer(t, pid1test.StartPID1)
	c.expect(t, "caught=true pid=1")

	held := 0
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGUSR1,
		syscall.SIGCHLD, syscall.SIGURG, syscall.SIGINT} {
		c.signal(t, sig)
		if sig == syscall.SIGCHLD || sig == syscall.SIGURG {
			continue // not held: SIGINT's wait, and the order received, show it
		}
		held++
		c.waitHeld(t, held)
	}
	c.command(t, "take")
	c.expect(t, "took")
	for _, want := range []string{"SIGTERM", "SIGHUP", "SIGTERM", "SIGUSR1", "SIGINT"} {
		c.expect(t, "got "+want)
	}

	c.signal(t, syscall.SIGUSR1)
	c.expect(t, "got SIGUSR1")
	c.signal(t, syscall.SIGTERM)
	c.expect(t, "got SIGTERM")
	c.signal(t, syscall.SIGWINCH)
	c.signal(t, syscall.SIGCHLD)
	c.signal(t, syscall.SIGINT)
	c.expect(t, "got SIGINT")

	c.signal(t, syscall.SIGHUP)
	code, signalled := c.wait(t)
	// The Go runtime dies by a SIGHUP no one asked for: it raises it again
	// with the default action, which the kernel does not deliver to a
	// namespace's init from inside it, and exits 2.
	assert.Equal(t, 2, code, "SIGHUP, given back, has the Go runtime's default action")
	assert.False(t, signalled)
}

// The built-in init's child (ChildEnv set) and a process that is not PID 1
// catch nothing: their signals are the program's to ask for, and one it
// has not asked for has its default action, as without this package.
func TestOnlyANamespacesInitCatches(t *testing.T) {
	t.Run("the built-in init's child", func(t *testing.T) {
		c := startConsumer(t, pid1test.StartPID1, ChildEnv+"=3")
		c.expect(t, "caught=false pid=1")
		c.signal(t, syscall.SIGTERM)
		code, signalled := c.wait(t)
		assert.Equal(t, 2, code, "SIGTERM's default, for a namespace's init: exit status 2")
		assert.False(t, signalled)
	})
	t.Run("not PID 1", func(t *testing.T) {
		c := startConsumer(t, pid1test.Start)
		c.expectPrefix(t, "caught=false pid=")
		c.signal(t, syscall.SIGTERM)
		_, signalled := c.wait(t)
		assert.True(t, signalled, "SIGTERM's default: the process dies by it")
		assert.Equal(t, syscall.SIGTERM, c.Cmd.ProcessState.Sys().(syscall.WaitStatus).Signal())
	})
}

// A process is the consumer program, started by a test.
type process struct {
	*pid1test.Process
	stdin io.WriteCloser
	lines chan string
}

// startConsumer starts the test binary as the consumer program with start
// (pid1test.StartPID1 or Start) and env added to its environment.
func startConsumer(t *testing.T, start func(testing.TB, *exec.Cmd) *pid1test.Process, env ...string) *process {
	t.Helper()
	if os.Geteuid() != 0 {
		realpart.Missing(t, "a new PID namespace needs root (run the tests as root)")
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), roleEnv+"=1"), env...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	c := &process{stdin: stdin, lines: make(chan string, 16)}
	c.Process = startWithDefaults(t, start, cmd)
	_ = w.Close()
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(c.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = r.Close()
		for range c.lines {
		}
		<-read
	})
	return c
}

// startWithDefaults starts cmd with start, its signals at their default
// actions whatever the test's own are. A signal ignored by the process that
// runs the tests (nohup ignores SIGHUP; a shell's background job, SIGINT)
// stays ignored across exec, and the consumer then survives the SIGHUP the
// first test expects to end it: in a cold CI run under nohup that test
// waited for its exit until the package's 10-minute timeout. A signal
// caught when the process forks is reset to its default by exec: the test
// catches them while it starts the consumer, then stops.
func startWithDefaults(t *testing.T, start func(testing.TB, *exec.Cmd) *pid1test.Process, cmd *exec.Cmd) *pid1test.Process {
	t.Helper()
	caught := make(chan os.Signal, 1)
	signal.Notify(caught, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(caught)
	return start(t, cmd)
}

// signal sends sig to the process from the test's namespace, as the kubelet
// sends a pod's PID 1 its signals.
func (c *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, c.Cmd.Process.Signal(sig), "sending %s", unix.SignalName(sig))
}

// command writes one command line to the consumer.
func (c *process) command(t *testing.T, cmd string) {
	t.Helper()
	_, err := fmt.Fprintln(c.stdin, cmd)
	require.NoError(t, err)
}

// expect fails the test unless the consumer's next line is want.
func (c *process) expect(t *testing.T, want string) {
	t.Helper()
	assert.Equal(t, want, c.next(t))
}

// expectPrefix fails the test unless the consumer's next line starts with
// prefix.
func (c *process) expectPrefix(t *testing.T, prefix string) {
	t.Helper()
	line := c.next(t)
	assert.Equal(t, prefix, line[:min(len(prefix), len(line))], "line %q", line)
}

func (c *process) next(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		require.True(t, ok, "the consumer's stdout closed")
		return line
	case <-time.After(30 * time.Second):
		t.Fatal("no line from the consumer in 30 s")
		return ""
	}
}

// waitHeld waits until n signals wait on the consumer's channel: the last
// one sent has been caught, and the next can come after it. It asks in the
// test's goroutine, which alone may end the test.
func (c *process) waitHeld(t *testing.T, n int) {
	t.Helper()
	for give := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		c.command(t, "len")
		line := c.next(t)
		got, err := strconv.Atoi(strings.TrimPrefix(line, "len "))
		require.NoError(t, err, "line %q", line)
		if got == n {
			return
		}
		if time.Now().After(give) {
			t.Fatalf("%d signal(s) on the channel, not %d", got, n)
		}
	}
}

// wait waits for the consumer's stdout to close and the process to exit,
// and returns its exit code and whether a signal ended it.
func (c *process) wait(t *testing.T) (code int, signalled bool) {
	t.Helper()
	for closed := time.After(30 * time.Second); ; {
		select {
		case _, ok := <-c.lines:
			if ok {
				continue
			}
		case <-closed:
			t.Fatal("the consumer's stdout still open after 30 s: it did not exit")
		}
		break
	}
	err := c.Wait(t, 30*time.Second, "the consumer did not exit")
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return c.Cmd.ProcessState.ExitCode(), c.Cmd.ProcessState.Sys().(syscall.WaitStatus).Signaled()
}
