package drain

import (
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// New accepted work that the kubelet's own grace (Config.KubeletGrace:
// graceful node shutdown's slice, a soft eviction's) does not hold without
// a word, where drainkit plan says DOES NOT FIT for the node's shutdown:
// an operator learned it when a node shutdown lost sandboxes. The pod's
// own grace holds the work, so New still starts (the node's setting is not
// the pod's to change, and every deletion through the API server fits),
// but says at Warn what a node shutdown would lack and the smallest
// kubelet grace that holds the work, by drainkit plan's rule
// (internal/gracefit); at that grace it says nothing, a second less it
// says it again.
//
//	grace 30 s, margin 1 s, one round of 8 s of preserves:
//	kubelet 6 s: T0 ─ deadline +5 s ─ node's end +6 s: 3 s short → "needs 9s"
//	kubelet 9 s: T0 ─ deadline +8 s: the round fits
func TestNewWarnsWhenTheWorkDoesNotFitTheKubeletsOwnGrace(t *testing.T) {
	needs := regexp.MustCompile(`level=WARN msg="drain: the work does not fit the kubelet's own grace.*" kubelet_grace=(\S+) short=(\S+) needs=(\d+)s`)
	newWith := func(kubelet time.Duration) string {
		t.Helper()
		var logs logbuf.Buffer
		b, err := deadline.New(30*time.Second, deadline.Config{Margin: time.Second})
		require.NoError(t, err)
		node := fakesandbox.NewNode()
		node.AddN("vm", 4, time.Second)
		_, err = New(Config{Budget: b, Sandboxes: node, Pod: podWithoutDeletion(t, 0), KubeletGrace: kubelet,
			Pause:  pause.Config{Limit: 4, Estimator: deadline.NewEstimator(8 * time.Second)},
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		require.NoError(t, err, "the pod's own grace holds the work: New starts")
		return logs.String()
	}
	said := newWith(6 * time.Second)
	m := needs.FindStringSubmatch(said)
	require.NotNil(t, m, "no word of the node's shutdown:\n%s", said)
	assert.Equal(t, "6s", m[1])
	assert.Equal(t, "3s", m[2], "8 s of work, 5 s before the deadline")
	assert.Contains(t, said, "Config.KubeletGrace")
	assert.Contains(t, said, "shutdownGracePeriod")
	named, err := strconv.Atoi(m[3])
	require.NoError(t, err)
	assert.Equal(t, 9, named)
	assert.NotContains(t, newWith(time.Duration(named)*time.Second), "does not fit the kubelet's own grace", "the grace it named")
	assert.Contains(t, newWith(time.Duration(named-1)*time.Second), "does not fit the kubelet's own grace", "a second less")
	assert.NotContains(t, newWith(0), "does not fit the kubelet's own grace", "no kubelet grace declared: nothing to say")
}

// NewServer's http step reserves a fortieth of the grace in use (at most
// 5 s), which under the kubelet's own termination is the kubelet's grace:
// the warning counts it so, not at the pod's grace. Counted at the pod's
// hour, 5 s, it warned of a work that fits: a pod of an hour, a kubelet
// grace of 20 s (a 2 s margin), one round of 14 s and the http step's
// 500 ms fit in 18 s; one round of 18 s does not, and the grace it names
// is one the server then starts with in silence.
func TestNewServerWarnsOfTheKubeletsOwnGraceWithItsHTTPReserveThere(t *testing.T) {
	api := newPodAPI(t)
	api.SetGrace(3600)
	inClusterOf(t, api)
	t.Setenv(EnvGrace, "3600")
	t.Setenv(EnvKubeletConfig, "")
	start := func(kubelet, estimate string) string {
		t.Helper()
		logs := logToDefault(t)
		t.Setenv(EnvKubeletGrace, kubelet)
		t.Setenv(EnvPreserveEstimate, estimate)
		s, err := NewServer(&http.Server{Addr: "127.0.0.1:0"}, fakesandbox.NewNode())
		require.NoError(t, err)
		s.releaseTerm() // never Run: SIGTERM's default action again
		return logs.String()
	}
	assert.NotContains(t, start("20s", "14s"), "does not fit the kubelet's own grace", "14.5 s of work in 18 s")
	said := start("20s", "18s")
	m := regexp.MustCompile(`does not fit the kubelet's own grace.*short=(\S+) needs=(\d+)s`).FindStringSubmatch(said)
	require.NotNil(t, m, said)
	assert.Equal(t, "500ms", m[1], "18.5 s of work in 18 s")
	assert.NotContains(t, start(m[2]+"s", "18s"), "does not fit the kubelet's own grace", "the grace it named")
}

// The kubelet's own grace as long as the pod's still ends the node at
// T0 + KubeletGrace, which with a preStop sleep that leaves less than the
// kubelet's 2 s after SIGTERM comes before the SIGKILL the pod's plan
// counts on: New said nothing of a KubeletGrace not shorter than the
// grace, and a node shutdown lost the sandboxes its plan had accepted.
//
//	grace 30 s, preStop sleep 29 s, kubelet grace 30 s, one round of 800 ms:
//	T0 ─ 29 s SIGTERM ─ 29.5 s deadline ─ 30 s the node's end ─ 31 s SIGKILL
//	the pod's plan: 1 s after SIGTERM (its deadline at 30 s): fits;
//	the node's: 500 ms: 300 ms short, a kubelet grace of 31 s holds it
func TestNewWarnsWhenTheKubeletsOwnGraceAsLongAsThePodsEndsBeforeSIGKILL(t *testing.T) {
	var logs logbuf.Buffer
	b, err := deadline.New(30*time.Second, deadline.Config{PreStopSleep: 29 * time.Second})
	require.NoError(t, err)
	node := fakesandbox.NewNode()
	node.AddN("vm", 4, time.Second)
	_, err = New(Config{Budget: b, Sandboxes: node, Pod: podWithoutDeletion(t, 0), KubeletGrace: 30 * time.Second,
		Pause:  pause.Config{Limit: 4, Estimator: deadline.NewEstimator(800 * time.Millisecond)},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err, "the pod's own grace holds the work: New starts")
	assert.Regexp(t, `does not fit the kubelet's own grace.*kubelet_grace=30s short=300ms needs=31s`, logs.String())
}
