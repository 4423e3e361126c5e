package main

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/examples/sandboxd/server"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1"
)

// mainEnv makes the test binary run sandboxd's main with its arguments.
const mainEnv = "SANDBOXD_MAIN_TEST"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" { // main(), which os.Exit ends
		pid1.Init()
		fakeublk.MainIfDaemon()
		os.Exit(server.Main(context.Background(), os.Args[1:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// Fault (row 1112): sandboxd stops holding its signals when Close ends (the Catcher's
// Stop, last), before it exits, and a SIGTERM between the two (the kubelet's again: a
// restarted kubelet, a runtime that sends the stop signal with every stop request) had its
// default action. After a New that failed, that is while Main writes the termination
// message, the one account of why: the process ended by the signal, status 143 where 1
// was due, and no message. Here New fails at the -listen address another process holds,
// and the termination message is a FIFO that nobody reads until the SIGTERM has come:
//
//	sandboxd: "-listen: ... address already in use", Close: the signals no longer held
//	          opens the termination message to write it: waits for a reader
//	kubelet:  SIGTERM            before: sandboxd ends by it (143), no message
//	test:     reads the FIFO     after: the message, exit status 1
//
// Real process: this test binary, re-executed as sandboxd.
func TestSIGTERMAfterAFailedStartDoesNotCutTheTerminationMessage(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	hook, err := freeport.Addr()
	require.NoError(t, err)
	msg := filepath.Join(t.TempDir(), "termination-log")
	require.NoError(t, syscall.Mkfifo(msg, 0o600))
	cmd := exec.Command(os.Args[0], "-listen", busy.Addr().String(), "-hook-listen", hook, "-state-dir", t.TempDir(),
		"-grace", "6s", "-devices", "0", "-termination-log", msg)
	cmd.Env = append(os.Environ(), mainEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	const failed = "sandboxd: -listen: " // said before the message is written
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), failed) }, 30*time.Second, 10*time.Millisecond,
		"sandboxd did not fail at -listen: %s", &stderr)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM), "the kubelet's, as the message is written")
	require.Eventually(t, func() bool { return !sigtermPending(cmd.Process.Pid) }, 10*time.Second, time.Millisecond,
		"the SIGTERM delivered")
	r, err := os.OpenFile(msg, os.O_RDONLY|syscall.O_NONBLOCK, 0) // never waits for a writer that is gone
	require.NoError(t, err)
	defer r.Close()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("sandboxd did not exit: %s", &stderr)
	}
	data, err := io.ReadAll(r)
	require.NoError(t, err)
	var exit *exec.ExitError
	require.ErrorAs(t, waitErr, &exit)
	require.False(t, exit.Sys().(syscall.WaitStatus).Signaled(), "sandboxd ended by the SIGTERM: no message\n%s", &stderr)
	assert.Equal(t, 1, exit.ExitCode(), "%s", &stderr)
	assert.Contains(t, string(data), "sandboxd: could not start: -listen: ", "the termination message")
}

// sigtermPending reports whether a SIGTERM sent to process pid waits to be delivered (its
// bit in /proc/PID/status's ShdPnd); a process gone has none.
func sigtermPending(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "ShdPnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(syscall.SIGTERM-1)) != 0
		}
	}
	return false
}
