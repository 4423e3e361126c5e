//go:build linux

package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/startsig/startsigtest"
)

// Fault (row 1116): the worker stopped catching its signals at the end of close (the
// Catcher's Stop, last), before the process exits, and a SIGTERM between the two (the
// kubelet's again: a restarted kubelet, a runtime that sends the stop signal with every
// stop request) had its default action. After a start that failed, that is while Main
// writes the termination message, the one account of why: the worker ended by the
// signal, status 143 where 1 was due, and no message. Here the start fails at the -listen
// address another process holds, and the termination message is a FIFO that nobody reads
// until the SIGTERM has come:
//
//	worker:  "-listen: ... address already in use", close: the Catcher stopped
//	         opens the termination message to write it: waits for a reader
//	kubelet: SIGTERM          before: the worker ends by it (143), no message
//	test:    reads the FIFO   after: the message, exit status 1
//
// Real process: this test binary, re-executed as the worker.
func TestSIGTERMAfterAFailedStartDoesNotCutTheWorkersTerminationMessage(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	dir := t.TempDir()
	msg := filepath.Join(dir, "termination-log")
	require.NoError(t, syscall.Mkfifo(msg, 0o600))
	p, stderr := startWorkerMain(t, "-state-dir", dir, "-listen", busy.Addr().String(), "-termination-log", msg)
	data := startsigtest.SIGTERMAfterAFailedStart(t, p, msg, "gvisor-worker: -listen: ", stderr) // said before the message is written
	assert.Contains(t, string(data), "gvisor-worker: could not start: -listen: ", "the termination message")
}

// startWorkerMain starts the worker as a real process (this test binary, re-executed, in
// its own process group) with args after "-runtime fake -pause-latency 10ms -grace 4s",
// killed at the test's end if it still runs.
func startWorkerMain(t *testing.T, args ...string) (*kubeletsim.Child, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-runtime", "fake", "-pause-latency", "10ms", "-grace", "4s"}, args...)...)
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	child := kubeletsimtest.Start(t, cmd)
	return child, &stderr
}
