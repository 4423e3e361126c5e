//go:build linux

package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
)

// Fault: the supervisor caught its signals only once it had built its
// drain, its listeners and its children (signal.Notify in run), and until
// then a SIGTERM, a pod deleted while it starts, had the Go runtime's
// default action: the supervisor ended with no drain, no Report and no
// termination message, killed by the signal, or as PID 1 of its PID
// namespace (the container's command) exit status 2. Measured with the
// supervisor binary as PID 1 of a new PID namespace and SIGTERM 6-30 ms
// after its start: exit 2 (15 ms: 4 of 4, 25 ms: 2 of 4); with -pod and an
// API server slow to answer its read at start (2 s), the whole read. The
// signals are now caught first thing in Main, and as PID 1 from the
// initialisation of package internal/pid1/early on, as sandboxd and
// gvisor-worker catch them: the termination begins once the children have
// started, its budget counted from the SIGTERM.
//
//	0 s     the supervisor starts, held: in its read of the pod at start
//	        (its API server slow), or as PID 1 before Main
//	        SIGTERM (before: killed by it, or exit 2 as PID 1)
//	        (a SIGUSR1 then is not forwarded to the server once it starts:
//	        its default action would end a server just started)
//	then    the hold ends: the server starts, the drain runs at once,
//	        SIGKILL counted from the SIGTERM; the server gets its SIGTERM,
//	        the Report is written, exit 0
func TestSIGTERMWhileTheSupervisorStartsBeginsItsTermination(t *testing.T) {
	t.Run("in the read of its pod", func(t *testing.T) {
		reading := make(chan struct{}, 1)
		var slow atomic.Bool
		slow.Store(true)
		_, env := podAPIThrough(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && slow.Load() { // the read at start: answered when its client gives up
					select {
					case reading <- struct{}{}:
					default:
					}
					<-r.Context().Done()
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		n, sigfile := startingStubNode(t, nil, append(env, "POD_NAME=agentenv-node-x7k2p"))
		select {
		case <-reading:
		case <-time.After(20 * time.Second):
			t.Fatal("the supervisor never read its pod")
		}
		require.NoError(t, n.Cmd.Process.Signal(syscall.SIGUSR1), "an operator's, for a server not started yet")
		sent := time.Now()
		require.NoError(t, n.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, the pod deleted while the supervisor starts")
		slow.Store(false)
		n.drainedFrom(t, sent, sent, sigfile)
		assert.NotContains(t, readFile(t, sigfile), "user defined signal 1",
			"a signal to forward that came before the server started is not sent to the server just started")
	})
	t.Run("as PID 1 before main", func(t *testing.T) {
		if os.Geteuid() != 0 {
			realpart.Missing(t, "a new PID namespace needs root (run the tests as root)")
		}
		fifo := filepath.Join(t.TempDir(), "hold")
		require.NoError(t, unix.Mkfifo(fifo, 0o600))
		n, sigfile := startingStubNode(t, pid1test.StartPID1, []string{envHoldBeforeMain + "=" + fifo, pid1test.ProcEnv + "=1"})
		held := make(chan *os.File, 1)
		go func() { f, _ := os.OpenFile(fifo, os.O_WRONLY, 0); held <- f }() // returns once the supervisor holds on it
		var hold *os.File
		select {
		case hold = <-held:
			require.NotNil(t, hold)
		case <-time.After(20 * time.Second):
			t.Fatal("the supervisor never reached its hold")
		}
		sent := time.Now()
		require.NoError(t, n.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, to PID 1 before its main")
		require.Never(t, n.Exited, 500*time.Millisecond, 10*time.Millisecond, "the SIGTERM before main ended PID 1")
		require.NoError(t, hold.Close()) // the supervisor goes on to Main
		// Held before Main, the SIGTERM's arrival is taken when Main takes the
		// signals over: tens of milliseconds late on a pod's start.
		n.drainedFrom(t, sent, time.Now(), sigfile)
	})
}

// A startingNode is a supervisor in front of a stub server, started by a
// test that signals it while it starts.
type startingNode struct {
	*pid1test.Process
	report string
	log    *logbuf.Buffer
}

// startingStubNode starts the supervisor, with start (nil: as a child of
// the test) and env added to its environment, in front of a stub server
// that records its signals in the file it returns.
func startingStubNode(t *testing.T, start func(testing.TB, *exec.Cmd) *pid1test.Process, env []string) (*startingNode, string) {
	t.Helper()
	dir := t.TempDir()
	n := &startingNode{report: filepath.Join(dir, "report.json"), log: &logbuf.Buffer{}}
	sigfile, api := filepath.Join(dir, "signals"), freeAddr(t)
	cmd := helperCmd(append(helperCommand("supervisor", "-listen", freeAddr(t), "-hook-listen", freeAddr(t),
		"-server-url", "http://"+api, "-grace", "10s", "-report", n.report, "--"),
		helperCommand("stubserver", "-listen", api, "-signals", sigfile)...))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = io.MultiWriter(os.Stderr, n.log)
	if start == nil {
		start = pid1test.Start
	}
	n.Process = start(t, cmd)
	return n, sigfile
}

// drainedFrom asserts that the supervisor, sent SIGTERM at sent while it
// started, drained: it exits 0 with its Report written, the drain begun by
// that SIGTERM and its budget counted from it (seen by then at the latest:
// 500 ms more are allowed), and the server got its own SIGTERM (in the
// file sigfile).
func (n *startingNode) drainedFrom(t *testing.T, sent, by time.Time, sigfile string) {
	t.Helper()
	err := n.Wait(t, 30*time.Second, "the supervisor did not exit: %s", n.log)
	require.NoError(t, err, "the supervisor's exit: %s", n.Cmd.ProcessState)
	rep := readReport(t, n.report)
	require.NotNil(t, rep.Drain, "a drain ran")
	assert.Equal(t, "SIGTERM", rep.Drain.Cause)
	assert.WithinRange(t, rep.Drain.Budget.SIGTERM, sent, by.Add(500*time.Millisecond), "the budget counts from the SIGTERM's arrival")
	assert.Contains(t, readFile(t, sigfile), "terminated", "the server got its SIGTERM")
	assert.Contains(t, n.log.String(), "SIGTERM while the supervisor starts")
}
