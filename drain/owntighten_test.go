package drain

import (
	"log/slog"
	"regexp"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// A read that finds no deletion logs the kubelet's own termination with
// whether it tightened the budget. It said tightened=true also when only
// the node's end had moved the deadline and SIGKILL stayed where it was
// (a kubelet grace under 2 s, read at SIGTERM: SIGKILL keeps the
// kubelet's 2 s after it), the word every other read uses for a SIGKILL
// moved earlier. It now says SIGKILL did not move, and where the node's
// end put the deadline.
//
//	0       SIGTERM (no preStop hook), grace 2 s, margin 200 ms: SIGKILL at +2 s;
//	        the read: no deletion, the kubelet's own grace of 1 s
//	        → the node's end at +1 s, the deadline at +800 ms; SIGKILL still at +2 s
func TestAReadOfTheKubeletsOwnTerminationSaysSIGKILLDidNotMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		f := newFixture(t, fixtureOpts{grace: 2 * time.Second, margin: 200 * time.Millisecond, sandboxes: 1, latency: 100 * time.Millisecond, limit: 1,
			edit: func(c *Config) {
				c.Pod, c.KubeletGrace = podOver(t, api, handlerTransport{api}), time.Second
				c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			}})
		rep := f.d.Shutdown(t.Context())

		require.Equal(t, 2*time.Second, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), "SIGKILL did not move")
		line := regexp.MustCompile(`msg="drain: the pod has no deletionTimestamp: the kubelet is terminating it on its own[^\n]*`).FindString(logs.String())
		require.NotEmpty(t, line, logs.String())
		assert.Contains(t, line, "tightened=false", "SIGKILL stayed at +2 s")
		assert.Contains(t, line, "node_end=", "the node's end moved the deadline")
		at := func(d time.Duration) string { return rep.Budget.SIGTERM.Add(d).Format("2006-01-02T15:04:05.000Z07:00") }
		assert.Contains(t, line, "node_end="+at(time.Second)+" deadline="+at(800*time.Millisecond)+" kill="+at(2*time.Second))
	})
}
