package drain

import (
	"io"
	"log/slog"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// srv's serving, or the hook's, stops on its own once SIGTERM has begun
// the drain (its preserve phase runs): the ERROR line says the drain under
// way goes on, where it said "draining now" (and, of the hook, that the
// kubelet's preStop call fails and SIGTERM still drains) of a drain begun
// before; Run returns 1 all the same.
func TestServingThatStopsDuringTheDrainSaysTheDrainGoesOn(t *testing.T) {
	t.Setenv(EnvGrace, "30")
	t.Setenv(EnvHookListen, "127.0.0.1:0")
	t.Setenv(EnvHookSecret, "")
	t.Setenv(EnvPodName, "")
	breaks := breakableListens(t) // srv's listener's, the hook's
	for i, want := range []string{
		`level=ERROR msg="drain: serving stopped: the drain under way goes on; Run will return 1"`,
		`level=ERROR msg="drain: serving the preStop hook stopped: the drain under way goes on; Run will return 1"`,
	} {
		var logs logbuf.Buffer
		running := logbuf.NewSignal("pause: run started")
		stopped := logbuf.NewSignal("stopped: the drain")
		old := slog.Default()
		slog.SetDefault(slog.New(slog.NewTextHandler(io.MultiWriter(&logs, running, stopped), nil)))
		*breaks = nil
		node := fakesandbox.NewNode()
		node.AddN("sb", 1, 2*time.Second) // the preserve phase runs while the listener breaks
		s, err := NewServer(&http.Server{Addr: "127.0.0.1:0", ReadHeaderTimeout: time.Second}, pause.Lister(node))
		require.NoError(t, err)
		sigs, code, _ := serveLoopback(s)
		sigs <- syscall.SIGTERM
		<-running.Seen()
		close((*breaks)[i])
		select {
		case <-stopped.Seen():
		case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
			t.Errorf("no line said the serving stopped during the drain:\n%s", logs.String())
		}
		assert.Equal(t, 1, <-code)
		slog.SetDefault(old)
		assert.Contains(t, logs.String(), want)
		assert.NotContains(t, logs.String(), "draining now")
		assert.NotContains(t, logs.String(), "SIGTERM still drains")
	}
}
