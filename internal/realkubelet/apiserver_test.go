//go:build linux

package realkubelet

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/realapiserver"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// The real kubelet with the real kube-apiserver (internal/realapiserver):
// its pods are created and deleted through the API, as in a cluster, which
// shows what no static pod can: a second, shorter deletion, a first one
// longer than the manifest's, a force deletion, and a kubelet restarted
// while it terminates a pod (last: it
// restarts the Node's kubelet); and what a static pod's mirror pod in the
// API server shows of the static pod.
//
// The API server's build comes after the kubelet's in .ci/run, so this
// test runs after the suite, with the real API server's tests.
func TestRealKubeletWithAPIServer(t *testing.T) {
	api := startAPINode(t)
	// The force deletion's pods start first and are deleted after the
	// shorter and longer deletions: sandboxd reads its pod at start, and
	// the API server takes a token from its cache for 10 s after a success
	// (forceDeletion). Not beside the shorter deletions: the kubelet busy
	// starting them began a hook there 1.3 s late once, at load 11.
	forced := startForced(t, api)
	t.Run("shorter deletion", func(t *testing.T) { shorterDeletion(t, api) })
	t.Run("longer deletion", func(t *testing.T) { longerDeletion(t, api) })
	t.Run("force deletion", func(t *testing.T) { forceDeletion(t, api, forced) })
	t.Run("static pod", func(t *testing.T) { staticPod(t, api) })
	t.Run("the README's manifest", func(t *testing.T) { readmeManifest(t, api) })
	t.Run("sandboxd's DaemonSet", func(t *testing.T) { sandboxdManifest(t, api) })
	t.Run("the supervisor's DaemonSet", func(t *testing.T) { supervisorManifest(t, api) })
	t.Run("restart", func(t *testing.T) { restart(t, api) })
}

// A second, shorter deletion (docs/faults.md rows 228 and 229). The API
// server moves the deletionTimestamp to the first deletion's time plus the
// new grace; the kubelet v1.34.4 keeps the grace its termination started
// with (its SyncTerminatingPod ignores the sync's cancelled context: no
// hook runs again, no new stop):
//
//   - the probe, no hook, ignoring SIGTERM: deleted with 12 s, then 2 s
//     later with 4 s: dead at the first deletion + 12 s, not at the
//     deletionTimestamp (+4 s) nor the second deletion + 4 s;
//   - the probe, an httpGet hook that never answers: deleted with 12 s,
//     then with 4 s: one call, waited out for 12 s, SIGTERM, dead 2 s later;
//   - sandboxd with the exec hook drainhook: deleted with 20 s, then 4 s
//     later with 8 s (deletionTimestamp +8 s): its budget keeps the first
//     deletion's 20 s, and all 16 sandboxes (1 s each, 2 at a time) are
//     preserved before the kubelet's SIGKILL;
//   - sandboxd without a hook: deleted with 20 s, SIGTERM, 16 pauses one
//     at a time; 4 s later deleted with 8 s: the kubelet keeps the 20 s, but
//     a kubelet restarted now would kill 8 s after its restart, and no hook
//     would tell the drain (restart, below), so its budget plans for that
//     (docs/faults.md row 389): exit before the second deletion + 8 s, the
//     device daemon stopped, what did not fit reported;
//   - sandboxd without a hook, its manifest's 20 s, deleted once with 8 s:
//     SIGTERM's read of the pod lands after the preserve phase began, and
//     the phase follows it (row 235): exit before the deletion + 8 s, the
//     device daemon stopped, what did not fit reported.
//
// The five run at once, each its own pod, as a drain deletes a node's pods
// together: one after another they took 84 s of the 20-minute CI, two at a
// time (go test's default -parallel on 2 cores) 47 s, at once 24 s
// (main_test.go raises the package's -parallel).
func shorterDeletion(t *testing.T, api *apiPods) {

	t.Run("probe, no hook: the kubelet keeps the first grace", func(t *testing.T) {
		t.Parallel()
		d1, d2, hooks, term, died := api.probe(t, "probe-nohook", 12, 2*time.Second, nil, api.deleteAgain("probe-nohook", 4))
		t.Logf("from the first deletion: second +%v, SIGTERM +%v, dead +%v; hooks %v", d2.Sub(d1), term.Sub(d1), died.Sub(d1), hooks)
		assert.Empty(t, hooks)
		assert.InDelta(t, 12, died.Sub(d1).Seconds(), 1, "dead at the first deletion's grace")
	})
	t.Run("probe, httpGet hook that hangs: one call, the first grace", func(t *testing.T) {
		t.Parallel()
		d1, d2, hooks, term, died := api.probe(t, "probe-hang", 12, 2*time.Second, func(port int) *corev1.LifecycleHandler {
			return HTTPGetHook(port, "/hook")
		}, api.deleteAgain("probe-hang", 4))
		t.Logf("from the first deletion: second +%v, hooks %v, SIGTERM +%v, dead +%v", d2.Sub(d1), hooks, term.Sub(d1), died.Sub(d1))
		assert.Len(t, hooks, 1, "the hook is not run again")
		assert.InDelta(t, 12, term.Sub(d1).Seconds(), 1, "SIGTERM when the first call's 12 s ran out")
		assert.InDelta(t, 14, died.Sub(d1).Seconds(), 1, "dead 2 s later")
	})
	t.Run("sandboxd, exec hook: the budget keeps the first deletion's grace", func(t *testing.T) {
		t.Parallel()
		r := api.sandboxd(t, "sandboxd-exec2", true, 16, 20, 20, 4*time.Second, api.deleteAgain("sandboxd-exec2", 8))
		assert.Equal(t, 16, r.rep.Preserve.Counts[pause.Preserved], "%v", r.rep.Preserve.Counts)
		assert.True(t, r.rep.Budget.Restart.IsZero(), "no new run")
		assert.WithinRange(t, r.rep.Budget.Kill, r.d1.Add(19*time.Second), r.d1.Add(21*time.Second), "the first deletion's SIGKILL")
		assert.True(t, r.died.Before(r.d1.Add(20*time.Second)), "exit before the kubelet's SIGKILL")
		assert.Contains(t, r.log, "a second deletion shortened the pod's grace")
	})
	t.Run("sandboxd, no hook, deleted with less than the spec's grace", func(t *testing.T) {
		t.Parallel()
		r := api.sandboxd(t, "sandboxd-short", false, 16, 20, 8, 0, nil)
		assert.True(t, r.died.Before(r.d1.Add(8*time.Second)), "exit before the kubelet's SIGKILL, the deletion + 8 s: +%v", r.died.Sub(r.d1))
		assert.WithinRange(t, r.rep.Budget.Kill, r.d1.Add(7*time.Second), r.d1.Add(8*time.Second), "the deletion's SIGKILL")
		assert.Positive(t, r.rep.Preserve.Counts[pause.Preserved])
	})
	t.Run("sandboxd, no hook: the budget plans for a kubelet restarted with the new grace", func(t *testing.T) {
		t.Parallel()
		r := api.sandboxd(t, "sandboxd-nohook2", false, 16, 20, 20, 4*time.Second, api.deleteAgain("sandboxd-nohook2", 8))
		assert.WithinRange(t, r.rep.Budget.Kill, r.d1.Add(8*time.Second), r.d2.Add(8*time.Second),
			"SIGKILL planned at most the new grace after the second deletion")
		assert.True(t, r.died.Before(r.d2.Add(8*time.Second)), "exit before a restarted kubelet's SIGKILL: +%v", r.died.Sub(r.d1))
		assert.Positive(t, r.rep.Preserve.Counts[pause.Preserved])
		assert.Contains(t, r.log, "no preStop hook tells this drain")
		if strings.Contains(r.log, "SIGTERM during the shutdown") {
			t.Logf("the runtime sent SIGTERM again")
		}
	})
}

