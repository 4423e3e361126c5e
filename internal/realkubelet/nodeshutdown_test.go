//go:build linux

package realkubelet

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// podAPIName is the pod sandboxd reads (-pod) from a podAPI.
const podAPIName = "sandboxd-0"

// A podAPI is a Kubernetes API server on loopback (internal/fakeapiserver)
// that serves sandboxd's pod as a real API server shows it under a
// graceful node shutdown: running, no deletionTimestamp (the kubelet sets
// none). It counts the reads and keeps the Events posted.
type podAPI struct {
	*fakeapiserver.Pod
	url *url.URL
	cfg kube.Config
}

func newPodAPI(t *testing.T) *podAPI {
	t.Helper()
	a := &podAPI{Pod: &fakeapiserver.Pod{Name: podAPIName, Namespace: "default", UID: "uid-1"}}
	srv, cfg := fakeapiserver.Start(t, a.Pod, "default", "token-1")
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	a.url, a.cfg = u, cfg
	return a
}

// serveTo gives pod a service account for a: its token, CA and namespace on
// a hostPath at kube.ServiceAccountDir, and KUBERNETES_SERVICE_HOST/PORT
// naming a's loopback address (the pod has the host's network).
func (a *podAPI) serveTo(t *testing.T, node *Node, pod *corev1.Pod, name string) {
	t.Helper()
	dir := filepath.Join(node.Dir, "sa-"+name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for src, dst := range map[string]string{a.cfg.TokenFile: "token", a.cfg.CAFile: "ca.crt"} {
		data, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, dst), data, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "namespace"), []byte("default\n"), 0o644))
	mountServiceAccount(pod, dir, a.url)
}

// mountServiceAccount mounts dir (token, ca.crt, namespace) at
// kube.ServiceAccountDir in pod's container (a hostPath: the pods here get
// no projected token) and names api's host and port in
// KUBERNETES_SERVICE_HOST/PORT (the pod has the host's network).
func mountServiceAccount(pod *corev1.Pod, dir string, api *url.URL) {
	dirType := corev1.HostPathDirectory
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "serviceaccount",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "serviceaccount", MountPath: kube.ServiceAccountDir, ReadOnly: true})
	serviceEnv(pod, api)
}

// serviceEnv names api's host and port in KUBERNETES_SERVICE_HOST/PORT of
// pod's container, where kube.New looks for the API server: its own env,
// which wins over the kubelet's (the pods here have the host's network,
// and nothing routes the kubernetes Service's cluster IP).
func serviceEnv(pod *corev1.Pod, api *url.URL) {
	c := &pod.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: api.Hostname()},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: api.Port()})
}

// sandboxdNodeShutdownSlice is the node-shutdown slice of
// TestRealKubeletSandboxd's Node; its manifests say 15 s.
const sandboxdNodeShutdownSlice = 4 * time.Second

// sandboxdUnderNodeShutdown is examples/sandboxd ended by a real graceful
// node shutdown: the manifest says 15 s, the node's slice is 4 s, and the
// pod reader finds the pod running with no deletionTimestamp, as a real API
// server shows it then. declared: -kubelet-grace 4s
// (drain.Config.KubeletGrace); without it, the control.
//
// The control runs on a kubelet that has not been through a cancelled
// shutdown: after one, the kubelet v1.34.4 closes its old inhibitor
// descriptor's number again when it finishes the next shutdown (see
// NodeShutdown.Cancel), and that number then belonged to the open preStop
// GET's connection: sandboxd saw the call end at T0 + 4 s, before SIGTERM,
// and could not tell the kubelet had abandoned it (SIGKILL planned 11 s
// after SIGTERM instead of 2 s; measured twice out of two, and never with
// the control first).
func sandboxdUnderNodeShutdown(t *testing.T, node *Node, declared bool) {
	const slice = sandboxdNodeShutdownSlice
	requireNodeShutdown(t, node)
	api := newPodAPI(t)
	c := sandboxdCase{grace: 15, sandboxes: 8, pause: 300 * time.Millisecond, concurrency: 4, nodeShutdown: true, api: api}
	if !declared {
		c.squeezed = true // the control: its pauses are cut
		rep := runSandboxd(t, node, "sandboxd-ns-control", c)
		t.Logf("control: %v; lost %d; pod read %d times; events %v", rep.Preserve.Counts, rep.Lost(), api.Reads(), api.Reasons())
		sigterm := rep.Budget.SIGTERM.Sub(rep.Budget.Start)
		assert.GreaterOrEqual(t, sigterm.Seconds(), slice.Seconds()-0.2, "SIGTERM at the kubelet's 4 s, the hook still open")
		assert.InDelta(t, 2.0, rep.Budget.Kill.Sub(rep.Budget.SIGTERM).Seconds(), 0.01, "the budget expects SIGKILL 2 s after SIGTERM")
		require.NotNil(t, rep.Phase(drain.PhaseDrain))
		assert.True(t, rep.Budget.SIGTERM.Before(rep.Phase(drain.PhaseDrain).Deadline), "SIGTERM at %v cut the hook's wait, due to end at %v",
			sigterm, rep.Phase(drain.PhaseDrain).Deadline.Sub(rep.Budget.Start))
		return
	}
	// The plan fits the work exactly if SIGTERM follows the hook's return at
	// once; the kubelet's SIGTERM came 80 ms later at load 7-9 (8/8
	// preserved, three runs) and 250 ms later at load 13, which cut 4
	// pauses at the preserve deadline (the 1.5 s margin was still there,
	// unused, at the end); with the end kept at T0 + 4 s after SIGTERM, a
	// 44 ms lag cut 4 at load 10. So the cut pauses are logged, and half
	// must be preserved: without the declaration none are (the control).
	c.kubeletGrace, c.squeezed = slice, true
	rep := runSandboxd(t, node, "sandboxd-ns-declared", c)
	reads := api.Reads()
	t.Logf("declared: %v; lost %d; pod read %d times; events %v; shortfall %v", rep.Preserve.Counts, rep.Lost(), reads, api.Reasons(), rep.Shortfall)
	assert.Positive(t, reads, "sandboxd read its pod")
	assert.GreaterOrEqual(t, rep.Preserve.Counts[pause.Preserved], 4)
	// the kubelet's arithmetic: SIGTERM + 4 s less the hook's whole seconds
	assert.InDelta(t, slice.Seconds(), rep.Budget.Kill.Sub(rep.Budget.Start).Seconds(), 1.05, "the budget's SIGKILL is the kubelet's")
	assert.Less(t, rep.Budget.SIGTERM.Sub(rep.Budget.Start), slice-500*time.Millisecond, "the hook returned before the kubelet's 4 s ran out")
}
