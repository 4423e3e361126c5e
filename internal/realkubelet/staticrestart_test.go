//go:build linux

package realkubelet

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/realapiserver"
)

// A staticRun is sandboxd as a static pod whose manifest is removed while
// its drain runs, then the kubelet restarted (an upgrade of the node's
// kubelet during a drain): the new kubelet has no manifest for the pod it
// finds running, an orphan, and no termination of it to carry on. restart
// runs it beside its API pods, on the one restart: 8 sandboxes of 1 s one
// at a time, no hook, 10 s, its manifest removed with the API pods'
// deletions. What the kubelet and the drain did is in
// docs/real-kubelet.md ("the kubelet restarted during a termination"):
// when the mirror pod went, when and with which grace the kubelet stopped
// the container, how it died, what sandboxd planned and kept.
type staticRun struct {
	name, mirror, state string
	uid, container      string // the static pod's UID (its config hash), its container's ID
	exit                *ExitWatch
	gone                func(within time.Duration) time.Time
	removed             time.Time

	exited chan struct{} // closed once died, err and log are set
	died   time.Time
	err    error
	log    string // the pod's log, read at the exit, before the kubelet removes it
}

const staticGrace, staticSandboxes = 10, 8

// startStatic starts sandboxd as the static pod name with its sandboxes,
// and returns once its mirror pod is in the API server.
func (a *apiPods) startStatic(t *testing.T, name string) *staticRun {
	t.Helper()
	r := &staticRun{name: name, mirror: name + "-" + NodeName, state: filepath.Join(a.node.Dir, "state-"+name)}
	listen, hookListen := freeAddr(t), freeAddr(t)
	pod := Pod(name, staticGrace, r.state, nil, append(sandboxdCommand(listen, hookListen,
		sandboxdCase{grace: staticGrace, sandboxes: staticSandboxes, pause: time.Second, concurrency: 1}), "-pod", r.mirror)...)
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: drain.EnvPodUID,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}
	a.adminServiceAccount(t, pod)
	a.node.AddPod(t, pod)
	pid := WaitProcess(t, "-listen "+listen, 2*time.Minute)
	w, err := WatchProcess(pid)
	require.NoError(t, err)
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	require.NoError(t, err)
	for _, kv := range strings.Split(string(environ), "\x00") {
		if v, ok := strings.CutPrefix(kv, drain.EnvPodUID+"="); ok {
			r.uid = v
		}
	}
	require.NotEmpty(t, r.uid)
	r.container = a.node.ContainerID(t, name, time.Minute)
	r.exit = a.node.WatchExit(t, r.container)
	waitHTTP(t, "http://"+listen+"/healthz", a.node, name)
	for range staticSandboxes {
		createSandbox(t, "http://"+listen, `{"timeout_s": 86400}`)
	}
	r.exited = make(chan struct{})
	go func() {
		defer close(r.exited)
		r.died, r.err = w.Wait(staticGrace*time.Second + 2*time.Minute)
		r.log = a.node.PodLog(name)
	}()
	require.Eventually(t, func() bool { return a.mirrorExists(r.mirror) }, time.Minute, 100*time.Millisecond, "the kubelet made no mirror pod")
	return r
}

// remove removes the static pod's manifest and watches its mirror pod.
func (r *staticRun) remove(t *testing.T, a *apiPods) time.Time {
	r.removed = a.node.DeletePod(t, r.name)
	r.gone = a.watchMirrorGone(t, r.mirror)
	return r.removed
}

// end waits for sandboxd's exit and logs what the kubelet, restarted
// (stopped, then healthy), and the drain did, from the manifest's
// removal; it asserts the kubelet's part: the orphan stopped by the new
// kubelet before the manifest's grace ran out.
func (r *staticRun) end(t *testing.T, a *apiPods, stopped, healthy time.Time) {
	t.Helper()
	<-r.exited
	require.NoError(t, r.err)
	died, log := r.died, r.log
	mirrorGone := r.gone(15 * time.Second)
	d := r.removed
	exited, status, err := r.exit.Wait(time.Minute)
	require.NoError(t, err)
	records, _ := filepath.Glob(filepath.Join(r.state, "records", "*"))
	t.Logf("from the manifest's removal: the kubelet stopped +%v, healthy +%v, the mirror pod gone +%v, sandboxd dead +%v, its container's exit +%v, status %d; %d records of paused sandboxes (of %d)",
		rel(stopped, d), rel(healthy, d), relIfAny(mirrorGone, d), rel(died, d), rel(exited, d), status, len(records), staticSandboxes)
	for _, line := range a.node.KubeletLog(`"default/`+r.mirror+`"`, r.uid) {
		t.Logf("kubelet: %.400s", line)
	}
	containerd, _ := os.ReadFile(filepath.Join(a.node.Dir, "containerd.log"))
	for _, line := range strings.Split(string(containerd), "\n") {
		if strings.Contains(line, r.container) {
			t.Logf("containerd: %.400s", line)
		}
	}
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "level=DEBUG") {
			t.Logf("sandboxd: %.700s", line)
		}
	}
	if _, err := os.Stat(filepath.Join(r.state, "last-shutdown.json")); err == nil {
		rep := readJSON[drain.Report](t, filepath.Join(r.state, "last-shutdown.json"), a.node, r.name)
		b := rep.Budget
		var counts any = "no preserve account (an unfinished drain's: lastreport.Progress)"
		if rep.Preserve != nil {
			counts = rep.Preserve.Counts
		}
		t.Logf("Report: SIGTERM +%v, SIGKILL planned +%v, %v, static_pod %v, err %v",
			rel(b.SIGTERM, d), rel(b.Kill, d), counts, rep.StaticPod, rep.Err())
	} else {
		t.Logf("no Report: sandboxd was killed before it wrote one")
	}
	orphan := false
	for _, line := range a.node.KubeletLog("Clean up containers for orphaned pod") {
		orphan = orphan || strings.Contains(line, r.uid)
	}
	assert.True(t, died.After(stopped), "the container outlived the old kubelet")
	assert.True(t, orphan, "the new kubelet stopped the pod as an orphan's")
	assert.True(t, died.Before(d.Add(staticGrace*time.Second)), "the new kubelet stopped the orphan before the manifest's grace ran out: +%v", rel(died, d))
}

// mirrorExists reports whether the API server has the pod mirror.
func (a *apiPods) mirrorExists(mirror string) bool {
	code, _, err := a.cluster.Do(realapiserver.AdminToken, http.MethodGet, "/api/v1/namespaces/default/pods/"+mirror, nil)
	return err == nil && code == http.StatusOK
}

// watchMirrorGone reads the pod mirror every 50 ms until the API server no
// longer has it; the func it returns waits up to within more for that,
// stops the reads and returns when the first read found it gone (zero if
// none did).
func (a *apiPods) watchMirrorGone(t *testing.T, mirror string) func(within time.Duration) time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var wg sync.WaitGroup
	var gone time.Time
	wg.Go(func() {
		defer close(done)
		for ctx.Err() == nil {
			code, _, err := a.cluster.Do(realapiserver.AdminToken, http.MethodGet, "/api/v1/namespaces/default/pods/"+mirror, nil)
			if err == nil && code == http.StatusNotFound {
				gone = time.Now()
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() }) // when the test ends before its end reads it
	return func(within time.Duration) time.Time {
		select {
		case <-done:
		case <-time.After(within):
		}
		cancel()
		wg.Wait()
		return gone
	}
}

// relIfAny is rel, "none" for a zero t.
func relIfAny(t, t0 time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return fmt.Sprint(rel(t, t0))
}