// A first deletion with a grace longer than the manifest's (docs/faults.md
// row 1026): `kubectl drain --grace-period=12` of sandboxd whose manifest
// says 4 s, no hook. The kubelet v1.34.4 stops the container with the
// deletion's 12 s (calculateEffectiveGracePeriod takes
// deletionGracePeriodSeconds for a pod not terminating yet), and sandboxd's
// drain, which read the deletion at SIGTERM, planned SIGKILL at its
// deletionTimestamp: its 6 sandboxes of 1 s, one at a time, all preserved
// before the kubelet's SIGKILL, where the manifest's 4 s leaves too little.
func longerDeletion(t *testing.T, api *apiPods) {
	t.Run("sandboxd, no hook, deleted with more than the spec's grace", func(t *testing.T) {
		r := api.sandboxd(t, "sandboxd-long", false, 6, 4, 12, 0, nil)
		assert.EqualValues(t, 12, api.kubeletGrace(t, "sandboxd-long"), "the kubelet stops the container with the deletion's grace, not the manifest's 4 s")
		assert.WithinRange(t, r.rep.Budget.Kill, r.d1.Add(11*time.Second), r.d1.Add(12*time.Second), "the drain planned the deletion's SIGKILL")
		assert.True(t, r.died.Before(r.d1.Add(12*time.Second)), "exit before the kubelet's SIGKILL, the deletion + 12 s: +%v", r.died.Sub(r.d1))
		assert.Equal(t, 6, r.rep.Preserve.Counts[pause.Preserved], "%v", r.rep.Preserve.Counts)
		assert.Contains(t, r.log, "which the kubelet gives in full")
	})
}

// A force deletion (`kubectl delete --force --grace-period=0`: DELETE with
// gracePeriodSeconds 0) of a running pod. The API server writes the pod
// with a deletionTimestamp and deletionGracePeriodSeconds 0, then removes
// it at once. The kubelet sees the update before the removal ("SyncLoop
// DELETE", then "SyncLoop REMOVE") and terminates the pod with a grace of
// 1 s (its pod worker raises 0 to 1): a preStop hook gets 1 s, and the
// stop after it is raised to the kubelet's 2 s, so SIGKILL comes 2 s
// after SIGTERM, hook or not. The three pods are deleted at once, as a
// drain deletes a node's pods.
//
// sandboxd reads with its own token, the kubelet's projected one bound to
// the pod (boundServiceAccount), and knows its pod's UID (POD_UID from the
// Downward API, as its DaemonSet sets it). The API server refuses that
// token once its own informer of pods has seen the pod go (0.13-0.26 s
// after the DELETE, measured with tokens each used once) unless a success
// of the token is in its cache (tokenCacheTTL): a read is then a 401,
// which kube.IsNotFound takes for the removal (docs/faults.md row 1030);
// sooner, the token passes and the read is a 404, the removal too (row
// 580), and the token's success is cached. sandboxd reads its pod at
// start: with its pods started 3 s before the deletion, every read after
// it was a 404 (three runs), hence startForced, before the other cases. Measured, from each
// deletion (16 sandboxes of 1 s, 20 s):
//
//   - the probe, no hook, SIGTERM ignored, 12 s: SIGTERM +0.10 s, dead
//     +2.15 s, the kubelet's stop gracePeriod=2;
//   - sandboxd with the exec hook drainhook, two at a time: the hook's
//     read at +0.26 s, a 401, planned SIGKILL at T0 + 2 s; SIGTERM
//     +0.44 s, SIGKILL planned +2.44 s, the kubelet's; 14 not started, 2
//     cut, all reported, the device daemon stopped, exit +1.23 s. Before
//     row 1030 the 401s were failed reads, and only the hook's call still
//     open when the kubelet's 1 s ran out (SIGTERM +1.09 s, taken as the
//     hook abandoned) gave SIGTERM + 2 s;
//   - sandboxd without a hook, one at a time: SIGTERM +0.09 s, its read a
//     404 (inside the informer's window), SIGKILL planned +2.09 s; 15 not
//     started, 1 cut, all reported, exit +0.72 s. Before row 1030, in a
//     run whose read was a 401, the budget stood at SIGTERM + 20 s and
//     sandboxd was SIGKILLed 2 s after SIGTERM in the middle of its
//     preserves, with no Report.
func forceDeletion(t *testing.T, api *apiPods, pods forcedPods) {
	probe, exec, blind := pods.probe, pods.exec, pods.blind
	require.True(t, probe != nil && exec != nil && blind != nil, "its pods did not all start: see the_force_deletion's_pods_start")
	// Not timing logic: past the API server's cache of the tokens' reads at
	// start (10 s), which the shorter deletions' group alone outlasts.
	time.Sleep(time.Until(pods.started.Add(tokenCacheTTL + time.Second)))
	d := map[string]time.Time{}
	for _, name := range []string{probe.name, exec.name, blind.name} {
		d[name] = api.remove(t, name, 0)
	}

	t.Run("probe, no hook: SIGKILL 2 s after SIGTERM", func(t *testing.T) {
		hooks, term, died := probe.end(t)
		grace := api.kubeletGrace(t, probe.name)
		d := d[probe.name]
		t.Logf("from the force deletion: SIGTERM +%v, dead +%v; hooks %v; the kubelet's stop: gracePeriod=%d",
			rel(term, d), rel(died, d), hooks, grace)
		assert.Empty(t, hooks)
		assert.EqualValues(t, 2, grace, "the kubelet stops the container with its 2 s minimum")
		assert.InDelta(t, 2, died.Sub(term).Seconds(), 1, "dead 2 s after SIGTERM, not the spec's 12 s")
	})
	t.Run("sandboxd, exec hook: the budget plans the kubelet's SIGKILL", func(t *testing.T) {
		api.forced(t, exec, d[exec.name], true)
	})
	t.Run("sandboxd, no hook: the budget plans the kubelet's SIGKILL", func(t *testing.T) {
		r := api.forced(t, blind, d[blind.name], false)
		assert.Contains(t, r.log, "the pod was removed from the API server before any read found its deletion")
	})
}

