//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/escalate"
)

func fakeConfig(t *testing.T) config {
	dir := t.TempDir()
	return config{Socket: filepath.Join(dir, "w.sock"), StateDir: dir, Grace: 20 * time.Second,
		Concurrency: 4, Runtime: "fake", PauseLatency: time.Second}
}

// runscConfig is the configuration of a worker on real runsc in a temporary state
// directory; it skips the test when runsc is not usable here.
func runscConfig(t *testing.T) config {
	t.Helper()
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	dir := t.TempDir()
	forgetRunscState(t, dir)
	return config{Socket: filepath.Join(dir, "w.sock"), StateDir: dir, Grace: 10 * time.Second,
		Concurrency: 2, Runtime: "runsc", PauseLatency: time.Second}
}

// forgetRunscState has the test's cleanup, after every cleanup registered later (the
// worker's stop, its sandboxes' deletion, a PID 1's kill), forget the runsc state left
// in the state directory dir with runsc.Forget: what no delete removed (a sandbox
// checkpointed by the last drain, or run in another PID namespace) left its cgroups at
// the root of every hierarchy of the machine, which the temporary directory's removal
// does not take (runsc names them by the container's ID: 2 a run of this package).
func forgetRunscState(t *testing.T, dir string) {
	t.Cleanup(func() {
		roots, _ := filepath.Glob(filepath.Join(dir, "runsc", "root", "*"))
		for _, root := range roots {
			assert.NoError(t, runsc.Forget(root))
		}
	})
}

// serveWorker makes a worker with cfg and starts it serving in the test process, with a
// client of its socket. stop ends the serve as SIGTERM would and returns its Report; the
// test's cleanup calls it too, then, on runsc, deletes every sandbox the worker left.
func serveWorker(t *testing.T, cfg config) (w *Worker, c *Client, stop func() *drain.Report) {
	t.Helper()
	return serveWorkerWith(t, cfg, slog.New(slog.DiscardHandler), nil)
}

// serveWorkerWith is serveWorker with the worker logging to log, and setup, when not nil,
// called on the worker before it serves (a runsc binary of the test's, say).
func serveWorkerWith(t *testing.T, cfg config, log *slog.Logger, setup func(*Worker)) (w *Worker, c *Client, stop func() *drain.Report) {
	t.Helper()
	w, err := newWorker(cfg, log)
	require.NoError(t, err)
	if setup != nil {
		setup(w)
	}
	if rs, ok := w.rt.(*sandbox.Runsc); ok {
		t.Cleanup(func() {
			// A checkpoint the drain gave up at its hard deadline runs on (it is never
			// cut): deleted under it, its container's cgroups stayed, its save still in
			// them. Waited for a minute at most: the test has asserted what it does.
			for end := time.Now().Add(time.Minute); len(w.stops.inFlight()) > 0 && time.Now().Before(end); {
				time.Sleep(50 * time.Millisecond)
			}
			_ = rs.Runtime.DeleteAll(context.Background())
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *drain.Report, 1)
	go func() { rep, _ := w.serve(ctx); done <- rep }()
	stop = sync.OnceValue(func() *drain.Report { cancel(); return <-done })
	t.Cleanup(func() { stop() })
	return w, dial(t, cfg.Socket), stop
}

// Once the worker drains, Run and Restore answer Unavailable while Checkpoint and List
// still reach the worker; the sandboxes left running are checkpointed at SIGTERM. The
// gate closes at the preStop call, which the kubelet makes before SIGTERM: the worker
// then serves on until SIGTERM, so the calls below are checked while it surely still
// listens (after SIGTERM alone they raced the shutdown, which closes the socket once
// the 1 s pauses end: under load the four calls took longer).
func TestShutdownGatesRunAndRestoreButNotCheckpoint(t *testing.T) {
	t.Parallel()
	w, c, stop := serveWorker(t, fakeConfig(t))
	var ids []string
	for range 3 {
		r, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err)
		assert.Equal(t, sandbox.Running, r.State)
		ids = append(ids, r.ID)
	}
	cp, err := c.Checkpoint(context.Background(), ids[0])
	require.NoError(t, err)
	assert.Equal(t, sandbox.Paused, cp.State)

	// The preStop call, answered at once (?wait=0s) as a polling hook's is: the kubelet
	// has its answer before SIGTERM, so the budget keeps the grace (a call still open at
	// SIGTERM means the kubelet gave up on the hook: SIGKILL in 2 s).
	rec := httptest.NewRecorder()
	w.drainer.PreStop().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/drain?wait=0s", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	<-w.drainer.Gate().Draining()
	_, err = c.Run(context.Background(), &RunRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err), "Run while draining: %v", err)
	_, err = c.Restore(context.Background(), ids[0])
	assert.Equal(t, codes.Unavailable, status.Code(err), "Restore while draining: %v", err)
	cp, err = c.Checkpoint(context.Background(), ids[1])
	require.NoError(t, err, "Checkpoint stays allowed")
	assert.Equal(t, sandbox.Paused, cp.State)
	list, err := c.List(context.Background())
	require.NoError(t, err)
	assert.Len(t, list.Sandboxes, 3)

	rep := stop() // as SIGTERM would
	require.NoError(t, rep.Err())
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Preserved], "the one left running")
	assert.Equal(t, 3, w.node.Count(sandbox.Paused))
	assert.Equal(t, drain.OK, rep.Phase("grpc").Result)
}

