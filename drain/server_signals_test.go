package drain

import (
	"context"
	"net/http"
	"os"
	"os/exec"
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
	if testing.Short() {
		t.Skip("a real process")
	}
	addr, err := freeport.Addr()
	require.NoError(t, err)
	hook, err := freeport.Addr()
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = e2eEnv(e2eRoleEnv+"=onecall", "E2E_ADDR="+addr, EnvGrace+"=10", EnvHookListen+"="+hook, EnvHookSecret+"=")
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
	ready := func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	require.Eventually(t, ready, 20*time.Second, 10*time.Millisecond, "the server did not start: %s", &stderr)

	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		require.NoError(t, cmd.Process.Signal(sig))
		name := map[syscall.Signal]string{syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT"}[sig]
		for logged := false; !logged; {
			select {
			case <-exited:
				t.Fatalf("%s ended the server: %v\n%s", name, waitErr, &stderr)
			case <-time.After(10 * time.Millisecond):
				logged = strings.Contains(stderr.String(), name)
			}
		}
		assert.True(t, ready(), "still serving after %s", name)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		require.NoError(t, waitErr, "SIGTERM drained: exit 0\n%s", &stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("SIGTERM did not end the server:\n%s", &stderr)
	}
	assert.Contains(t, stderr.String(), "drain: shutdown finished")
	assert.Contains(t, stderr.String(), "goroutine", "SIGQUIT logged the goroutines")
}

// oneCallServer is the one-call path over two fake sandboxes, for
// TestServerRunSurvivesHangupAndQuit.
func oneCallServer() int {
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, 10*time.Millisecond)
	srv := &http.Server{Addr: os.Getenv("E2E_ADDR"), Handler: http.NewServeMux(), ReadHeaderTimeout: time.Second}
	s, err := NewServer(srv, pause.Lister(node))
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 2
	}
	return s.Run(context.Background())
}