// tokenCacheTTL is how long the kube-apiserver v1.34 takes a token it
// took once without validating it again (its authenticator's cache of
// successes, TokenSuccessCacheTTL, no flag): a pod's own token keeps
// reading 404s, not 401s, that long after a read that succeeded.
const tokenCacheTTL = 10 * time.Second

// forcedPods are forceDeletion's pods, started before the test's other
// cases (startForced); started is when the last one was running.
type forcedPods struct {
	probe       *probeRun
	exec, blind *sandboxdRun
	started     time.Time
}

// startForced starts forceDeletion's pods at once, each in a subtest of
// its own: the probe, and sandboxd with and without the exec hook
// drainhook. A pod that did not start is nil.
func startForced(t *testing.T, api *apiPods) forcedPods {
	var p forcedPods
	began := time.Now()
	t.Run("the force deletion's pods start", func(t *testing.T) {
		t.Run("probe", func(t *testing.T) { t.Parallel(); p.probe = api.startProbe(t, "probe-force", 12, nil) })
		t.Run("sandboxd, exec hook", func(t *testing.T) {
			t.Parallel()
			p.exec = api.startSandboxd(t, "sandboxd-force-exec", true, 16, 20)
		})
		t.Run("sandboxd, no hook", func(t *testing.T) {
			t.Parallel()
			p.blind = api.startSandboxd(t, "sandboxd-force-nohook", false, 16, 20)
		})
	})
	p.started = time.Now()
	t.Logf("the force deletion's pods started in %v", p.started.Sub(began).Round(time.Millisecond))
	return p
}

// A static pod under a kubelet registered with the API server
// (docs/faults.md row 710): sandboxd, its manifest in the kubelet's
// staticPodPath, POD_UID from the Downward API's metadata.uid, reading the
// API server's pod of its name, the kubelet's mirror pod (the static pod's
// name, a dash, the node's). The kubelet gives the Downward API its own
// pod's UID, the static pod's config hash, not the UID the API server gave
// the mirror pod, which carries the hash in its kubernetes.io/config.mirror
// annotation. The manifest's removal terminates the pod with its grace; the
// mirror pod stays, with no deletionTimestamp, until the container is gone.
// Measured, from the manifest's removal (4 sandboxes of 1 s one at a
// time, no hook, 10 s): POD_UID the hash (32 hex digits, also in the
// mirror pod's kubernetes.io/config.hash), the mirror pod a UID of the API
// server's; SIGTERM +0.06 s. Before row 710 sandboxd's read at SIGTERM
// found "another pod in the name", took it for a force deletion (row 580)
// and planned SIGKILL at +2.05 s: the preserve phase ended at its new
// deadline, 0 of 4 preserved (4 timed out), exit +0.73 s and status 1,
// though the kubelet gave the manifest's 10 s. After: the read finds the
// pod not deleted, SIGKILL planned at +10.06 s, 4 of 4 preserved, exit
// +4.38 s. Mid-drain, 1 s after the manifest's removal, the mirror pod is
// deleted with a grace of 1 s (row 720): the kubelet logs the API's
// "SyncLoop DELETE" and keeps its one stop, gracePeriod=10. Before row
// 720 sandboxd's poll took the mirror's deletionTimestamp for the pod's:
// SIGKILL planned at +2.05 s, 1 of 4 preserved, while the kubelet killed
// at +10.13 s; after, +10.07 s, 4 of 4, exit +4.22 s. The subtest takes
// about 9 s.
func staticPod(t *testing.T, api *apiPods) {
	const name, grace, n = "sandboxd-static", 10, 4
	state := filepath.Join(api.node.Dir, "state-"+name)
	mirror := name + "-" + NodeName // the kubelet's name of a static pod
	listen, hookListen := freeAddr(t), freeAddr(t)
	pod := Pod(name, grace, state, nil, append(sandboxdCommand(listen, hookListen,
		sandboxdCase{grace: grace, sandboxes: n, pause: time.Second, concurrency: 1}), "-pod", mirror)...)
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: drain.EnvPodUID,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}
	api.adminServiceAccount(t, pod)
	api.node.AddPod(t, pod)
	pid := WaitProcess(t, "-listen "+listen, 2*time.Minute)
	w, err := WatchProcess(pid)
	require.NoError(t, err)
	started := time.Now()
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	require.NoError(t, err)
	var podUID string
	for _, kv := range strings.Split(string(environ), "\x00") {
		if v, ok := strings.CutPrefix(kv, drain.EnvPodUID+"="); ok {
			podUID = v
		}
	}
	waitHTTP(t, "http://"+listen+"/healthz", api.node, name)
	for range n {
		createSandbox(t, "http://"+listen, `{"timeout_s": 86400}`)
	}
	var m corev1.Pod
	require.Eventually(t, func() bool {
		code, body, err := api.cluster.Do(realapiserver.AdminToken, http.MethodGet, "/api/v1/namespaces/default/pods/"+mirror, nil)
		return err == nil && code == http.StatusOK && json.Unmarshal(body, &m) == nil
	}, time.Minute, 100*time.Millisecond, "the kubelet made no mirror pod")
	t.Logf("POD_UID in the container: %s; the mirror pod %s: UID %s, annotations %v", podUID, mirror, m.UID, m.Annotations)
	require.NotEmpty(t, podUID)
	assert.NotEqual(t, podUID, string(m.UID), "the Downward API gives the static pod's UID, not the mirror pod's")
	assert.Equal(t, podUID, m.Annotations[corev1.MirrorPodAnnotationKey], "the mirror pod's annotation is the static pod's UID")

	time.Sleep(time.Until(started.Add(settle))) // not timing logic: see settle
	deleted := api.node.DeletePod(t, name)
	// Mid-drain, the mirror pod deleted with a grace of 1 s (row 720): it
	// stops no static pod, so neither the kubelet nor the drain may take it
	// for the pod's. The second only puts it after SIGTERM; nothing is timed by it.
	time.Sleep(time.Second)
	code, body, err := api.cluster.Do(realapiserver.AdminToken, http.MethodDelete, "/api/v1/namespaces/default/pods/"+mirror,
		metav1.DeleteOptions{GracePeriodSeconds: new(int64(1))})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "the mirror pod's deletion: %s", body)
	mirrorDeleted := time.Now()
	died, err := w.Wait(grace*time.Second + time.Minute)
	require.NoError(t, err)
	log := api.node.PodLog(name)
	rep := readJSON[drain.Report](t, filepath.Join(state, "last-shutdown.json"), api.node, name)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pod log:\n%s", log)
		}
	})
	b := rep.Budget
	t.Logf("from the manifest's removal: SIGTERM +%v, the mirror pod deleted with 1 s +%v, SIGKILL planned +%v, exit +%v; %v; pod_mismatch %q",
		rel(b.SIGTERM, deleted), rel(mirrorDeleted, deleted), rel(b.Kill, deleted), rel(died, deleted), rep.Preserve.Counts, rep.PodMismatch)
	assert.EqualValues(t, grace, api.kubeletGrace(t, mirror), "the kubelet stops the static pod with the manifest's grace, not the mirror's deletion's")
	assert.True(t, rep.StaticPod, "the Report says the pod is a static pod")
	assert.Empty(t, rep.PodMismatch)
	assert.NoError(t, rep.Err())
	assert.InDelta(t, grace, b.Kill.Sub(b.SIGTERM).Seconds(), 0.5, "the manifest's grace, not a force deletion's 2 s")
	assert.Equal(t, n, rep.Preserve.Counts[pause.Preserved], "%v", rep.Preserve.Counts)
	assert.Contains(t, log, "a static pod, whose deletion the API server does not show", "the read found the pod through its mirror pod")
	assert.NotContains(t, log, "before any read found its deletion", "no force deletion")
}