func TestBadFlagsNameTheFlag(t *testing.T) {
	for name, args := range map[string][]string{
		"-state-dir":     {},
		"-grace":         {"-state-dir", "d", "-grace", "1s"},
		"-concurrency":   {"-state-dir", "d", "-concurrency", "-1"},
		"-kubelet-grace": {"-state-dir", "d", "-kubelet-grace", "-1s"},
		"-runtime":       {"-state-dir", "d", "-runtime", "kvm"},
		"-pause-latency": {"-state-dir", "d", "-pause-latency", "0s"},
	} {
		_, err := parseFlags(args, io.Discard)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}
	cfg, err := parseFlags([]string{"-state-dir", "/w"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/w/worker.sock", cfg.Socket)
	// The manifest's terminationGracePeriodSeconds as it is (row 376).
	cfg, err = parseFlags([]string{"-state-dir", "/w", "-grace", "3600"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, cfg.Grace)
}

// Fault (row 1074, row 1017's in the worker): a worker whose flags it refused (a -grace
// below the kubelet's 2 s, a mistyped flag) exited 2 and wrote no termination message,
// where a newWorker that fails writes one: a crash loop whose pods' last state said exit
// code 2 and nothing else. It now says that no drain ran and why, at the
// -termination-log given before the bad flag, else DRAINKIT_TERMINATION_LOG's.
func TestRefusedFlagsSayWhyInTheTerminationMessage(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		env  bool // the path from DRAINKIT_TERMINATION_LOG: an unknown flag ends the parse before -termination-log
		why  string
	}{
		"a grace below 2 s": {args: []string{"-grace", "1s"}, why: "-grace 1s is below the kubelet's 2 s minimum"},
		"an unknown flag":   {args: []string{"-grace-period", "30"}, env: true, why: "flag provided but not defined: -grace-period"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			termLog := filepath.Join(dir, "termination-log")
			args := []string{"-state-dir", dir, "-runtime", "fake"}
			if c.env {
				t.Setenv(termmsg.EnvPath, termLog)
			} else {
				args = append(args, "-termination-log", termLog)
			}
			var stderr logbuf.Buffer
			require.Equal(t, 2, Main(t.Context(), append(args, c.args...), &stderr), "%s", &stderr)
			msg, err := os.ReadFile(termLog)
			require.NoError(t, err, "the termination message is written: %s", &stderr)
			assert.Equal(t, "drainkit: no drain ran\ngvisor-worker: could not start: "+c.why+"\n", string(msg))
		})
	}
}

// The ateom bug: a `runsc wait` that failed looked like a clean exit, so SIGKILL was never
// sent. The worker's target (runsc.Runtime.Target) treats a failed wait as an exit only
// when runsc state agrees.
func TestRunscTargetTellsFailedWaitFromExit(t *testing.T) {
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	dir := t.TempDir()
	rt := &runsc.Runtime{Root: filepath.Join(dir, "root")}
	t.Cleanup(func() { _ = rt.DeleteAll(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := runsc.WriteBundle(filepath.Join(dir, "b"), runsc.CounterArgs())
	require.NoError(t, err)
	// runsc names a sandbox's control socket and its cgroup by its container ID alone,
	// whatever the --root: another test process's "t1" would share them.
	id := "t1-" + rand.Text()[:8]
	require.NoError(t, rt.Run(ctx, id, b, filepath.Join(dir, "t1.log")))
	target := rt.Target(id)

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	require.ErrorIs(t, target.Wait(short), context.DeadlineExceeded, "a running sandbox has not exited")

	exit, err := escalate.Policy{TermWait: 5 * time.Second, KillWait: 5 * time.Second}.Stop(ctx, target)
	require.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit, "the counter's shell exits on SIGTERM")
	// Waiting again on the stopped container fails in runsc ("exit status unavailable"):
	// that is an exit, because runsc state says stopped.
	require.ErrorIs(t, target.Wait(ctx), os.ErrProcessDone)
	require.ErrorIs(t, target.Signal(ctx, syscall.SIGKILL), os.ErrProcessDone)
}

// -listen serves the same service on TCP (a worker under gVisor, whose Unix socket on a
// hostPath the host cannot reach), and Main writes the drain's summary to
// -termination-log beside last-shutdown.json.
func TestListenOnTCPAndTerminationLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	termLog := filepath.Join(dir, "termination-log")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr logbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"-state-dir", dir, "-listen", addr, "-runtime", "fake", "-pause-latency", "10ms",
			"-termination-log", termLog}, &stderr)
	}()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	c := NewClient(cc)
	var r *SandboxReply
	require.Eventually(t, func() bool { r, err = c.Run(ctx, &RunRequest{}); return err == nil }, 30*time.Second, 20*time.Millisecond)
	assert.Equal(t, sandbox.Running, r.State)
	_, err = os.Stat(filepath.Join(dir, "worker.sock"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no Unix socket with -listen")

	cancel() // as SIGTERM would
	require.Equal(t, 0, <-done, "%s", &stderr)
	msg, err := os.ReadFile(termLog)
	require.NoError(t, err)
	assert.Regexp(t, `^drainkit: all 1 sandboxes preserved; `, string(msg))
	assert.Contains(t, string(msg), "full report: "+filepath.Join(dir, "last-shutdown.json"))
}

// A Run whose timeout_s is out of range is refused as InvalidArgument naming timeout_s, and
// starts nothing: a negative one ran the sandbox for a day, one past ten years answered
// FailedPrecondition "sandbox is in the wrong state".
func TestRunWithATimeoutOutOfRangeIsInvalidArgument(t *testing.T) {
	t.Parallel()
	_, c, _ := serveWorker(t, fakeConfig(t))
	for _, timeout := range []int{-1, sandbox.MaxTimeoutS + 1} {
		_, err := c.Run(context.Background(), &RunRequest{TimeoutS: timeout})
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "timeout_s %d: %v", timeout, err)
		assert.Contains(t, status.Convert(err).Message(), "timeout_s", "timeout_s %d", timeout)
	}
	list, err := c.List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, list.Sandboxes, "nothing started")
	r, err := c.Run(context.Background(), &RunRequest{TimeoutS: sandbox.MaxTimeoutS})
	require.NoError(t, err, "the largest timeout is taken")
	assert.Equal(t, sandbox.Running, r.State)
}

