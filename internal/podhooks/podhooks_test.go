package podhooks_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/podhooks"
	"github.com/drainkit/drainkit/kube"
)

// What kube's one read of the spec hands drain of each container's
// preStop, as the API server serves a pod: a port as a number or as a
// name (IntOrString, JSON number or string), the container's named ports,
// the pod's network, each kind of hook.
func TestOfReadsEachContainersPreStopAsTheAPIServerServesIt(t *testing.T) {
	api := &fakeapiserver.Pod{Name: "node-0", Namespace: "ns", UID: "uid-0"}
	_, cfg := fakeapiserver.Start(t, api, "ns", "token")
	api.SetGrace(30)
	api.SetHostNetwork(true)
	sleep := int64(5)
	api.SetContainers(
		corev1.Container{Name: "node", Ports: []corev1.ContainerPort{{Name: "hook", ContainerPort: 8082}},
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
				Host: "127.0.0.1", Path: "/drain", Port: intstr.FromString("hook"), Scheme: corev1.URISchemeHTTPS,
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Drain-Secret", Value: "s"}}}}}},
		corev1.Container{Name: "by-number", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}}},
		corev1.Container{Name: "loop", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "until false; do sleep 3; done"}}}}},
		corev1.Container{Name: "sleeper", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Sleep: &corev1.SleepAction{Seconds: sleep}}}},
		corev1.Container{Name: "none"},
	)
	pod, err := kube.New("node-0", cfg)
	require.NoError(t, err)
	spec, err := pod.Spec(context.Background())
	require.NoError(t, err)

	got := podhooks.Of(spec)
	assert.True(t, got.HostNetwork)
	require.Len(t, got.Containers, 5)
	node := got.Containers[0]
	assert.Equal(t, map[string]int{"hook": 8082}, node.Ports)
	assert.Equal(t, &podhooks.Handler{HTTPGet: &podhooks.HTTPGet{Host: "127.0.0.1", Path: "/drain", Scheme: "HTTPS", Port: "hook",
		Headers: []podhooks.Header{{Name: "X-Drain-Secret", Value: "s"}}}}, node.PreStop)
	assert.Equal(t, "8080", got.Containers[1].PreStop.HTTPGet.Port)
	assert.Equal(t, []string{"/bin/sh", "-c", "until false; do sleep 3; done"}, got.Containers[2].PreStop.Exec)
	assert.Equal(t, &sleep, got.Containers[3].PreStop.Sleep)
	assert.Nil(t, got.Containers[4].PreStop)
}
