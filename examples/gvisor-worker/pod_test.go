//go:build linux

package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// kubectl delete --grace-period=8 on a worker whose -grace is the manifest's hour: the
// kubelet SIGKILLs it 8 s after the deletion, and only the API server knows. The worker
// had no -pod: it never read its pod, planned the drain for an hour and posted no Event,
// so with more checkpoints than 8 s hold the Report and the termination message were
// what SIGKILL cut. With -pod (default $POD_NAME) the drain reads the deletionTimestamp
// and plans for it, and `kubectl describe pod` shows the drain.
func TestWorkerReadsItsPodsDeletionAndPostsEvents(t *testing.T) {
	t.Parallel()
	api := &fakeapiserver.Pod{Name: "gvisor-worker-x7k2p", Namespace: "sandboxes", UID: "uid-1"}
	_, kcfg := fakeapiserver.Start(t, api, api.Namespace, "token-1")
	cfg := fakeConfig(t)
	cfg.Grace = time.Hour
	cfg.Pod, cfg.Kube = api.Name, kcfg
	_, c, stop := serveWorker(t, cfg)
	for range 2 {
		r, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err)
		require.Equal(t, sandbox.Running, r.State)
	}
	kill := time.Now().Add(8 * time.Second).Truncate(time.Second) // the API server keeps whole seconds
	api.SetDeletion(kill)

	rep := stop() // SIGTERM
	require.NoError(t, rep.Err())
	assert.Equal(t, kill.UTC(), rep.Budget.Kill.UTC(), "the drain planned for the deletion's SIGKILL, not -grace's hour")
	assert.GreaterOrEqual(t, api.Reads(), 1, "the pod was read")
	reasons := api.Reasons()
	assert.Contains(t, reasons, "DrainStarted")
	assert.Contains(t, reasons, "DrainFinished")
	for _, ev := range api.Events() {
		assert.Equal(t, "uid-1", string(ev.Regarding.UID), "events name the pod")
	}
}

// Without a service account (a worker run by hand with POD_NAME set, the standalone
// kubelet), -pod only logs that -grace stands: the worker starts and drains as before.
func TestWorkerWithoutAPIAccessGoesOnWithGrace(t *testing.T) {
	cfg := fakeConfig(t)
	cfg.Pod = "gvisor-worker-x7k2p"
	cfg.Kube.Host = "https://127.0.0.1:1" // and no token file
	cfg.Kube.TokenFile = cfg.StateDir + "/no-token"
	_, _, stop := serveWorker(t, cfg)
	rep := stop()
	require.NoError(t, rep.Err())
	assert.Equal(t, cfg.Grace, rep.Budget.Kill.Sub(rep.Budget.Start), "-grace stands")
}

// The worker reads its pod at start (examples/internal/podstart) and at SIGTERM (it has no
// preStop hook): after kubectl delete --force the StatefulSet's new pod of the same name
// exists by then, and without its UID the worker took that pod for its own: its deletion
// (when the new one is deleted in its turn) set the budget, and the drain's Events went on
// the new pod, a pod just started described as drained. With -pod-uid (default $POD_UID)
// the other pod is not this one: its deletion is not taken, the Events name this pod. This
// pod, read at start (uid-old) and gone from the API server since, was force deleted: the
// kubelet kills it 2 s after SIGTERM (row 580, measured under the real kubelet), and the
// budget plans that once its read lands.
func TestWorkerDoesNotTakeANewPodOfItsNameForItself(t *testing.T) {
	t.Parallel()
	served := fakeapiserver.NewServed(&fakeapiserver.Pod{Name: "gvisor-worker-0", Namespace: "sandboxes", UID: "uid-old"})
	this := served.Pod()
	_, kcfg := fakeapiserver.Start(t, served, this.Namespace, "token-1")
	cfg := fakeConfig(t)
	cfg.Grace = time.Minute
	cfg.Pod, cfg.PodUID, cfg.Kube = this.Name, this.UID, kcfg
	_, c, stop := serveWorker(t, cfg)
	_, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	served.Replace("uid-new").SetDeletion(time.Now().Add(5 * time.Second)) // after the force deletion, the new pod, deleted in its turn
	rep := stop()
	assert.Empty(t, rep.PodMismatch, "read at start, the pod was this one")
	// The read runs beside the drain; a drain of one sandbox may finish before it lands,
	// the budget then as it began. Once it has landed, the 2 s leave the checkpoint no
	// room, and the Report says so.
	if kill := rep.Budget.Kill.Sub(rep.Budget.Start); kill != 2*time.Second {
		assert.Equal(t, cfg.Grace, kill, "-grace, or this pod's force deletion; never the other pod's 5 s")
		require.NoError(t, rep.Err())
	}
	require.NotEmpty(t, served.Events())
	for _, ev := range served.Events() {
		assert.Equal(t, this.UID, string(ev.Regarding.UID), "%s names this pod", ev.Reason)
	}
}