// forced checks what sandboxd's run sd, force-deleted at d, left against
// what the kubelet did: the kubelet's SIGKILL is the stop's grace (its
// log) after the SIGTERM sandboxd saw, and the budget must plan it no
// later; every sandbox is accounted for and the device daemon stopped
// before the exit (sandboxdRun.end).
func (a *apiPods) forced(t *testing.T, sd *sandboxdRun, d time.Time, exec bool) shorterRun {
	t.Helper()
	r := sd.end(t, d, time.Time{})
	grace := a.kubeletGrace(t, sd.name)
	b := r.rep.Budget
	kill := b.SIGTERM.Add(time.Duration(grace) * time.Second)
	t.Logf("from the force deletion: budget %s at +%v, SIGTERM +%v, the kubelet's stop gracePeriod=%d so SIGKILL by +%v, planned +%v, exit +%v; %v",
		b.Anchor, rel(b.Start, d), rel(b.SIGTERM, d), grace, rel(kill, d), rel(b.Kill, d), rel(r.died, d), r.rep.Preserve.Counts)
	// What the API server answered the pod's own token: a 401 or a 404
	// (forceDeletion), the same plan since row 1030.
	for _, line := range strings.Split(r.log, "\n") {
		if _, msg, ok := strings.Cut(line, "msg="); ok && strings.Contains(msg, "kube: API server: ") {
			t.Logf("sandboxd: msg=%.600s", msg)
		}
	}
	if exec {
		assert.Equal(t, deadline.AnchorPreStop, b.Anchor, "the hook ran and called the drain")
	}
	assert.EqualValues(t, 2, grace, "the kubelet stops the container with its 2 s minimum")
	assert.False(t, b.Kill.After(kill), "SIGKILL planned +%v, after the kubelet's +%v", rel(b.Kill, d), rel(kill, d))
	assert.True(t, r.died.Before(kill), "exit before the kubelet's SIGKILL: +%v", rel(r.died, d))
	if msg := terminationMessageIfAny(a.node, sd.name); msg != "" {
		t.Logf("termination message:\n%s", msg)
	}
	return r
}

// kubeletGrace returns the grace period of the kubelet's stop of pod
// name's container, from its log ("Killing container with a grace
// period", at --v 2), and logs the kubelet's lines of the deletion (the
// update, "SyncLoop DELETE", and the removal, "SyncLoop REMOVE") and the
// stop.
func (a *apiPods) kubeletGrace(t *testing.T, name string) int64 {
	t.Helper()
	grace := int64(-1)
	for _, line := range a.node.KubeletLog("SyncLoop DELETE", "SyncLoop REMOVE", "Killing container with a grace period") {
		if !strings.Contains(line, `"default/`+name+`"`) {
			continue
		}
		t.Logf("kubelet: %s", line)
		if _, v, ok := strings.Cut(line, "gracePeriod="); ok && grace < 0 {
			g, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			require.NoError(t, err, "%s", line)
			grace = g
		}
	}
	require.GreaterOrEqual(t, grace, int64(0), "no stop of %s in the kubelet's log", name)
	return grace
}

// rel is t - t0 rounded to the millisecond.
func rel(t, t0 time.Time) time.Duration { return t.Sub(t0).Round(time.Millisecond) }

// terminationMessageIfAny is terminationMessage, "" when the kubelet has
// removed the pod's directory already (a force-deleted pod's, once its
// container is gone).
func terminationMessageIfAny(node *Node, name string) string {
	files, _ := filepath.Glob(filepath.Join(node.Dir, "kubelet", "pods", "*", "containers", name, "*"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			return string(b)
		}
	}
	return ""
}

