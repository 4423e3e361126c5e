//go:build linux

package realkubelet

import (
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

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/realapiserver"
	"github.com/drainkit/drainkit/pause"
)

// The real kubelet with the real kube-apiserver (internal/realapiserver):
// its pods are created and deleted through the API, as in a cluster, which
// shows what no static pod can: a second, shorter deletion, and a kubelet
// restarted while it terminates a pod (last: it restarts the Node's kubelet).
//
// The API server's build comes after the kubelet's in .ci/run, so this
// test runs after the suite, with the real API server's tests.
func TestRealKubeletWithAPIServer(t *testing.T) {
	api := startAPINode(t)
	t.Run("shorter deletion", func(t *testing.T) { shorterDeletion(t, api) })
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
//     at a time; 4 s later deleted with 8 s: all 16 preserved, the device
//     daemon stopped, exit before the first deletion + 20 s;
//   - sandboxd without a hook, its manifest's 20 s, deleted once with 8 s:
//     SIGTERM's read of the pod lands after the preserve phase began, and
//     the phase follows it (row 235): exit before the deletion + 8 s, the
//     device daemon stopped, what did not fit reported.
func shorterDeletion(t *testing.T, api *apiPods) {

	t.Run("probe, no hook: the kubelet keeps the first grace", func(t *testing.T) {
		d1, d2, hooks, term, died := api.probe(t, "probe-nohook", 12, 2*time.Second, nil, api.deleteAgain("probe-nohook", 4))
		t.Logf("from the first deletion: second +%v, SIGTERM +%v, dead +%v; hooks %v", d2.Sub(d1), term.Sub(d1), died.Sub(d1), hooks)
		assert.Empty(t, hooks)
		assert.InDelta(t, 12, died.Sub(d1).Seconds(), 1, "dead at the first deletion's grace")
	})
	t.Run("probe, httpGet hook that hangs: one call, the first grace", func(t *testing.T) {
		d1, d2, hooks, term, died := api.probe(t, "probe-hang", 12, 2*time.Second, func(port int) *corev1.LifecycleHandler {
			return HTTPGetHook(port, "/hook")
		}, api.deleteAgain("probe-hang", 4))
		t.Logf("from the first deletion: second +%v, hooks %v, SIGTERM +%v, dead +%v", d2.Sub(d1), hooks, term.Sub(d1), died.Sub(d1))
		assert.Len(t, hooks, 1, "the hook is not run again")
		assert.InDelta(t, 12, term.Sub(d1).Seconds(), 1, "SIGTERM when the first call's 12 s ran out")
		assert.InDelta(t, 14, died.Sub(d1).Seconds(), 1, "dead 2 s later")
	})
	t.Run("sandboxd, exec hook: the budget keeps the first deletion's grace", func(t *testing.T) {
		r := api.sandboxd(t, "sandboxd-exec2", true, 16, 20, 20, 4*time.Second, api.deleteAgain("sandboxd-exec2", 8))
		assert.Equal(t, 16, r.rep.Preserve.Counts[pause.Preserved], "%v", r.rep.Preserve.Counts)
		assert.True(t, r.rep.Budget.Restart.IsZero(), "no new run")
		assert.WithinRange(t, r.rep.Budget.Kill, r.d1.Add(19*time.Second), r.d1.Add(21*time.Second), "the first deletion's SIGKILL")
		assert.True(t, r.died.Before(r.d1.Add(20*time.Second)), "exit before the kubelet's SIGKILL")
		assert.Contains(t, r.log, "a second deletion shortened the pod's grace")
	})
	t.Run("sandboxd, no hook, deleted with less than the spec's grace", func(t *testing.T) {
		r := api.sandboxd(t, "sandboxd-short", false, 16, 20, 8, 0, nil)
		assert.True(t, r.died.Before(r.d1.Add(8*time.Second)), "exit before the kubelet's SIGKILL, the deletion + 8 s: +%v", r.died.Sub(r.d1))
		assert.WithinRange(t, r.rep.Budget.Kill, r.d1.Add(7*time.Second), r.d1.Add(8*time.Second), "the deletion's SIGKILL")
		assert.Positive(t, r.rep.Preserve.Counts[pause.Preserved])
	})
	t.Run("sandboxd, no hook: the budget keeps the first deletion's grace", func(t *testing.T) {
		r := api.sandboxd(t, "sandboxd-nohook2", false, 16, 20, 20, 4*time.Second, api.deleteAgain("sandboxd-nohook2", 8))
		assert.Equal(t, 16, r.rep.Preserve.Counts[pause.Preserved], "%v", r.rep.Preserve.Counts)
		assert.True(t, r.died.Before(r.d1.Add(20*time.Second)), "exit before the kubelet's SIGKILL: +%v", r.died.Sub(r.d1))
		if strings.Contains(r.log, "SIGTERM during the shutdown") {
			t.Logf("the runtime sent SIGTERM again")
		}
	})
}

// startAPINode starts the real API server and the real kubelet registered
// with it.
func startAPINode(t *testing.T) *apiPods {
	kubelet := Require(t)
	cluster := realapiserver.Start(t)
	cluster.MustDo(t, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts",
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, http.StatusCreated, nil)
	kc := filepath.Join(cluster.Dir, "kubelet.kubeconfig")
	require.NoError(t, WriteKubeconfig(kc, cluster.URL, cluster.CAFile, realapiserver.AdminToken))
	node := StartConfig(t, kubelet, Config{Kubeconfig: kc}, BuildImage(t, allBinaries...))
	require.Eventually(t, func() bool {
		code, _, err := cluster.Do(realapiserver.AdminToken, http.MethodGet, "/api/v1/nodes/"+NodeName, nil)
		return err == nil && code == http.StatusOK
	}, 2*time.Minute, 100*time.Millisecond, "the kubelet never registered its Node")
	return &apiPods{cluster: cluster, node: node}
}

// The kubelet restarted while it terminates a pod (an upgrade: SIGTERM,
// the containers run on; a new kubelet with the same configuration). The
// first preStop call ends with the old kubelet; the new one finds the pod
// terminating, runs the hook again and gives it the pod's whole grace
// again, from that second call: what kubeletsim.TerminateRestarted models
// and deadline.Budget.OnRestart plans for (docs/faults.md row 228).
// Measured (from the deletion):
//
//   - the probe, an httpGet hook that never answers, SIGTERM ignored,
//     deleted with 12 s, the kubelet restarted at +4 s: the first call
//     closed at +4.02 s, the new kubelet healthy at +4.5 s and calling the
//     hook at +5.4 s, SIGTERM at that call + 12 s, dead 2 s later (with
//     20 s: +5.39 s, +25.39 s, +27.41 s);
//   - sandboxd with the exec hook drainhook, 16 sandboxes of 1 s pauses two
//     at a time, deleted with 20 s, the kubelet restarted at +4 s: the
//     budget's new run at +4.66 s, SIGTERM at +12.9 s, SIGKILL expected at
//     +24.9 s (the first run's would have been +20 s), all 16 preserved,
//     exit at +21.06 s;
//   - sandboxd with drainhook, 40 sandboxes (20 s of pauses two at a
//     time, more than the grace holds: the hook returns at once), deleted
//     with 20 s, the kubelet restarted at +10 s, during the preserve phase:
//     the budget's new run at +10.66 s, SIGKILL expected at +30.66 s; the
//     phase preserves again past its first deadline (docs/faults.md row
//     239): 40/40 preserved, exit at +20.9 s (before: 32 preserved, 6 not
//     started, 2 cut, exit at +16.8 s, 13.9 s before the kubelet's SIGKILL);
//   - the probe, no hook, SIGTERM ignored, deleted with 12 s, the kubelet
//     restarted at +4.08 s: one SIGTERM (+0.03 s), dead at +17.4 s: the
//     old kubelet's stop call ended with it, and its SIGKILL with it
//     (containerd's CRI StopContainer escalates only while its caller
//     waits); the new kubelet's stop sent no second signal (containerd
//     sends the stop signal once) and killed 12 s after it. A drain
//     without a hook sees nothing of the restart and keeps the first
//     SIGKILL: early, the safe side.
func restart(t *testing.T, api *apiPods) {
	t.Run("probe, httpGet hook that hangs", func(t *testing.T) {
		var stopped, healthy time.Time
		d1, _, hooks, term, died := api.probe(t, "probe-restart", 12, 4*time.Second, func(port int) *corev1.LifecycleHandler {
			return HTTPGetHook(port, "/hook")
		}, func(t *testing.T) time.Time {
			stopped, healthy = api.node.RestartKubelet(t)
			return stopped
		})
		closed := probeEvent(t, filepath.Join(api.node.Dir, "state-probe-restart"), "hook-closed")
		t.Logf("from the deletion: kubelet stopped +%v, healthy +%v; hooks %v, first call closed %v, SIGTERM +%v, dead +%v",
			stopped.Sub(d1), healthy.Sub(d1), since(d1, hooks), since(d1, closed), term.Sub(d1), died.Sub(d1))
		require.Len(t, hooks, 2, "the new kubelet runs the hook again")
		require.Len(t, closed, 1, "the first call ended, the second ran until the process died")
		assert.False(t, closed[0].After(stopped), "the first call closed with the old kubelet")
		assert.True(t, hooks[1].After(stopped), "the second call is the new kubelet's")
		assert.InDelta(t, 12, term.Sub(hooks[1]).Seconds(), 1, "SIGTERM when the second call's whole grace ran out")
		assert.InDelta(t, 2, died.Sub(term).Seconds(), 1, "dead 2 s later")
	})
	t.Run("sandboxd, exec hook", func(t *testing.T) {
		api.sandboxdRestarted(t, "sandboxd-restart", 16, 4*time.Second)
	})
	t.Run("sandboxd, exec hook, restarted after SIGTERM", func(t *testing.T) {
		r := api.sandboxdRestarted(t, "sandboxd-restart-late", 40, 10*time.Second)
		assert.True(t, r.rep.Phase(drain.PhasePreserve).Deadline.After(r.d1.Add(20*time.Second)),
			"the preserve phase's deadline moved past the first run's SIGKILL: +%v", r.rep.Phase(drain.PhasePreserve).Deadline.Sub(r.d1))
		assert.True(t, r.died.Before(r.rep.Budget.Kill), "exit before the kubelet's SIGKILL")
		assert.Contains(t, r.log, "the budget moved SIGKILL later during the preserve phase")
	})
	t.Run("probe, no hook", func(t *testing.T) {
		var stopped, healthy time.Time
		d1, _, hooks, term, died := api.probe(t, "probe-restart-nohook", 12, 4*time.Second, nil, func(t *testing.T) time.Time {
			stopped, healthy = api.node.RestartKubelet(t)
			return stopped
		})
		terms := probeEvent(t, filepath.Join(api.node.Dir, "state-probe-restart-nohook"), "term")
		t.Logf("from the deletion: kubelet stopped +%v, healthy +%v; hooks %v, SIGTERMs %v, SIGTERM +%v, dead +%v",
			stopped.Sub(d1), healthy.Sub(d1), since(d1, hooks), since(d1, terms), term.Sub(d1), died.Sub(d1))
		assert.Len(t, terms, 1, "containerd sends the stop signal once")
		assert.True(t, died.After(d1.Add(13*time.Second)), "the first stop's SIGKILL never came: +%v", died.Sub(d1))
		assert.WithinRange(t, died, stopped.Add(12*time.Second), healthy.Add(30*time.Second), "the new kubelet's stop + 12 s (the stop some moments after it is healthy)")
	})
}

// sandboxdRestarted runs sandboxd with drainhook and n sandboxes, deletes
// it with 20 s and restarts the kubelet after gap: every sandbox must be
// preserved, the budget's SIGKILL the new run's, the exit before it.
func (a *apiPods) sandboxdRestarted(t *testing.T, name string, n int, gap time.Duration) shorterRun {
	t.Helper()
	var stopped, healthy time.Time
	r := a.sandboxd(t, name, true, n, 20, 20, gap, func(t *testing.T) time.Time {
		stopped, healthy = a.node.RestartKubelet(t)
		return stopped
	})
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

// create binds pod to the Node and creates it through the API.
func (a *apiPods) create(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pod.Spec.NodeName = NodeName
	pod.Spec.AutomountServiceAccountToken = new(false)
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
	state := filepath.Join(a.node.Dir, "state-"+name)
	port, err := freePort()
	require.NoError(t, err)
	var h *corev1.LifecycleHandler
	if hook != nil {
		h = hook(port)
	}
	token := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	a.create(t, Pod(name, grace, state, h, "/podbin", "probe", "-listen", fmt.Sprintf("127.0.0.1:%d", port),
		"-events", StateMount+"/events", "-hook", "hang", "-term", "ignore", "-token", token))
	w, err := WatchProcess(WaitProcess(t, token, 2*time.Minute))
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := readEvents(t, state)["ready"]; return ok }, time.Minute, 20*time.Millisecond)
	time.Sleep(settle) // not timing logic: see settle
	d1 = a.remove(t, name, grace)
	time.Sleep(gap) // the scenario's spacing, not a timing assertion
	d2 = then(t)
	died, err = w.Wait(time.Duration(grace)*time.Second + time.Minute)
	require.NoError(t, err, "pod log:\n%s", a.node.PodLog(name))
	hooks, term = probeEvents(t, state)
	return d1, d2, hooks, term, died
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
// (-pod, as admin: internal/realapiserver proves the Role elsewhere) with
// n sandboxes of 1 s pauses, two at a time (one without a hook), the
// exec hook drainhook when exec, deletes it with grace1, after gap does
// then unless it is nil (a second deletion, a kubelet restart), and
// returns what it left. Every sandbox must be accounted for, and its
// device daemon stopped on its own.
func (a *apiPods) sandboxd(t *testing.T, name string, exec bool, n int, spec, grace1 int64, gap time.Duration, then func(t *testing.T) time.Time) shorterRun {
	t.Helper()
	state := filepath.Join(a.node.Dir, "state-"+name)
	listen, hookListen := freeAddr(t), freeAddr(t)
	c := sandboxdCase{grace: spec, sandboxes: n, pause: time.Second, concurrency: 1}
	var hook *corev1.LifecycleHandler
	if exec {
		hook, c.concurrency = ExecHook("/drainhook", "-url", "http://"+hookListen+"/drain"), 2
	}
	pod := Pod(name, spec, state, hook, append(sandboxdCommand(listen, hookListen, c), "-pod", name)...)
	a.serviceAccount(t, pod)
	a.create(t, pod)
	w, err := WatchProcess(WaitProcess(t, "-listen "+listen, 2*time.Minute))
	require.NoError(t, err)
	base := "http://" + listen
	waitHTTP(t, base+"/healthz", a.node, name)
	for range n {
		createSandbox(t, base, `{"timeout_s": 86400}`)
	}
	time.Sleep(settle) // not timing logic: see settle
	var r shorterRun
	r.d1 = a.remove(t, name, grace1)
	if then != nil {
		time.Sleep(gap) // the scenario's spacing, not a timing assertion
		r.d2 = then(t)
	}
	r.died, err = w.Wait(time.Duration(spec)*time.Second + time.Minute)
	require.NoError(t, err)
	r.log = a.node.PodLog(name)
	r.rep = readJSON[drain.Report](t, filepath.Join(state, "last-shutdown.json"), a.node, name)
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
	assert.Equal(t, n, total, "every sandbox accounted for: %v", r.rep.Preserve.Counts)
	events, err := os.ReadFile(filepath.Join(state, "ublkd.events"))
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(events), "exit\n"), "the device daemon stopped on its own: %q", events)
	assert.Positive(t, r.rep.Headroom, "the Report says it ended before the expected SIGKILL")
	return r
}

// serviceAccount gives pod the admin's token and the API server's CA
// (mountServiceAccount).
func (a *apiPods) serviceAccount(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	dir := filepath.Join(a.node.Dir, "sa-"+pod.Name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ca, err := os.ReadFile(a.cluster.CAFile)
	require.NoError(t, err)
	for file, data := range map[string]string{"token": realapiserver.AdminToken, "ca.crt": string(ca), "namespace": "default\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(data), 0o644))
	}
	u, err := url.Parse(a.cluster.URL)
	require.NoError(t, err)
	mountServiceAccount(pod, dir, u)
}
