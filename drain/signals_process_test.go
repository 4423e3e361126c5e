package drain

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// Fault (row 1041): HandleSignals registered SIGTERM and SIGINT only, so during its drain
// a SIGHUP (the terminal of a person who started the drain with Ctrl-C closed, a
// reloader's kill -HUP; the built-in init forwards every signal) or the SIGQUIT an
// operator sends for the goroutines of a drain that looks stuck had Go's default action:
// the process ended at once, mid-drain, with no Report, its sandboxes not yet preserved
// lost (and a device daemon's devices left live). Server.Run has handled both since row
// 7; HandleSignals, the other call that owns the process's signals, now does too while
// it runs: SIGHUP is logged and ignored, SIGQUIT logs every goroutine's stack, and the
// drain goes on.
//
//	0      SIGTERM: the drain starts (4 preserves of 500 ms, one at a time)
//	~0.1 s SIGHUP, then SIGQUIT    before: the process ends (hangup), no Report, 0 of 4 preserved
//	~2 s   the drain ends, 4 of 4 preserved, exit 0
//
// Real process: this test binary, re-executed, calls HandleSignals (handleSignalsProcess).
func TestHandleSignalsSurvivesHangupAndQuitDuringTheDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("a real process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = e2eEnv(e2eRoleEnv + "=handlesignals")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "no ready line: %s", &stderr)
	require.Equal(t, "ready", lines.Text())
	go func() {
		for lines.Scan() { // the Report's line, read before Wait closes the pipe
			fmt.Fprintln(&stderr, "stdout:", lines.Text())
		}
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// HandleSignals registers once it is called, after the ready line: SIGTERM until
	// the drain's plan is logged (the helper's own guard keeps an early one from
	// ending it; a SIGTERM again never forces).
	waitFor := func(what string, send func()) {
		t.Helper()
		for {
			if send != nil {
				send()
			}
			select {
			case <-exited:
				t.Fatalf("the process ended waiting for %q: %v\n%s", what, waitErr, &stderr)
			case <-time.After(50 * time.Millisecond):
			}
			if strings.Contains(stderr.String(), what) {
				return
			}
		}
	}
	waitFor(`msg="drain: SIGTERM: plan"`, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	waitFor(`msg="pause: run started"`, nil)
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	waitFor("SIGHUP ignored", nil)
	require.NoError(t, cmd.Process.Signal(syscall.SIGQUIT))
	waitFor("SIGQUIT: goroutine dump", nil)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the drain did not end:\n%s", &stderr)
	}
	require.NoError(t, waitErr, "the drain ended by itself, exit 0:\n%s", &stderr)
	assert.Contains(t, stderr.String(), "stdout: preserved 4 of 4")
	assert.Contains(t, stderr.String(), "goroutine", "SIGQUIT logged the goroutines")
}

// handleSignalsProcess is the process of TestHandleSignalsSurvivesHangupAndQuitDuringTheDrain:
// four sandboxes of 500 ms, preserved one at a time, drained by HandleSignals at SIGTERM.
// It prints "ready" before calling it, and the count of sandboxes preserved at the end;
// its exit status is the Report's.
func handleSignalsProcess() int {
	guard := make(chan os.Signal, 16) // a SIGTERM before HandleSignals registers is dropped, not fatal
	signal.Notify(guard, syscall.SIGTERM)
	node := fakesandbox.NewNode()
	node.AddN("sb", 4, 500*time.Millisecond)
	budget, err := deadline.New(30*time.Second, deadline.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	d, err := New(Config{Budget: budget, Sandboxes: node, Pause: pause.Config{Limit: 1},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ready")
	rep := d.HandleSignals(context.Background())
	fmt.Printf("preserved %d of %d\n", rep.Preserve.Counts["preserved"], len(rep.Preserve.Entries))
	if rep.Err() != nil {
		return 1
	}
	return 0
}

// A caller that names SIGHUP among HandleSignals' signals has chosen what it does: it
// begins the drain, as any first signal does, and is not logged as ignored.
func TestHandleSignalsLeavesAHangupItIsGivenToItsCaller(t *testing.T) {
	guard := make(chan os.Signal, 64) // keeps SIGHUP from killing the test binary before HandleSignals registers
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)
	var logs logbuf.Buffer
	f := newFixture(t, fixtureOpts{grace: 60 * time.Second, sandboxes: 1, latency: time.Millisecond,
		edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
	done := make(chan *Report, 1)
	go func() { done <- f.d.HandleSignals(context.Background(), syscall.SIGHUP) }()
	for started := false; !started; { // HandleSignals registers asynchronously: one at a time
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
		<-guard
		select {
		case <-f.d.Terminating():
			started = true
		case <-time.After(time.Second):
		}
	}
	rep := <-done
	assert.Equal(t, "SIGHUP", rep.Cause)
	assert.NotContains(t, logs.String(), "SIGHUP ignored")
}
