package podstart_test

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/examples/internal/podstart"
	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/kube"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readAtStart serves api on loopback, reads it once with Read as a program
// configured with uid does, and returns the pod and what Read logged.
func readAtStart(t *testing.T, api *fakeapiserver.Pod, uid string) (*kube.Pod, string) {
	t.Helper()
	_, cfg := fakeapiserver.Start(t, api, api.Namespace, "token-1")
	cfg.UID = uid
	pod, err := kube.New(api.Name, cfg)
	require.NoError(t, err)
	var logs logbuf.Buffer
	podstart.Read(pod, slog.New(slog.NewTextHandler(&logs, nil)))
	return pod, logs.String()
}

// A POD_UID that is not the pod's is found by the read at start, where
// drain.New says it (Identity.Mismatch); Read adds no line of its own.
func TestReadFindsAUIDThatIsNotThePodsAtStart(t *testing.T) {
	pod, logs := readAtStart(t, &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "sandboxes", UID: "uid-0"}, "uid-typo")
	assert.ErrorIs(t, pod.Identity().Mismatch, kube.ErrPodReplaced)
	assert.False(t, pod.Identity().Confirmed)
	assert.Empty(t, logs)
}

// The right UID is confirmed at start: a later 404 is then the pod's force
// deletion, not a misconfiguration.
func TestReadConfirmsThePod(t *testing.T) {
	pod, logs := readAtStart(t, &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "sandboxes", UID: "uid-0"}, "uid-0")
	assert.True(t, pod.Identity().Confirmed)
	assert.NoError(t, pod.Identity().Mismatch)
	assert.Empty(t, logs)
}

// A read that fails (the API server refusing) is logged at Warn, names the
// pod and the error, and leaves the identity as it was: the drain reads again.
func TestReadThatFailsIsLoggedAndChangesNothing(t *testing.T) {
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "sandboxes", UID: "uid-0"}
	api.Refuse(http.StatusServiceUnavailable)
	pod, logs := readAtStart(t, api, "uid-0")
	assert.Contains(t, logs, `level=WARN msg="the pod could not be read at start`)
	assert.Contains(t, logs, "pod=sandboxd-0")
	assert.NoError(t, pod.Identity().Mismatch)
	assert.False(t, pod.Identity().Confirmed)
}

// No pod (no -pod, no API access) is no read and no line.
func TestNilPodIsNotRead(t *testing.T) {
	var logs logbuf.Buffer
	podstart.Read(nil, slog.New(slog.NewTextHandler(&logs, nil)))
	assert.Empty(t, logs.String())
}