// sandboxdRBAC is the example's service account and Role (get on its pod,
// create on events), which the API pods of sandboxd run with, applied as
// is but for the namespace.
const sandboxdRBAC = "../../examples/sandboxd/deploy/rbac.yaml"

// startAPINode starts the real API server and the real kubelet registered
// with it, and gives the namespace default what a cluster's controllers
// would: its default service account, the kube-root-ca.crt ConfigMap, and
// the example's service account and Role for sandboxd (sandboxdRBAC).
func startAPINode(t *testing.T) *apiPods {
	kubelet := Require(t)
	cluster := realapiserver.Start(t)
	cluster.MustDo(t, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts",
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, http.StatusCreated, nil)
	cluster.PublishRootCA(t, "default")
	cluster.ApplyRBAC(t, sandboxdRBAC, "default")
	kc := filepath.Join(cluster.Dir, "kubelet.kubeconfig")
	require.NoError(t, WriteKubeconfig(kc, cluster.URL, cluster.CAFile, realapiserver.AdminToken))
	node := StartConfig(t, kubelet, Config{Kubeconfig: kc}, BuildImage(t, allBinaries...))
	require.Eventually(t, func() bool {
		code, _, err := cluster.Do(realapiserver.AdminToken, http.MethodGet, "/api/v1/nodes/"+NodeName, nil)
		return err == nil && code == http.StatusOK
	}, 2*time.Minute, 100*time.Millisecond, "the kubelet never registered its Node")
	return &apiPods{cluster: cluster, node: node}
}

// The kubelet restarted while it terminates pods (an upgrade: SIGTERM, the
// containers run on; a new kubelet with the same configuration), once for
// four pods deleted together, 4 s before it. The first preStop call ends
// with the old kubelet; the new one finds the pod terminating, runs the
// hook again and gives it the pod's whole grace again, from that second
// call: what kubeletsim.TerminateRestarted models and
// deadline.Budget.OnRestart plans for (docs/faults.md row 228). Measured
// (from each deletion; the kubelet stopped at +4.1 s, healthy at +4.5 s):
//
//   - the probe, an httpGet hook that never answers, SIGTERM ignored, 12 s:
//     the first call closed at +4.08 s, the new kubelet's at +5.49 s,
//     SIGTERM at +17.50 s (that call + 12 s), dead at +19.51 s;
//   - the probe, no hook, SIGTERM ignored, 12 s: one SIGTERM (+0.05 s),
//     dead at +19.5 s, not +12 s: the old kubelet's stop call ended with
//     it, and its SIGKILL with it (containerd's CRI StopContainer escalates
//     only while its caller waits); the new kubelet's stop sent no second
//     signal (containerd sends the stop signal once) and killed 12 s after
//     it. A drain without a hook sees nothing of the restart and keeps the
//     first SIGKILL: early, the safe side;
//   - sandboxd with the exec hook drainhook, 16 sandboxes of 1 s pauses two
//     at a time, 20 s, restarted during the hook: the budget's new run at
//     +4.72 s, SIGTERM at +12.9 s, SIGKILL expected at +24.9 s (the first
//     run's: +20 s), 16/16 preserved, exit at +21.1 s;
//   - the same with 40 sandboxes (20 s of pauses: the hook returns at
//     once), restarted during the preserve phase: the budget's new run at
//     +4.71 s, SIGKILL expected at +24.7 s; the phase preserves again past
//     its first deadline (docs/faults.md row 239): 40/40 preserved, exit at
//     +21.1 s. Before row 239, restarted at +10 s: 32 preserved, 6 not
//     started, 2 cut, exit at +16.8 s, 13.9 s before the kubelet's SIGKILL;
//   - sandboxd as a static pod, 8 sandboxes of 1 s one at a time, no hook,
//     10 s, its manifest removed with the deletions (staticRun): the new
//     kubelet has no manifest and no termination for it, an orphan; at
//     its first housekeeping (+6.4–6.6 s) it deletes the mirror pod and
//     stops the container with a grace of 1 s raised to 2 s, and 9–35 ms
//     later sandboxd is dead of SIGKILL (137), 6 of 8 paused, no Report:
//     its budget planned the manifest's +10 s.
func restart(t *testing.T, api *apiPods) {
	hang := api.startProbe(t, "probe-restart", 12, func(port int) *corev1.LifecycleHandler { return HTTPGetHook(port, "/hook") })
	quiet := api.startProbe(t, "probe-restart-nohook", 12, nil)
	inHook := api.startSandboxd(t, "sandboxd-restart", true, 16, 20)
	inPreserve := api.startSandboxd(t, "sandboxd-restart-late", true, 40, 20)
	quietShort := api.startProbe(t, "probe-restart-shorter", 12, nil)
	blind := api.startSandboxd(t, "sandboxd-restart-shorter", false, 30, 20)
	static := api.startStatic(t, "sandboxd-static-restart")
	time.Sleep(settle) // not timing logic: see settle
	// The six deleted at once, each with its pod's grace; two of them again
	// 2 s later with less.
	d := map[string]time.Time{}
	for _, p := range []struct {
		name  string
		grace int64
	}{{hang.name, hang.grace}, {quiet.name, quiet.grace}, {inHook.name, inHook.spec}, {inPreserve.name, inPreserve.spec},
		{quietShort.name, quietShort.grace}, {blind.name, blind.spec}} {
		d[p.name] = api.remove(t, p.name, p.grace)
	}
	static.remove(t, api)
	time.Sleep(2 * time.Second) // the scenario's spacing, not a timing assertion
	d2 := map[string]time.Time{quietShort.name: api.remove(t, quietShort.name, 4), blind.name: api.remove(t, blind.name, 8)}
	time.Sleep(2 * time.Second)
	stopped, healthy := api.node.RestartKubelet(t)

	t.Run("probe, httpGet hook that hangs", func(t *testing.T) {
		d1 := d[hang.name]
		hooks, term, died := hang.end(t)
		closed := probeEvent(t, hang.state, "hook-closed")
		t.Logf("from the deletion: kubelet stopped +%v, healthy +%v; hooks %v, first call closed %v, SIGTERM +%v, dead +%v",
			stopped.Sub(d1), healthy.Sub(d1), since(d1, hooks), since(d1, closed), term.Sub(d1), died.Sub(d1))
		require.Len(t, hooks, 2, "the new kubelet runs the hook again")
		require.Len(t, closed, 1, "the first call ended, the second ran until the process died")
		// The probe stamps the close when it reads it, which on loaded cores
		// can come a moment after the test saw the old kubelet exit (+0.3 ms
		// once): before the new one was healthy, it was the old one's.
		assert.True(t, closed[0].Before(healthy), "the first call closed with the old kubelet, before the new one was up: closed %v, healthy %v",
			closed[0].Sub(d1), healthy.Sub(d1))
		assert.True(t, hooks[1].After(stopped), "the second call is the new kubelet's")
		assert.InDelta(t, 12, term.Sub(hooks[1]).Seconds(), 1, "SIGTERM when the second call's whole grace ran out")
		assert.InDelta(t, 2, died.Sub(term).Seconds(), 1, "dead 2 s later")
	})
	t.Run("probe, no hook", func(t *testing.T) {
		d1 := d[quiet.name]
		hooks, term, died := quiet.end(t)
		terms := probeEvent(t, quiet.state, "term")
		t.Logf("from the deletion: kubelet stopped +%v, healthy +%v; hooks %v, SIGTERMs %v, SIGTERM +%v, dead +%v",
			stopped.Sub(d1), healthy.Sub(d1), since(d1, hooks), since(d1, terms), term.Sub(d1), died.Sub(d1))
		assert.Len(t, terms, 1, "containerd sends the stop signal once")
		assert.True(t, died.After(d1.Add(13*time.Second)), "the first stop's SIGKILL never came: +%v", died.Sub(d1))
		assert.WithinRange(t, died, stopped.Add(12*time.Second), healthy.Add(30*time.Second), "the new kubelet's stop + 12 s (the stop some moments after it is healthy)")
	})
	t.Run("probe, no hook, deleted again with less: the new kubelet kills with the new grace", func(t *testing.T) {
		d1 := d[quietShort.name]
		hooks, _, died := quietShort.end(t)
		terms := probeEvent(t, quietShort.state, "term")
		t.Logf("from the deletion: second +%v, kubelet stopped +%v, healthy +%v; SIGTERMs %v, dead +%v",
			d2[quietShort.name].Sub(d1), stopped.Sub(d1), healthy.Sub(d1), since(d1, terms), died.Sub(d1))
		assert.Empty(t, hooks)
		assert.Len(t, terms, 1, "containerd sends the stop signal once: nothing tells the container")
		assert.WithinRange(t, died, stopped.Add(4*time.Second), healthy.Add(15*time.Second), "the new kubelet's stop + 4 s")
		assert.True(t, died.Before(d1.Add(12*time.Second)), "before the first deletion's SIGKILL: +%v", died.Sub(d1))
	})
	t.Run("sandboxd, no hook, deleted again with less: the budget plans for the restart", func(t *testing.T) {
		r := blind.end(t, d[blind.name], d2[blind.name])
		t.Logf("kubelet stopped +%v, healthy +%v", stopped.Sub(r.d1), healthy.Sub(r.d1))
		assert.WithinRange(t, r.rep.Budget.Kill, r.d1.Add(8*time.Second), r.d2.Add(8*time.Second),
			"SIGKILL planned at most the new grace after the second deletion")
		assert.True(t, r.died.Before(stopped.Add(8*time.Second)), "exit before any SIGKILL of the new kubelet: +%v", r.died.Sub(r.d1))
		assert.Positive(t, r.rep.Preserve.Counts[pause.Preserved])
		assert.Contains(t, r.log, "no preStop hook tells this drain")
	})
	t.Run("sandboxd, a static pod, its manifest removed", func(t *testing.T) { static.end(t, api, stopped, healthy) })
	t.Run("sandboxd, exec hook, restarted during the hook", func(t *testing.T) {
		restarted(t, inHook.end(t, d[inHook.name], stopped), 16, stopped, healthy)
	})
	t.Run("sandboxd, exec hook, restarted during the preserve phase", func(t *testing.T) {
		r := restarted(t, inPreserve.end(t, d[inPreserve.name], stopped), 40, stopped, healthy)
		assert.True(t, r.rep.Phase(drain.PhasePreserve).Deadline.After(r.d1.Add(20*time.Second)),
			"the preserve phase's deadline moved past the first run's SIGKILL: +%v", r.rep.Phase(drain.PhasePreserve).Deadline.Sub(r.d1))
		assert.Contains(t, r.log, "the budget moved SIGKILL later during the preserve phase")
	})
}

