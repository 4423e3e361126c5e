//go:build linux

package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/startsig/startsigtest"
	"github.com/drainkit/drainkit/pause"
)

// SIGHUP (a closed terminal, a reload habit) and SIGQUIT must not kill a node server: their
// default action ended the worker at once, with no drain, no Report and every sandbox
// lost. SIGHUP is logged and ignored, SIGQUIT dumps the goroutines, and the worker serves
// on until SIGTERM, which still checkpoints every sandbox and exits 0.
func TestHangupAndQuitDoNotKillTheWorker(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "worker.sock")
	p, stderr := startFakeWorker(t, dir)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "worker serving") },
		30*time.Second, 10*time.Millisecond, "worker did not start: %s", stderr)
	c := dial(t, sock)
	for range 2 {
		_, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err, "%s", stderr)
	}

	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		require.NoError(t, p.Cmd.Process.Signal(sig))
	}
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "goroutine dump") },
		10*time.Second, 10*time.Millisecond, "SIGQUIT's dump: %s", stderr)
	list, err := c.List(context.Background())
	require.NoError(t, err, "the worker is alive after SIGHUP and SIGQUIT: %s", stderr)
	assert.Len(t, list.Sandboxes, 2)
	assert.Contains(t, stderr.String(), "SIGHUP ignored")

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.Wait(t, 30*time.Second, "the worker did not exit: %s", stderr), "exit status 0: %s", stderr)
	data, err := os.ReadFile(filepath.Join(dir, "last-shutdown.json"))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved], "both sandboxes checkpointed")
}

// Fault: the worker served its socket before it handled SIGTERM. serve started the gRPC
// server, then registered SIGTERM and SIGINT (HandleSignals): a connection waiting in the
// socket's queue (the socket listens from the start) is taken, and the server's first
// frame sent, the moment serving starts, and a SIGTERM that came once the worker answered
// still had its default action: the worker died at once, with no checkpoint, no Report
// and every sandbox lost. Every handler is now in place before the worker serves.
func TestSIGTERMAsSoonAsTheWorkerAnswersDrains(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "worker.sock")
	p, stderr := startFakeWorker(t, dir)
	var c net.Conn
	require.Eventually(t, func() bool { // every millisecond: a connection waits in the queue when serving starts
		var err error
		c, err = net.Dial("unix", sock)
		return err == nil
	}, 30*time.Second, time.Millisecond, "worker did not start: %s", stderr)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second))) // a bound on the failure
	_, err := c.Read(make([]byte, 1))                                     // the server's first frame: it serves
	require.NoError(t, err, "%s", stderr)
	require.NoError(t, c.Close())
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, as soon as the worker answers")

	require.NoError(t, p.Wait(t, 30*time.Second, "the worker did not exit: %s", stderr),
		"drained, exit status 0, not killed by the SIGTERM: %s", stderr)
	_, err = os.Stat(filepath.Join(dir, "last-shutdown.json"))
	assert.NoError(t, err, "the Report is written")
}

// Fault: the worker handled SIGTERM only once it served, and its start takes a while (the
// state directory's lock, its sandboxes' records, with runsc the orphans' sweep: a
// `runsc` call each). A SIGTERM in that window (a pod deleted while it starts) had its
// default action: the worker died at once, exit by signal, no Report. Now it is logged
// when it comes, the start goes on, and the worker drains at once, its budget counted
// from the SIGTERM.
func TestSIGTERMWhileStartingDrainsOnceStarted(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(t.TempDir(), "gate")
	p, stderr := startFakeWorker(t, dir, holdStartEnv+"="+gate)
	sent, released := startsigtest.SIGTERMWhileHeld(t, p, stderr, gate, "SIGTERM while the worker starts")

	require.NoError(t, p.Wait(t, 30*time.Second, "the worker did not exit: %s", stderr), "drained, exit status 0: %s", stderr)
	startsigtest.CountedFromSIGTERM(t, filepath.Join(dir, "last-shutdown.json"), sent, released)
}

// startFakeWorker starts the worker as a real process on the state directory dir, with the
// fake runtime, and returns it and its stderr.
func startFakeWorker(t *testing.T, dir string, env ...string) (*pid1test.Process, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-state-dir", dir, "-runtime", "fake", "-pause-latency", "50ms", "-grace", "10s")
	cmd.Env = append(append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0"), env...)
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	return pid1test.Start(t, cmd), &stderr
}

// Fault: a worker that could not start (here a -socket in a directory that does not
// exist; a SIGTERM while it waits for the state directory's lock, a runsc it cannot run,
// a plan that does not fit -grace end there too) exited 1 and wrote no termination
// message: the pod's last state showed exit code 1 and nothing else (the kubelet's
// default terminationMessagePolicy, File, does not fall back to the log). It now says
// that no drain ran and why.
func TestStartThatFailsSaysWhyInTheTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	termLog := filepath.Join(dir, "termination-log")
	sock := filepath.Join(dir, "missing", "worker.sock")
	cmd := exec.Command(os.Args[0], "-state-dir", dir, "-socket", sock, "-runtime", "fake", "-grace", "10s",
		"-termination-log", termLog)
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	p := pid1test.Start(t, cmd)
	err := p.Wait(t, 30*time.Second, "the worker did not exit: %s", &stderr)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", &stderr)
	require.Equal(t, 1, exit.ExitCode(), "%s", &stderr)
	msg, err := os.ReadFile(termLog)
	require.NoError(t, err, "the termination message is written: %s", &stderr)
	lines := strings.Split(strings.TrimSuffix(string(msg), "\n"), "\n")
	require.Len(t, lines, 2, "%s", msg)
	assert.Equal(t, "drainkit: no drain ran", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "gvisor-worker: could not start: "), lines[1])
	assert.Contains(t, lines[1], "-socket: ")
	assert.Contains(t, lines[1], filepath.Dir(sock))
}
