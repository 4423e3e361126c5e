package drain

import (
	"log/slog"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// lateTransport answers each request of rt after a delay: the API server
// of a loaded control plane.
type lateTransport struct {
	rt    http.RoundTripper
	delay time.Duration
}

func (l lateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	time.Sleep(l.delay)
	return l.rt.RoundTrip(r)
}

// When a phase's deadline moves earlier during it, the drain says why at
// Warn. It said "the budget moved SIGKILL earlier" also when only the
// node's end had moved the deadline: a kubelet grace under 2 s, read late,
// where SIGKILL stays at the kubelet's 2 s after SIGTERM and the node goes
// down before it. An operator then looked for a deletion that shortened
// the grace, and found none. It now says which moved.
//
//	0       SIGTERM (no preStop hook), grace 2 s, margin 200 ms: SIGKILL at +2 s;
//	        the read of the pod starts; the preserve phase to +1.8 s
//	300 ms  the read: no deletion, the kubelet's own grace of 1 s: the node's
//	        end at +1 s, the deadline at +800 ms; SIGKILL still at +2 s
func TestAPhaseCutByTheNodesEndDoesNotSaySIGKILLMoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		f := newFixture(t, fixtureOpts{grace: 2 * time.Second, margin: 200 * time.Millisecond, sandboxes: 1, latency: time.Second, limit: 1,
			edit: func(c *Config) {
				c.Pod, c.KubeletGrace = podOver(t, api, lateTransport{handlerTransport{api}, 300 * time.Millisecond}), time.Second
				c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			}})
		rep := f.d.Shutdown(t.Context())

		require.Equal(t, 2*time.Second, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), "SIGKILL did not move")
		assert.Equal(t, 800*time.Millisecond, rep.Phase(PhasePreserve).Deadline.Sub(rep.Budget.SIGTERM), "the phase's deadline, moved by the node's end")
		assert.NotContains(t, logs.String(), "moved SIGKILL earlier during a phase")
		assert.Contains(t, logs.String(), `msg="drain: the node's end moved the budget's deadline earlier during a phase, SIGKILL unchanged: it ends at its new deadline" phase=preserve`)
	})
}

// A deletion read during the phase that moves SIGKILL earlier still says so.
func TestAPhaseCutByAnEarlierSIGKILLSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: time.Second, sandboxes: 1, latency: 5 * time.Second, limit: 1,
			edit: func(c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			}})
		go func() {
			time.Sleep(time.Second) // the read of the pod's deletion, from its own goroutine
			f.budget.Tighten(f.budget.State().SIGTERM.Add(4 * time.Second))
		}()
		rep := f.d.Shutdown(t.Context())

		require.Equal(t, 4*time.Second, rep.Budget.Kill.Sub(rep.Budget.SIGTERM))
		assert.Contains(t, logs.String(), `msg="drain: the budget moved SIGKILL earlier during a phase: it ends at its new deadline" phase=preserve`)
	})
}