// restarted checks sandboxd's run r with n sandboxes, deleted with 20 s,
// the kubelet restarted (stopped, then healthy again): every sandbox
// preserved, the budget's SIGKILL the new run's, the exit before it.
func restarted(t *testing.T, r shorterRun, n int, stopped, healthy time.Time) shorterRun {
	t.Helper()
	t.Logf("kubelet stopped +%v, healthy +%v; budget restart +%v",
		stopped.Sub(r.d1), healthy.Sub(r.d1), r.rep.Budget.Restart.Sub(r.d1))
	assert.Equal(t, n, r.rep.Preserve.Counts[pause.Preserved], "%v", r.rep.Preserve.Counts)
	run := r.rep.Budget.Restart
	require.False(t, run.IsZero(), "the budget saw the new run")
	assert.WithinRange(t, run, stopped, healthy.Add(30*time.Second), "the new kubelet's call")
	assert.WithinRange(t, r.rep.Budget.Kill, run.Add(19*time.Second), run.Add(21*time.Second), "SIGKILL the new run's")
	assert.True(t, r.died.Before(r.rep.Budget.Kill), "exit before the kubelet's SIGKILL")
	return r
}

// since returns each of ts after t0.
func since(t0 time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(t0).Round(time.Millisecond)
	}
	return out
}

// apiPods runs pods on node through cluster's API.
type apiPods struct {
	cluster *realapiserver.Cluster
	node    *Node
}

// create binds pod to the Node and creates it through the API. A pod
// with no service account (the probes) mounts no token.
func (a *apiPods) create(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pod.Spec.NodeName = NodeName
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.AutomountServiceAccountToken = new(false)
	}
	a.cluster.MustDo(t, http.MethodPost, "/api/v1/namespaces/default/pods", pod, http.StatusCreated, nil)
}

// deleteAgain returns a second deletion of pod name with a grace of grace
// seconds, for probe and sandboxd.
func (a *apiPods) deleteAgain(name string, grace int64) func(t *testing.T) time.Time {
	return func(t *testing.T) time.Time { return a.remove(t, name, grace) }
}

