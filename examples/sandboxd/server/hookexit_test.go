package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
)

// hookListener is the preStop hook's listener, whose Accept a test makes fail for good
// while the hook still serves.
type hookListener struct {
	net.Listener
	failed chan struct{}

	mu     sync.Mutex
	closed bool // by the hook's server: it stopped serving
}

func (l *hookListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	select {
	case <-l.failed:
		if c != nil {
			c.Close()
		}
		return nil, errors.New("accept: the pod's network is gone (injected)")
	default:
	}
	return c, err
}

func (l *hookListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return l.Listener.Close()
}

// fail makes Accept fail for good, unless the hook's server already stopped; it reports
// whether it did.
func (l *hookListener) fail() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	close(l.failed)
	l.Listener.Close() // wakes the Accept under way, which fails
	return true
}

// observed is a slog.Handler that calls on with every record it has handled: a test acts
// when the server has logged that it reached a point.
type observed struct {
	slog.Handler
	on func(slog.Record)
}

func (h observed) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	h.on(r)
	return err
}

func (h observed) WithAttrs(attrs []slog.Attr) slog.Handler {
	return observed{h.Handler.WithAttrs(attrs), h.on}
}

func (h observed) WithGroup(name string) slog.Handler {
	return observed{h.Handler.WithGroup(name), h.on}
}

// Fault: the preStop hook went on serving until Close, after the drain's termination
// message was written; when its serving failed then (its listener's Accept failing for
// good), Run's error took it and sandboxd exited 1, while the pod's last state, written
// before, said nothing of why: a clean drain, "full report: ...", and exit code 1. The
// hook is now stopped before the termination message is written, and a failure of its
// serving until then is in it: whatever exit status sandboxd has, the message says why.
func TestHookServingFailureIsInTheTerminationMessage(t *testing.T) {
	t.Run("when the termination message is written", func(t *testing.T) {
		msg, stillServing, err := hookFailsAt(t, "termination message written")
		if err != nil { // Main exits 1
			assert.Contains(t, msg, "sandboxd: serving the preStop hook stopped",
				"sandboxd exits 1 (%v), and its termination message does not say why:\n%s", err, msg)
		}
		assert.False(t, stillServing, "the hook still served when the termination message was written")
	})
	t.Run("when the drain has finished", func(t *testing.T) {
		msg, stillServing, err := hookFailsAt(t, "drain: shutdown finished")
		require.True(t, stillServing)
		require.Error(t, err, "Main exits 1")
		assert.Contains(t, err.Error(), "serving the preStop hook stopped")
		assert.Contains(t, msg, "sandboxd: serving the preStop hook stopped: accept: the pod's network is gone (injected)\n")
	})
}

// hookFailsAt runs sandboxd with a sandbox, drains it as SIGTERM does, and makes its
// preStop hook's serving fail for good when it logs the message at (unless the hook has
// stopped by then). It returns the termination message, whether the hook still served
// then, and Run's error.
func hookFailsAt(t *testing.T, at string) (msg string, stillServing bool, runErr error) {
	cfg := testConfig(t)
	cfg.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	var logs logbuf.Buffer
	var hook *hookListener
	hookStopped := make(chan struct{})
	logger := slog.New(observed{slog.NewTextHandler(&logs, nil), func(r slog.Record) {
		switch {
		case strings.HasPrefix(r.Message, "serving the preStop hook stopped"):
			close(hookStopped)
		case r.Message == at:
			if stillServing = hook.fail(); stillServing {
				<-hookStopped // its failure logged, and Serve's error returned
			}
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, cfg, logger)
	require.NoError(t, err)
	hook = &hookListener{Listener: s.hookLn, failed: make(chan struct{})}
	s.hookLn = hook
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx)
		done <- err
	}()
	createSandbox(t, "http://"+s.Addr())
	cancel() // as SIGTERM
	runErr = <-done
	data, err := os.ReadFile(cfg.TerminationLog)
	require.NoError(t, err)
	assert.Contains(t, string(data), "full report: ")
	t.Logf("Run: %v; termination message:\n%s\nlog:\n%s", runErr, data, logs.String())
	return string(data), stillServing, runErr
}
