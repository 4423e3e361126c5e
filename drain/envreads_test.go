package drain

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// ConfigFromEnv reads the pod's spec once: its grace, its priority (for
// the node's KubeletConfiguration) and its containers' preStop sleeps
// come from one answer. Read apart, they took three requests, and with an
// API server that does not answer three timeouts: 15 s before the server
// started (measured, DRAINKIT_GRACE set so that the start goes on), where
// one read costs one, 5 s. The fields do not change in a pod's life, so
// one read is all they need, and no two reads can disagree.
func TestConfigFromEnvReadsThePodsSpecOnce(t *testing.T) {
	api := newPodAPI(t)
	api.SetGrace(60)
	api.SetPriority(2000001000) // system-node-critical
	api.SetContainers(corev1.Container{Name: "sandboxd", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}})
	inClusterOf(t, api)
	config := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(config, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+
		"shutdownGracePeriod: 45s\nshutdownGracePeriodCriticalPods: 20s\n"), 0o600))
	t.Setenv(EnvGrace, "")
	t.Setenv(EnvKubeletConfig, config)

	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	assert.Equal(t, 1, api.Reads(), "one read of the pod")
	assert.Equal(t, 60*time.Second, cfg.Budget.Grace(), "the spec's grace")
	assert.Equal(t, 20*time.Second, cfg.KubeletGrace, "the critical pods' slice, by the spec's priority")
	sigterm := time.Now()
	cfg.Budget.OnSIGTERM(sigterm)
	assert.Equal(t, 55*time.Second, cfg.Budget.Kill().Sub(sigterm), "SIGTERM after the container's 5 s sleep: SIGKILL 55 s later")
}