// Graceful node shutdown stops the worker (a DaemonSet's pod: the node going down is its
// usual end) with its priority's slice of shutdownGracePeriod and sets no
// deletionTimestamp; the worker has no preStop hook, so nothing told it the kubelet's
// grace: it planned with -grace's hour while the node went down at the slice's end, the
// checkpoints, the Report and the termination message cut. -kubelet-grace (with -pod)
// is that slice: a SIGTERM read that finds no deletionTimestamp moves SIGKILL to it.
func TestWorkerStoppedByTheKubeletItselfPlansWithKubeletGrace(t *testing.T) {
	t.Parallel()
	api := &fakeapiserver.Pod{Name: "gvisor-worker-x7k2p", Namespace: "sandboxes", UID: "uid-1"}
	_, kcfg := fakeapiserver.Start(t, api, api.Namespace, "token-1")
	cfg := fakeConfig(t)
	cfg.Grace, cfg.KubeletGrace = time.Hour, 20*time.Second
	cfg.Pod, cfg.Kube = api.Name, kcfg
	_, c, stop := serveWorker(t, cfg)
	_, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	rep := stop() // SIGTERM from the kubelet: the pod has no deletionTimestamp
	require.NoError(t, rep.Err())
	assert.Equal(t, 20*time.Second, rep.Budget.Kill.Sub(rep.Budget.Start), "SIGKILL at the kubelet's slice, not -grace's hour")
	r, err := learned.Read(filepath.Join(cfg.StateDir, learned.File))
	require.NoError(t, err)
	assert.Equal(t, 20*time.Second, r.KubeletGrace, "recorded for drainkit plan, which plans the node's shutdown with it")
	assert.Equal(t, time.Hour, r.Grace)
}

// Fault (row 731): a -pod-uid (POD_UID) that is not the pod's was found by no read before
// drain.New, the worker reading its pod first at SIGTERM: there the other UID under the
// name was taken for this pod's force deletion, SIGKILL planned 2 s after SIGTERM on every
// drain (the checkpoints cut), nothing said at start. The worker now reads its pod at
// start (examples/internal/podstart): the Error line at start, pod_mismatch in the Report
// (exit 1), -grace kept.
func TestWorkerSaysAPodUIDThatIsNotThePodsAtStart(t *testing.T) {
	t.Parallel()
	api := &fakeapiserver.Pod{Name: "gvisor-worker-0", Namespace: "sandboxes", UID: "uid-0"}
	_, kcfg := fakeapiserver.Start(t, api, api.Namespace, "token-1")
	cfg := fakeConfig(t)
	cfg.Grace = time.Minute
	cfg.Pod, cfg.PodUID, cfg.Kube = api.Name, "uid-typo", kcfg
	var logs logbuf.Buffer
	_, c, stop := serveWorkerWith(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	assert.Contains(t, logs.String(), `level=ERROR msg="drain: a read of the pod found its name not naming this pod`, "said at start")
	assert.Contains(t, logs.String(), "uid-typo")
	_, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	rep := stop()
	assert.Equal(t, cfg.Grace, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), "-grace kept: no force deletion planned")
	assert.Contains(t, rep.PodMismatch, "uid-typo")
	assert.Error(t, rep.Err())
}
