package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// Fault: with -runtime runsc, a sandbox whose gVisor sandbox process died before the
// drain (SIGKILLed, as the kernel's OOM killer does) stayed "running" in the node after
// the checkpoint that found it dead, so the Preserver listed it again in every pass, with
// growing waits, until the preserve phase's deadline, and nothing above DEBUG said a
// sandbox had died. The node now forgets it, saying so at WARN: the drain ends once the
// live one is checkpointed, the dead one vanished.
func TestRunscSandboxKilledBeforeTheDrainIsDeadNotLost(t *testing.T) {
	cfg := runscConfig(t)
	var logs logbuf.Buffer
	st := startLogged(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	rs := st.s.rt.(*sandbox.Runsc)
	t.Cleanup(func() { _ = rs.Runtime.DeleteAll(context.Background()) })
	dead, alive := createSandbox(t, st.base), createSandbox(t, st.base)
	for _, id := range []string{dead, alive} {
		require.Eventually(t, func() bool { n, err := rs.Bundle(id).Counter(); return err == nil && n > 1 },
			time.Minute, 20*time.Millisecond)
	}
	killed := false
	for _, pid := range runsc.SandboxProcesses(rs.Bundle(dead).Dir) {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.HasPrefix(cmd, []byte("runsc-sandbox\x00")) {
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL)) // as the OOM killer does
			killed = true
		}
	}
	require.True(t, killed, "no runsc-sandbox process of %s", dead)
	require.Eventually(t, func() bool {
		s, err := rs.Runtime.State(context.Background(), dead)
		return err == nil && s.Status == "stopped"
	}, 30*time.Second, 20*time.Millisecond)

	rep := st.shutdown(t)
	require.NotNil(t, rep.Preserve)
	assert.NoError(t, rep.Err(), "nothing the drain could save was lost: %s", &logs)
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Preserved], "the live one checkpointed")
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Vanished], "the dead one: %+v", rep.Preserve.Entries)
	for _, e := range rep.Preserve.Entries {
		if e.ID == dead {
			assert.Equal(t, pause.Vanished, e.Outcome)
			assert.Equal(t, 1, e.Attempts, "found dead once")
			assert.Zero(t, e.Relisted, "and listed no more")
			assert.Contains(t, e.Error, "died before its checkpoint")
		}
	}
	ph := rep.Phase(drain.PhasePreserve)
	require.NotNil(t, ph)
	assert.Equal(t, drain.OK, ph.Result)
	assert.True(t, ph.End.Before(ph.Deadline), "the phase ended when the live sandbox was checkpointed, not at its deadline: %+v", ph)
	assert.Contains(t, logs.String(), "level=WARN msg=\"sandbox died before its checkpoint")
	assert.Contains(t, logs.String(), dead)
}

// A pause that finds its sandbox dead answers 409, as for any sandbox not running: it
// answered 500, a server error that clients retry, and no retry can pause a dead sandbox.
func TestPauseOfADeadSandboxIsAConflictNotAServerError(t *testing.T) {
	err := fmt.Errorf("pause sb-1: %w", sandbox.ErrDied)
	assert.Equal(t, http.StatusConflict, status(err))
	assert.Equal(t, http.StatusInternalServerError, status(errors.New("runsc checkpoint: exit status 1")), "a failure that may pass")
}

// Fault (a review of row 380): a pause whose checkpoint failed and stopped the sandbox
// (sandbox.ErrLost: its state gone, listed lost) answered 500, the server error that
// clients retry, as ErrDied did before; the retry only finds it lost (409). The gVisor
// worker answers it DataLoss since row 380, "no retry brings it back"; sandboxd, on the
// same Node with -runtime runsc, did not follow.
func TestPauseThatLostItsSandboxIsNotAServerErrorToRetry(t *testing.T) {
	err := fmt.Errorf("pause sb-1: %w", sandbox.ErrLost)
	assert.NotEqual(t, http.StatusInternalServerError, status(err), "no retry can pause a lost sandbox")
}

