package drain

import (
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/fakesandbox"
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

// Fault (row 846): a static pod's process can start before the kubelet
// made its mirror pod in the API server (row 840), and with DRAINKIT_GRACE
// unset its grace is read from the pod's spec, through that mirror pod:
// NewServer failed at once on the 404, "DRAINKIT_GRACE is not set ... 404
// Not Found", which reads as a POD_NAME that names no pod, and the server
// exited, for the kubelet to restart it with a back-off that grows to 5
// minutes, though the kubelet made the mirror pod a second later. Now a
// 404 for a POD_UID that is a static pod's is read again every second
// within the start's one bound on that read (5 s), and a mirror pod still
// missing then is an error that says so and names DRAINKIT_GRACE:
//
//	0 s   start: the read of the spec finds no pod of the name (404)
//	1 s   the kubelet makes the mirror pod (grace 45 s): NewServer returns,
//	      with it (before: failed at 0 s); or none by 5 s: the error
func TestNewServerOfAStaticPodReadsItsGraceOnceTheKubeletMadeItsMirrorPod(t *testing.T) {
	for _, c := range []struct {
		name    string
		uid     string        // POD_UID
		grace   string        // DRAINKIT_GRACE
		made    time.Duration // when the kubelet makes the mirror pod; 0: never
		start   time.Duration // how long NewServer takes
		reads   int           // of the pod's spec
		wantErr []string      // what its error says; none: it starts
	}{
		{"the mirror pod made 1 s into the start", staticHash, "", time.Second, time.Second, 2, nil},
		{"no mirror pod within the start's 5 s", staticHash, "", 0, 4 * time.Second, 5,
			[]string{EnvGrace + " is not set", "static pod", "mirror pod", "404"}},
		{"DRAINKIT_GRACE set: the start waits for nothing", staticHash, "45", time.Second, 0, 1, nil},
		{"a UID of the API server's: no static pod, not read again", "uid-0", "", time.Second, 0, 1,
			[]string{EnvGrace + " is not set", "404"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := mirrorPod(staticHash)
				api.SetGrace(45)
				start := time.Now()
				var reads atomic.Int32
				rt := handlerTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodGet {
						reads.Add(1)
					}
					if c.made == 0 || time.Since(start) < c.made {
						fakeapiserver.PodNotFound(w, api.Name) // the mirror pod not made yet
						return
					}
					api.ServeHTTP(w, r)
				})}
				inClusterOf(t, &podAPI{Pod: api, cfg: configOver(t, api, rt)})
				logs := logToDefault(t)
				t.Setenv(EnvGrace, c.grace)
				t.Setenv(EnvPodUID, c.uid)
				s, err := NewServer(&http.Server{Addr: "127.0.0.1:0"}, fakesandbox.NewNode())
				assert.Equal(t, c.start, time.Since(start), "the start")
				assert.Equal(t, c.reads, int(reads.Load()), "reads of the spec")
				if c.wantErr != nil {
					require.Error(t, err)
					for _, w := range c.wantErr {
						assert.Contains(t, err.Error(), w)
					}
					return
				}
				require.NoError(t, err)
				assert.Equal(t, 45*time.Second, s.Drainer().Budget().Grace())
				if c.grace == "" {
					assert.Contains(t, logs.String(), `level=WARN msg="drain: grace from a static pod's spec`, "set DRAINKIT_GRACE: %s", logs.String())
				}
				time.Sleep(c.made) // the mirror pod is there for the drain
				rep := s.Drainer().Shutdown(t.Context())
				assert.True(t, rep.StaticPod)
				assert.NoError(t, rep.Err())
			})
		})
	}
}