// A second worker given the socket of one that is serving refuses to start, naming
// -socket, instead of unlinking it and listening in its place (clients then reached a
// worker that knew none of the first one's sandboxes); and a -socket that names
// something other than a socket is refused and left alone, not deleted.
func TestSocketInUseOrNotASocketIsRefusedNotRemoved(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t)
	_, c, _ := serveWorker(t, cfg)
	r, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)

	second := cfg
	second.StateDir = t.TempDir()
	_, err = newWorker(second, slog.New(slog.DiscardHandler))
	require.Error(t, err, "a second worker on a socket in use")
	assert.Contains(t, err.Error(), "-socket")
	list, err := dial(t, cfg.Socket).List(context.Background())
	require.NoError(t, err, "the first worker still serves on its socket")
	require.Len(t, list.Sandboxes, 1)
	assert.Equal(t, r.ID, list.Sandboxes[0].ID)

	file := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(file, []byte("keep"), 0o600))
	third := fakeConfig(t)
	third.Socket = file
	_, err = newWorker(third, slog.New(slog.DiscardHandler))
	require.Error(t, err, "a -socket that is a regular file")
	assert.Contains(t, err.Error(), "-socket")
	data, err := os.ReadFile(file)
	require.NoError(t, err, "the file is not removed")
	assert.Equal(t, "keep", string(data))
}

// A socket left by a worker that was killed (nobody listens on it) is replaced.
func TestStaleSocketOfAKilledWorkerIsReplaced(t *testing.T) {
	cfg := fakeConfig(t)
	ln, err := net.Listen("unix", cfg.Socket)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close()) // the socket file stays, as a SIGKILL leaves it
	w, err := newWorker(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	w.close(nil)
}

// A -grace too short for one checkpoint and the steps' reserves (the kubelet takes any
// grace from 2 s) is bad usage naming -grace and -pause-latency, the flags that set the
// plan: the worker exited 1 blaming drain's Config.Steps, a field no flag sets.
func TestGraceTooShortForThePlanNamesTheFlags(t *testing.T) {
	var stderr logbuf.Buffer
	code := Main(context.Background(), []string{"-state-dir", t.TempDir(), "-runtime", "fake", "-grace", "4s"}, &stderr)
	assert.Equal(t, 2, code, "bad usage: %s", &stderr)
	assert.Contains(t, stderr.String(), "-grace 4s")
	assert.Contains(t, stderr.String(), "-pause-latency 2s")
	code = Main(context.Background(), []string{"-state-dir", t.TempDir(), "-runtime", "fake", "-grace", "4s",
		"-pause-latency", "10ms", "-socket", filepath.Join(t.TempDir(), "missing", "w.sock")}, io.Discard)
	assert.Equal(t, 1, code, "with a short checkpoint the plan fits; the missing socket dir is not bad usage")
}