// Fault: sandboxd's device daemon that died while the server ran, before any teardown
// asked it to stop (a crash, the OOM killer's SIGKILL), went unnoticed until the drain:
// no line in the log, /readyz 200, creates admitted onto a node whose devices no daemon
// served, and only the drain's ublk step, minutes or hours later, said "orphaned". The
// supervisor watches its daemon for this (row 964); sandboxd, the reference server, did
// not. It now says so at ERROR the moment the daemon is reaped, /readyz answers 503
// naming it, and Run's error and the termination message say it; the sandboxes run on
// until the drain preserves them.
// Before: /readyz 200 ("ok") after the daemon's death, no ERROR line before the drain;
// after: 503 naming the daemon, the line, and exit status 1 with the reason.
func TestADeviceDaemonThatDiesBeforeTheDrainIsNotReadyAndSaid(t *testing.T) {
	cfg := testConfig(t)
	cfg.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	var logs logbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	type ran struct {
		rep *drain.Report
		err error
	}
	done := make(chan ran, 1)
	go func() {
		rep, err := s.Run(ctx)
		done <- ran{rep, err}
	}()
	base := "http://" + s.Addr()
	id := createSandbox(t, base)
	require.NoError(t, syscall.Kill(s.daemon.Pid(), syscall.SIGKILL)) // as the OOM killer does
	<-s.daemon.Done()
	var code int
	var body string
	assert.Eventually(t, func() bool { // a bound on the failure: the watcher's goroutine, not a timing assertion
		code, _, body = call(t, "GET", base+"/readyz", "")
		return code == http.StatusServiceUnavailable
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusServiceUnavailable, code, "/readyz after the device daemon died: %s", body)
	assert.Contains(t, body, "the device daemon ended (signal: killed) on its own, before any teardown")
	assert.Contains(t, logs.String(), `level=ERROR msg="sandboxd: the device daemon ended (signal: killed)`)
	assert.Contains(t, logs.String(), "sandboxd serving", "the server runs on")

	cancel() // the drain
	r := <-done
	require.Error(t, r.err)
	assert.Contains(t, r.err.Error(), "the device daemon ended (signal: killed)")
	assert.Equal(t, pause.Preserved, r.rep.Preserve.Entries[0].Outcome, "%s preserved all the same", id)
	msg, err := os.ReadFile(cfg.TerminationLog)
	require.NoError(t, err)
	assert.Contains(t, string(msg), "sandboxd: the device daemon ended (signal: killed)")
}

// readyzAtError is a slog.Handler that, as the ERROR record of the daemon's death reaches
// it and before it writes the record, asks /readyz what it answers: what a probe or an
// operator sees at that moment.
type readyzAtError struct {
	slog.Handler
	t    *testing.T
	base func() string
	code chan int
}

func (h *readyzAtError) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelError && strings.Contains(r.Message, "the device daemon ended") {
		code, _, _ := call(h.t, "GET", h.base()+"/readyz", "")
		select {
		case h.code <- code:
		default: // the first such line is the one the test reads
		}
	}
	return h.Handler.Handle(ctx, r)
}

// Fault: the daemon's watcher made /readyz answer 503 before it wrote the ERROR line that
// says why, so a probe (or TestADeviceDaemonThatDiesBeforeTheDrainIsNotReadyAndSaid, 1 run
// of 1 at load 14) could see the 503 with no reason in the log yet. The line is now
// written first. Before: /readyz 503 while the line was being written; after: 200.
func TestADeviceDaemonsDeathIsLoggedBeforeReadinessSaysIt(t *testing.T) {
	cfg := testConfig(t)
	var addr string
	h := &readyzAtError{Handler: slog.NewTextHandler(&logbuf.Buffer{}, nil), t: t,
		base: func() string { return "http://" + addr }, code: make(chan int, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, cfg, slog.New(h))
	require.NoError(t, err)
	addr = s.Addr()
	done := make(chan error, 1)
	go func() { _, err := s.Run(ctx); done <- err }()
	createSandbox(t, "http://"+addr)
	require.NoError(t, syscall.Kill(s.daemon.Pid(), syscall.SIGKILL))
	assert.Equal(t, http.StatusOK, <-h.code, "/readyz while the ERROR line saying why was not yet written")
	cancel()
	<-done
}