// remove deletes pod name with a grace of grace seconds, as `kubectl
// delete pod NAME --grace-period=N` does, and returns when it was sent.
func (a *apiPods) remove(t *testing.T, name string, grace int64) time.Time {
	t.Helper()
	sent := time.Now()
	a.cluster.MustDo(t, http.MethodDelete, "/api/v1/namespaces/default/pods/"+name,
		&metav1.DeleteOptions{GracePeriodSeconds: &grace}, http.StatusOK, nil)
	return sent
}

// probe runs podbin's probe (SIGTERM ignored; hook, when not nil, made
// for its port) as an API pod with grace, deletes it with grace, after gap
// does then (a second deletion, a kubelet restart), and returns the
// deletion, when then acted, the hook calls, SIGTERM and the death.
func (a *apiPods) probe(t *testing.T, name string, grace int64, gap time.Duration,
	hook func(port int) *corev1.LifecycleHandler, then func(t *testing.T) time.Time) (d1, d2 time.Time, hooks []time.Time, term, died time.Time) {
	t.Helper()
	p := a.startProbe(t, name, grace, hook)
	time.Sleep(settle) // not timing logic: see settle
	d1 = a.remove(t, name, grace)
	time.Sleep(gap) // the scenario's spacing, not a timing assertion
	d2 = then(t)
	hooks, term, died = p.end(t)
	return d1, d2, hooks, term, died
}

// A probeRun is podbin's probe running as an API pod.
type probeRun struct {
	a     *apiPods
	name  string
	state string // its state directory, where its events are
	grace int64
	// exited is closed once the process has exited (died; err if it did
	// not). The wait starts with the probe: Watch.Wait stamps the exit
	// when it sees it, and a probe ended after another's death was stamped
	// then (before, "dead +19.6 s" for one that died at +10.8 s).
	exited chan struct{}
	died   time.Time
	err    error
}

// startProbe creates podbin's probe (SIGTERM ignored; hook, when not nil,
// made for its port) as an API pod with grace and returns once it is
// ready.
func (a *apiPods) startProbe(t *testing.T, name string, grace int64, hook func(port int) *corev1.LifecycleHandler) *probeRun {
	t.Helper()
	p := &probeRun{a: a, name: name, state: filepath.Join(a.node.Dir, "state-"+name), grace: grace}
	port, err := freePort()
	require.NoError(t, err)
	var h *corev1.LifecycleHandler
	if hook != nil {
		h = hook(port)
	}
	token := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	a.create(t, Pod(name, grace, p.state, h, "/podbin", "probe", "-listen", fmt.Sprintf("127.0.0.1:%d", port),
		"-events", StateMount+"/events", "-hook", "hang", "-term", "ignore", "-token", token))
	w, err := WatchProcess(WaitProcess(t, token, 2*time.Minute))
	require.NoError(t, err)
	p.exited = make(chan struct{})
	go func() {
		defer close(p.exited)
		p.died, p.err = w.Wait(time.Duration(grace)*time.Second + 2*time.Minute)
	}()
	require.Eventually(t, func() bool { _, ok := readEvents(t, p.state)["ready"]; return ok }, time.Minute, 20*time.Millisecond)
	return p
}

// end waits for the probe's death and returns its hook calls, its first
// SIGTERM and the death.
func (p *probeRun) end(t *testing.T) (hooks []time.Time, term, died time.Time) {
	t.Helper()
	<-p.exited
	require.NoError(t, p.err, "pod log:\n%s", p.a.node.PodLog(p.name))
	hooks, term = probeEvents(t, p.state)
	return hooks, term, p.died
}

// probeEvent reads every time of event what from podbin probe's events
// file in state.
func probeEvent(t *testing.T, state, what string) []time.Time {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(state, "events"))
	require.NoError(t, err)
	var out []time.Time
	for _, line := range strings.Split(string(data), "\n") {
		w, at, _ := strings.Cut(line, " ")
		if ns, err := strconv.ParseInt(at, 10, 64); err == nil && w == what {
			out = append(out, time.Unix(0, ns))
		}
	}
	return out
}

// probeEvents reads every hook call and the first SIGTERM from podbin
// probe's events file.
func probeEvents(t *testing.T, state string) (hooks []time.Time, term time.Time) {
	t.Helper()
	terms := probeEvent(t, state, "term")
	require.NotEmpty(t, terms, "no SIGTERM in the probe's events")
	return probeEvent(t, state, "hook"), terms[0]
}

// A shorterRun is what sandboxd left of a termination with two deletions.
type shorterRun struct {
	d1, d2, died time.Time
	rep          *drain.Report
	log          string
}

// sandboxd runs examples/sandboxd as an API pod reading its own pod
// (-pod, with its own token: boundServiceAccount) with
// n sandboxes of 1 s pauses, two at a time (one without a hook), the
// exec hook drainhook when exec, deletes it with grace1, after gap does
// then unless it is nil (a second deletion, a kubelet restart), and
// returns what it left. Every sandbox must be accounted for, and its
// device daemon stopped on its own.
func (a *apiPods) sandboxd(t *testing.T, name string, exec bool, n int, spec, grace1 int64, gap time.Duration, then func(t *testing.T) time.Time) shorterRun {
	t.Helper()
	sd := a.startSandboxd(t, name, exec, n, spec)
	time.Sleep(settle) // not timing logic: see settle
	d1 := a.remove(t, name, grace1)
	var d2 time.Time
	if then != nil {
		time.Sleep(gap) // the scenario's spacing, not a timing assertion
		d2 = then(t)
	}
	return sd.end(t, d1, d2)
}

// A sandboxdRun is examples/sandboxd running as an API pod.
type sandboxdRun struct {
	a     *apiPods
	name  string
	state string
	n     int
	spec  int64
	// exited is closed once the process has exited (died; err if it did
	// not) and its log is read (log): at once, for once the API server
	// removes the deleted pod the kubelet removes its log too.
	exited chan struct{}
	died   time.Time
	err    error
	log    string
}