// Like sandboxd and the supervisor, the worker adapts its concurrency by default and keeps
// what a shutdown learned in its state directory (learned-rates.json, a hostPath in a
// pod): the next worker's Estimator starts from the checkpoint time measured, not from
// -pause-latency, and drainkit plan reads the file. It kept a fixed 4 and nothing.
func TestWorkerAdaptsAndStartsFromWhatItLearned(t *testing.T) {
	cfg, err := parseFlags([]string{"-state-dir", t.TempDir(), "-runtime", "fake", "-pause-latency", "50ms"}, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, cfg.Concurrency, "adaptive by default")
	_, c, stop := serveWorker(t, cfg)
	for range 6 {
		_, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err)
	}
	rep := stop()
	require.NoError(t, rep.Err())
	assert.Equal(t, 6, rep.Preserve.Counts[pause.Preserved])
	r, err := learned.Read(filepath.Join(cfg.StateDir, learned.File))
	require.NoError(t, err, "the shutdown saved what it learned")
	assert.Equal(t, 6, r.Observations)
	assert.Equal(t, maxConcurrency, r.MaxLimit, "adaptive: the ceiling, for drainkit plan")
	assert.GreaterOrEqual(t, r.Estimate, 50*time.Millisecond, "a checkpoint takes at least the fake latency")
	assert.Less(t, r.Estimate, time.Second)
	assert.Equal(t, cfg.Grace, r.Grace)
	require.Len(t, r.Steps, 2)
	assert.Equal(t, []string{"escalate", "grpc"}, []string{r.Steps[0].Name, r.Steps[1].Name})

	cfg.PauseLatency = time.Second // what the next start is configured with
	w, _, stop := serveWorker(t, cfg)
	assert.Equal(t, r.Estimate, w.est.Estimate(), "the next worker starts from what was learned")
	stop()
}

// A client connection with no RPC that never answers the GOAWAY's ping
// (its node gone without closing it, its process frozen) holds grpc's
// GracefulStop for 5 s; draingrpc's Stop tells that closing it at the
// step's deadline cut no RPC only when its interceptors see every RPC,
// streams included (docs/faults.md row 213). The worker installed only the
// unary one: at a short grace its grpc step failed, "RPCs still running
// at the deadline; stopped them", with none running, and the worker
// exited 1.
func TestAQuietConnectionAtShutdownIsNoFault(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t)
	cfg.Grace, cfg.PauseLatency = 5*time.Second, 500*time.Millisecond // the grpc step ends by 3.5 s: below grpc's 5 s wait for the ping
	_, _, stop := serveWorker(t, cfg)
	c, err := net.Dial("unix", cfg.Socket)
	require.NoError(t, err)
	defer c.Close()
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	_, err = c.Write(append(preface, 0, 0, 0, 4, 0, 0, 0, 0, 0)) // and an empty SETTINGS frame; then quiet
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	for { // until the server's SETTINGS ACK: the connection is up
		var h [9]byte
		_, err := io.ReadFull(c, h[:])
		require.NoError(t, err)
		_, err = io.CopyN(io.Discard, c, int64(h[0])<<16|int64(h[1])<<8|int64(h[2]))
		require.NoError(t, err)
		if h[3] == 4 && h[4]&1 != 0 {
			break
		}
	}

	rep := stop()
	require.NotNil(t, rep)
	step := rep.Phase("grpc")
	require.NotNil(t, step)
	assert.NoError(t, rep.Err(), "%+v", *step)
}

// Fault (row 1322, as row 1241 for sandboxd, the supervisor and drainhook): a -listen
// whose port no listener can have (a typo's extra digit) passed the flags and failed at
// net.Listen, after the worker had locked its state directory and started its runtime:
// exit 1, the status of what the machine refused, with "address 99999: invalid port".
// It is now refused with the flags, naming the flag and the value: bad usage, 2.
func TestListenPortOutOfRangeIsRefusedWithTheFlags(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:99999", ":-1"} {
		t.Run(addr, func(t *testing.T) {
			var stderr logbuf.Buffer
			code := Main(t.Context(), []string{"-state-dir", t.TempDir(), "-runtime", "fake", "-listen", addr}, &stderr)
			assert.Equal(t, 2, code, "%s", &stderr)
			assert.Contains(t, stderr.String(), "-listen "+addr+" ")
		})
	}
}
