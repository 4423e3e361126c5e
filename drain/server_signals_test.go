package drain

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// The one-call path keeps the signal policy of a node server (docs/faults.md):
// SIGHUP is logged and ignored, SIGQUIT logs a goroutine dump and the server
// goes on, SIGTERM drains. Before, Server.Run caught only SIGTERM and
// SIGINT: a SIGHUP (a closed terminal, a reloader's kill -HUP) or the
// SIGQUIT an operator sends for a stack dump of a stuck drain ended the
// process at once, with no drain and no Report, every sandbox lost.
// Real process: this test binary, re-executed, runs NewServer and Run.
func TestServerRunSurvivesHangupAndQuit(t *testing.T) {
	cmd, addr, stderr := oneCallProcess(t)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	ready := func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	require.Eventually(t, ready, 20*time.Second, 10*time.Millisecond, "the server did not start: %s", stderr)

	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		require.NoError(t, cmd.Process.Signal(sig))
		name := map[syscall.Signal]string{syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT"}[sig]
		for logged := false; !logged; {
			select {
			case <-exited:
				t.Fatalf("%s ended the server: %v\n%s", name, waitErr, stderr)
			case <-time.After(10 * time.Millisecond):
				logged = strings.Contains(stderr.String(), name)
			}
		}
		assert.True(t, ready(), "still serving after %s", name)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		require.NoError(t, waitErr, "SIGTERM drained: exit 0\n%s", stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("SIGTERM did not end the server:\n%s", stderr)
	}
	assert.Contains(t, stderr.String(), "drain: shutdown finished")
	assert.Contains(t, stderr.String(), "goroutine", "SIGQUIT logged the goroutines")
}

// oneCallProcess is this test binary as a process of the one-call
// path's (oneCallServer) with env more, not yet started, the address it
// serves on and its stderr; it skips a short test.
func oneCallProcess(t *testing.T, env ...string) (cmd *exec.Cmd, addr string, stderr *logbuf.Buffer) {
	t.Helper()
	if testing.Short() {
		t.Skip("a real process")
	}
	addr, err := freeport.Addr()
	require.NoError(t, err)
	hook, err := freeport.Addr()
	require.NoError(t, err)
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = e2eEnv(append([]string{e2eRoleEnv + "=onecall", "E2E_ADDR=" + addr, EnvGrace + "=10", EnvHookListen + "=" + hook, EnvHookSecret + "="}, env...)...)
	stderr = new(logbuf.Buffer)
	cmd.Stderr = stderr
	return cmd, addr, stderr
}

// oneCallServer is the one-call path over two fake sandboxes, for
// TestServerRunSurvivesHangupAndQuit.
func oneCallServer() int {
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, 10*time.Millisecond)
	before := os.Getenv("E2E_BEFORE_RUN") != ""
	if before { // the Report's t0, to the millisecond and beyond
		slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	}
	srv := &http.Server{Addr: os.Getenv("E2E_ADDR"), Handler: http.NewServeMux(), ReadHeaderTimeout: time.Second}
	s, err := NewServer(srv, pause.Lister(node))
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 2
	}
	if before { // the rest of the start: it ends with the parent's SIGWINCH
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		os.Stdout.WriteString("made\n")
		<-winch
		signal.Stop(winch)
		// The parent sent SIGTERM before SIGWINCH, but os/signal relays
		// them in that order only when both are pending at once: under
		// load the thread that took SIGTERM from the kernel can be
		// descheduled before its handler records it, while another takes
		// SIGWINCH, and Run began before preRun had the SIGTERM (a run of
		// the drain tests at load 8: T0 1 ms after the send, no "came
		// before Run"). The start ends once preRun has it, as a SIGTERM
		// that came during a start of seconds would be.
		if !termCaughtWithin(10 * time.Second) {
			os.Stderr.WriteString("the SIGTERM sent before the SIGWINCH never reached preRun\n")
			return 3
		}
	}
	return s.Run(context.Background())
}

// termCaughtWithin reports whether preRun catches a SIGTERM within d.
func termCaughtWithin(d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		preRun.Lock()
		lookLocked()
		caught := preRun.term > 0
		preRun.Unlock()
		if caught {
			return true
		}
	}
	return false
}

// Fault (row 1230): a SIGTERM between NewServer's call and Run's (the pod
// deleted while the server starts: NewServer reads the pod's spec, a
// static pod's for up to 5 s, and the server sets up its routes) had Go's
// default action: the process ended at once with status 143, no drain, no
// Report, no line in its log. NewServer now catches SIGTERM; Run drains
// at once, the grace counted from NewServer's call, before the SIGTERM
// (the kubelet's SIGKILL planned early, never late). A real process,
// README's wiring:
//
//	child: NewServer, "made", its start goes on until a SIGWINCH
//	parent: SIGTERM, then SIGWINCH
//	child: Run: drains (2 sandboxes preserved), exits 0
func TestSIGTERMBeforeRunIsDrainedWhenRunStarts(t *testing.T) {
	cmd, _, stderr := oneCallProcess(t, "E2E_BEFORE_RUN=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	made, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "%s", stderr)
	require.Equal(t, "made\n", made)

	sent := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	_ = cmd.Process.Signal(syscall.SIGWINCH) // the start ends; fails once the process is gone
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the server did not end:\n%s", stderr)
	}
	require.NoError(t, err, "the SIGTERM before Run drained: exit 0\n%s", stderr)

	var line struct {
		Report struct {
			Cause     string    `json:"cause"`
			T0        time.Time `json:"t0"`
			Preserved int       `json:"preserved"`
			Lost      int       `json:"lost"`
		} `json:"report"`
	}
	for l := range strings.Lines(stderr.String()) {
		if strings.Contains(l, `"drain: shutdown finished"`) {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	assert.Equal(t, "SIGTERM", line.Report.Cause, "%s", stderr)
	assert.Equal(t, 2, line.Report.Preserved)
	assert.Zero(t, line.Report.Lost)
	t.Logf("T0 %v before the SIGTERM was sent", sent.Sub(line.Report.T0))
	assert.False(t, line.Report.T0.After(sent), "the grace counted from %v, after the SIGTERM sent at %v: SIGKILL planned late", line.Report.T0, sent)
	assert.Contains(t, stderr.String(), "SIGTERM came before Run")
	// Fault: the line said "draining once it serves", written once Run served.
	serving, came := strings.Index(stderr.String(), `"drain: serving"`), strings.Index(stderr.String(), "SIGTERM came before Run")
	assert.Less(t, serving, came, "Run serves, then takes the SIGTERM")
	assert.Contains(t, stderr.String(), "SIGTERM came before Run: draining now, as the server serves;")
}