// startSandboxd creates sandboxd as an API pod (see sandboxd) and returns
// once its n sandboxes run.
func (a *apiPods) startSandboxd(t *testing.T, name string, exec bool, n int, spec int64) *sandboxdRun {
	t.Helper()
	sd := &sandboxdRun{a: a, name: name, state: filepath.Join(a.node.Dir, "state-"+name), n: n, spec: spec}
	listen, hookListen := freeAddr(t), freeAddr(t)
	c := sandboxdCase{grace: spec, sandboxes: n, pause: time.Second, concurrency: 1}
	var hook *corev1.LifecycleHandler
	if exec {
		hook, c.concurrency = ExecHook("/drainhook", "-url", "http://"+hookListen+"/drain"), 2
	}
	pod := Pod(name, spec, sd.state, hook, append(sandboxdCommand(listen, hookListen, c), "-pod", name)...)
	// Its UID from the Downward API, as sandboxd's DaemonSet gives it.
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: drain.EnvPodUID,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}
	a.boundServiceAccount(t, pod)
	a.create(t, pod)
	pid := WaitProcess(t, "-listen "+listen, 2*time.Minute)
	w, err := WatchProcess(pid)
	require.NoError(t, err)
	requireBoundToken(t, pid, name)
	base := "http://" + listen
	waitHTTP(t, base+"/healthz", a.node, name)
	for range n {
		createSandbox(t, base, `{"timeout_s": 86400}`)
	}
	sd.exited = make(chan struct{})
	go func() {
		defer close(sd.exited)
		sd.died, sd.err = w.Wait(time.Duration(spec)*time.Second + 2*time.Minute)
		sd.log = a.node.PodLog(name)
	}()
	return sd
}

// end waits for sandboxd's exit after its deletion at d1 (and a second
// action at d2, zero for none) and returns what it left. Every sandbox must
// be accounted for, and its device daemon stopped on its own.
func (sd *sandboxdRun) end(t *testing.T, d1, d2 time.Time) shorterRun {
	t.Helper()
	<-sd.exited
	require.NoError(t, sd.err)
	r := shorterRun{d1: d1, d2: d2, died: sd.died, log: sd.log}
	_, err := os.Stat(filepath.Join(sd.state, "last-shutdown.json"))
	require.NoError(t, err, "no Report; exit +%v; the pod's log, read at its exit:\n%s", rel(r.died, d1), r.log)
	r.rep = readJSON[drain.Report](t, filepath.Join(sd.state, "last-shutdown.json"), sd.a.node, sd.name)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pod log:\n%s", r.log)
		}
	})
	t0 := r.d1
	second := "none"
	if !r.d2.IsZero() {
		second = "+" + r.d2.Sub(t0).Round(time.Millisecond).String()
	}
	t.Logf("from the first deletion: second %s, budget T0 +%v, SIGTERM +%v, SIGKILL expected +%v, exit +%v; %v",
		second, r.rep.Budget.Start.Sub(t0).Round(time.Millisecond),
		r.rep.Budget.SIGTERM.Sub(t0).Round(time.Millisecond), r.rep.Budget.Kill.Sub(t0).Round(time.Millisecond),
		r.died.Sub(t0).Round(time.Millisecond), r.rep.Preserve.Counts)
	total := 0
	for _, k := range r.rep.Preserve.Counts {
		total += k
	}
	assert.Equal(t, sd.n, total, "every sandbox accounted for: %v", r.rep.Preserve.Counts)
	assertDaemonStopped(t, filepath.Join(sd.state, "ublkd.events"))
	assert.Positive(t, r.rep.Headroom, "the Report says it ended before the expected SIGKILL")
	return r
}

// boundServiceAccount runs pod as a pod of sandboxd's DaemonSet runs: as
// the example's service account (sandboxdRBAC), whose token the kubelet
// mounts at kube.ServiceAccountDir in the kube-api-access volume the API
// server's ServiceAccount admission adds: a projected token its token
// manager asks the API server for (a TokenRequest bound to the pod's name
// and UID), beside kube-root-ca.crt's ca.crt and the namespace. Only
// KUBERNETES_SERVICE_HOST/PORT are the test's: the kubelet would name the
// kubernetes Service's cluster IP, which nothing routes here (no
// kube-proxy), so they name the API server's loopback address (the pod
// has the host's network); a container's own env wins over the kubelet's.
func (a *apiPods) boundServiceAccount(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pod.Spec.ServiceAccountName = "sandboxd"
	serviceEnv(pod, a.apiURL(t))
}

// apiURL is the API server's URL, which the pods here reach on loopback.
func (a *apiPods) apiURL(t *testing.T) *url.URL {
	t.Helper()
	u, err := url.Parse(a.cluster.URL)
	require.NoError(t, err)
	return u
}

// requireBoundToken fails the test unless the token the process pid reads
// at kube.ServiceAccountDir is the kubelet's projected one, bound to the
// API server's pod name (its kubernetes.io claims: the pod's name and UID,
// the service account sandboxd), not a token the test wrote.
func requireBoundToken(t *testing.T, pid int, name string) {
	t.Helper()
	token, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s/token", pid, kube.ServiceAccountDir))
	require.NoError(t, err, "the container's service account token")
	parts := strings.Split(string(token), ".")
	require.Len(t, parts, 3, "the container's token is no JWT: %.20q", token)
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims struct {
		Exp int64 `json:"exp"`
		K8s struct {
			Pod            struct{ Name, UID string } `json:"pod"`
			ServiceAccount struct{ Name string }      `json:"serviceaccount"`
		} `json:"kubernetes.io"`
	}
	require.NoError(t, json.Unmarshal(payload, &claims), "%s", payload)
	require.Equal(t, name, claims.K8s.Pod.Name, "the token is bound to the pod: %s", payload)
	require.NotEmpty(t, claims.K8s.Pod.UID, "the token is bound to the pod's UID: %s", payload)
	require.Equal(t, "sandboxd", claims.K8s.ServiceAccount.Name, "%s", payload)
}

// adminServiceAccount gives pod the admin's token and the API server's CA
// on a hostPath (mountServiceAccount), for a static pod: the kubelet
// mounts no service account token into one (the API server refuses a
// mirror pod that names a service account, and a token bound to the
// static pod's UID, which the API server never had).
func (a *apiPods) adminServiceAccount(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	dir := filepath.Join(a.node.Dir, "sa-"+pod.Name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ca, err := os.ReadFile(a.cluster.CAFile)
	require.NoError(t, err)
	for file, data := range map[string]string{"token": realapiserver.AdminToken, "ca.crt": string(ca), "namespace": "default\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(data), 0o644))
	}
	mountServiceAccount(pod, dir, a.apiURL(t))
}
