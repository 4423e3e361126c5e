package manifest_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drainkit/drainkit/examples/internal/manifest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const daemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: sandboxd
spec:
  template:
    spec:
      terminationGracePeriodSeconds: 3600
      containers:
      - name: sandboxd
        env:
        - {name: SECRET, value: first}
        - {name: SECRET, value: s3cret}
        ports:
        - {name: hook, containerPort: 8081}
        lifecycle:
          preStop:
            httpGet:
              path: /drain
              port: hook
              httpHeaders:
              - {name: X-Drain-Secret, value: s3cret}
`

func TestDaemonSetEnvPortAndHookOfAGoodManifest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "daemonset.yaml")
	if err := os.WriteFile(path, []byte(daemonSet), 0o600); err != nil {
		t.Fatal(err)
	}
	ds := manifest.DaemonSet(t, path, "terminationGracePeriodSeconds:", "terminationGracePeriod:")
	c := ds.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "s3cret", manifest.Env(c, "SECRET"), "the last one, as the kubelet")
	assert.Empty(t, manifest.Env(c, "UNSET"))
	assert.Equal(t, "8081", manifest.Port(c, "hook"), "a named port")
	assert.Equal(t, "9000", manifest.Port(c, "9000"), "a number")
	manifest.CheckDrainHook(t, c, "0.0.0.0:8081", "s3cret")
}

// failures is a testing.TB that counts failures instead of failing.
type failures struct {
	testing.TB
	n int
}

func (f *failures) Errorf(string, ...any) { f.n++ }
func (f *failures) FailNow()              { f.n++; runtime.Goexit() }

// checkFails runs check with a TB of its own and reports whether it failed.
func checkFails(t *testing.T, check func(testing.TB)) bool {
	f := &failures{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); check(f) }()
	<-done
	return f.n > 0
}

func TestCheckDrainHookFailsOnAWrongPortSecretOrHook(t *testing.T) {
	hook := corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/drain", Port: intstr.FromInt32(8081),
		HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Drain-Secret", Value: "s3cret"}},
	}}}}
	assert.False(t, checkFails(t, func(t testing.TB) { manifest.CheckDrainHook(t, hook, "127.0.0.1:8081", "s3cret") }))
	assert.True(t, checkFails(t, func(t testing.TB) { manifest.CheckDrainHook(t, hook, "127.0.0.1:8080", "s3cret") }), "another port")
	assert.True(t, checkFails(t, func(t testing.TB) { manifest.CheckDrainHook(t, hook, "127.0.0.1:8081", "other") }), "another secret")
	exec := corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{}}}}
	assert.True(t, checkFails(t, func(t testing.TB) { manifest.CheckDrainHook(t, exec, "127.0.0.1:8081", "s3cret") }), "an exec hook")
}
