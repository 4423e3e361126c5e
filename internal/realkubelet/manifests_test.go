//go:build linux

package realkubelet

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/realapiserver"
	"github.com/drainkit/drainkit/pause"
)

// readme is the README whose Kubernetes manifest readmeManifest runs.
const readme = "../../README.md"

// The README's Kubernetes manifest, read from the README itself and run as
// written through the API server, so that the two cannot drift: its env
// (DRAINKIT_GRACE, POD_NAME, POD_UID, DRAINKIT_KUBELET_GRACE,
// DRAINKIT_PRESERVE_ESTIMATE, DRAINKIT_SANDBOX_TIMEOUT, POD_IP,
// DRAINKIT_HOOK_LISTEN on $(POD_IP), DRAINKIT_HOOK_SECRET from the Secret
// drainkit-hook), its service account with the Role the README names
// (examples/sandboxd/deploy/rbac.yaml), its preStop hook (the httpGet to
// /drain on the pod's address with the secret in its header, or the exec
// hook drainhook the comment offers instead) and its readinessProbe, in
// front of podbin's server, which is wired as the README's "Wire it" is
// (drain.NewServer, configured by that environment alone).
//
// What the test changes, each because this node is not a cluster's: the
// grace (3600 s here would be an hour's test) in both places the README
// states it, equal there; the server's image and command (the README's
// block has neither: it is the user's server); hostNetwork (no CNI here:
// status.podIP is the node's address, on which the server then listens);
// the header's placeholder "the same secret", which the server refuses,
// for the Secret's value; a hostPath for the server's Report;
// KUBERNETES_SERVICE_HOST/PORT (boundServiceAccount says why); and the
// httpGet hook's host, the pod's address, which the runtime reports for a
// pod on a pod network and not for one on the node's (the third case).
//
// The pod must become ready through the README's probe, the hook reach
// the drain through the pod's address, the pod reader read the pod and
// post its Events with no 403 (before the README named the service
// account, the pod ran as "default", which the Role does not bind: the
// reads and Events were refused, the deletionTimestamp never read), every
// sandbox be preserved and the server exit 0 before SIGKILL.
func readmeManifest(t *testing.T, api *apiPods) {
	hookSecret := newHookSecret(t)
	api.cluster.MustDo(t, http.MethodPost, "/api/v1/namespaces/default/secrets", &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "drainkit-hook"},
		StringData: map[string]string{"secret": hookSecret},
	}, http.StatusCreated, nil)

	// On a pod network the kubelet calls an httpGet hook without host at
	// the pod's address, which the runtime reports; here, with no CNI, the
	// pod has the node's network, for which the runtime reports none
	// (below), so host names that address, the one POD_IP gives the server.
	t.Run("httpGet hook", func(t *testing.T) {
		pod := readmePod(t, api, "readme-httpget", hookSecret)
		pod.Spec.Containers[0].Lifecycle.PreStop.HTTPGet.Host = api.nodeAddress(t)
		var log string
		rep, _ := api.runManifestPod(t, pod, readmeRun(api, pod, &log))
		require.NotNil(t, rep.PreStop, "the kubelet's httpGet reached the drain on the pod's address, its header the Secret's value")
		assert.Contains(t, log, "reaches the hook: the drain starts at its call", "the start read the hook from the pod's spec")
	})
	t.Run("exec hook drainhook", func(t *testing.T) {
		pod := readmePod(t, api, "readme-exec", hookSecret)
		pod.Spec.Containers[0].Lifecycle.PreStop = readmeExecHook(t)
		var log string
		rep, _ := api.runManifestPod(t, pod, readmeRun(api, pod, &log))
		require.NotNil(t, rep.PreStop, "drainhook reached the drain at DRAINKIT_HOOK_LISTEN with DRAINKIT_HOOK_SECRET, both from the container's environment")
		assert.Contains(t, log, "the preStop hook runs drainhook")
	})
	// An exec hook that calls something else than the drain, as the
	// seed's loop on GET /sandboxes does (this image has no shell: a
	// command of podbin's that exits at once): for the kubelet a hook like
	// any other, and the drain starts only at SIGTERM. The start said
	// nothing of it; it now says so, from the pod's spec (row 3581).
	t.Run("exec hook that never calls the drain: said at start", func(t *testing.T) {
		pod := readmePod(t, api, "readme-execother", hookSecret)
		pod.Spec.Containers[0].Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/podbin", "probe"}}}
		var log string
		rep, _ := api.runManifestPod(t, pod, readmeRun(api, pod, &log))
		assert.Nil(t, rep.PreStop, "the hook reached the drain")
		assert.Equal(t, rep.Budget.Start, rep.Budget.SIGTERM, "T0 is SIGTERM")
		assert.Contains(t, log, "calls neither drainhook nor GET /drain")
		assert.Contains(t, log, "/podbin probe")
	})
	// A manifest whose httpGet hook names the server's own port, the
	// readiness probe's, where the hook's (DRAINKIT_HOOK_LISTEN) was
	// meant: the kubelet's GET /drain gets the server's 404, which it
	// takes for the hook's end (it checks no status: no FailedPreStopHook,
	// no line in its log), it sends SIGTERM at once, and the drain starts
	// there with no preStop wait. Nothing said so, the server's log
	// neither (docs/faults.md row 3521); it now names the hook's address.
	t.Run("httpGet hook on the server's own port: said in its log", func(t *testing.T) {
		pod := readmePod(t, api, "readme-ownport", hookSecret)
		c := &pod.Spec.Containers[0]
		c.Lifecycle.PreStop.HTTPGet.Host = api.nodeAddress(t)
		c.Lifecycle.PreStop.HTTPGet.Port = c.ReadinessProbe.HTTPGet.Port
		var log string
		rep, hooks := api.runManifestPod(t, pod, readmeRun(api, pod, &log))
		assert.Nil(t, rep.PreStop, "the hook reached the drain")
		assert.Equal(t, rep.Budget.Start, rep.Budget.SIGTERM, "T0 is SIGTERM")
		assert.Empty(t, hooks, "the kubelet took the server's 404 for the hook's end: nothing in its log")
		assert.Contains(t, log, "the kubelet's preStop hook came to the server's own address")
		assert.Contains(t, log, drain.EnvHookListen)
		assert.Contains(t, log, "never reaches the drain: its port 8080 is the server's own", "said at start, from the pod's spec (row 3580)")
	})
	// The hook's port with another path: the hook listener's 404, the same
	// silence (row 3523).
	t.Run("httpGet hook at another path: said in its log", func(t *testing.T) {
		pod := readmePod(t, api, "readme-path", hookSecret)
		get := pod.Spec.Containers[0].Lifecycle.PreStop.HTTPGet
		get.Host, get.Path = api.nodeAddress(t), "/prestop"
		var log string
		rep, hooks := api.runManifestPod(t, pod, readmeRun(api, pod, &log))
		assert.Nil(t, rep.PreStop, "the hook reached the drain")
		assert.Empty(t, hooks, "the kubelet took the 404 for the hook's end: nothing in its log")
		assert.Contains(t, log, "the kubelet's preStop hook came to the hook's address at another path")
		assert.Contains(t, log, "path=/prestop")
	})
	// What the README says of a pod with hostNetwork: true. The kubelet
	// v1.34.4 takes an httpGet hook's host, when none is given, from the
	// runtime's pod sandbox status, which has no address for a pod on the
	// node's network (kubernetes/kubernetes#134285): the hook fails at
	// once ("failed to find networking container"), FailedPreStopHook, and
	// SIGTERM comes with no preStop call. The drain then starts at SIGTERM,
	// without the preStop wait.
	t.Run("httpGet hook without host on the node's network: never called", func(t *testing.T) {
		pod := readmePod(t, api, "readme-hostnet", hookSecret)
		var log string
		rep, hooks := api.runManifestPod(t, pod, readmeRun(api, pod, &log))
		assert.Nil(t, rep.PreStop, "the kubelet called the hook")
		assert.Equal(t, rep.Budget.Start, rep.Budget.SIGTERM, "T0 is SIGTERM")
		assert.Contains(t, strings.Join(hooks, "\n"), "failed to find networking container")
		// Said at start now, from the pod's spec, not only in the
		// kubelet's log at the drain (row 3580).
		assert.Contains(t, log, "never reaches the drain: it has no host, and on the node's network (hostNetwork)")
	})
}

// nodeAddress returns the Node's InternalIP, as the API server has it: a
// hostNetwork pod's status.podIP.
func (a *apiPods) nodeAddress(t *testing.T) string {
	t.Helper()
	var n corev1.Node
	a.cluster.MustDo(t, http.MethodGet, "/api/v1/nodes/"+NodeName, nil, http.StatusOK, &n)
	for _, addr := range n.Status.Addresses {
		if addr.Type == corev1.NodeInternalIP {
			return addr.Address
		}
	}
	t.Fatalf("the Node has no InternalIP: %v", n.Status.Addresses)
	return ""
}

// manifestGrace is the grace a user's manifest runs with here, in every
// place it states it, and readmeSandboxes the README's server's sandboxes: with the
// manifest's DRAINKIT_PRESERVE_ESTIMATE of 8 s, counted one at a time on a
// node that never drained, their reserve leaves the preStop wait about 2 s.
const (
	manifestGrace   = 30
	readmeSandboxes = 3
)

// readmeDaemonSet returns the README's one yaml block, decoded strictly.
func readmeDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	raw, err := os.ReadFile(readme)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(raw), "\n```yaml\n")
	require.True(t, ok, "no yaml block in %s", readme)
	block, _, ok := strings.Cut(rest, "\n```\n")
	require.True(t, ok, "the yaml block of %s does not end", readme)
	require.NotContains(t, rest[len(block):], "```yaml", "%s has another yaml block: run it too", readme)
	return decodeDaemonSet(t, []byte(block), readme+"'s manifest")
}

// readDaemonSet returns the DaemonSet of the file path, decoded strictly.
func readDaemonSet(t *testing.T, path string) *appsv1.DaemonSet {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return decodeDaemonSet(t, raw, path)
}

// decodeDaemonSet decodes data, the DaemonSet of what, strictly: a field
// the API does not know is the manifest's mistake, which the API server
// would drop without a word.
func decodeDaemonSet(t *testing.T, data []byte, what string) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	require.NoError(t, yaml.UnmarshalStrict(data, &ds), what)
	return &ds
}

// readmePod returns the README's pod as this node runs it, named name, and
// the changes readmeManifest lists made.
func readmePod(t *testing.T, api *apiPods, name, hookSecret string) *corev1.Pod {
	t.Helper()
	spec := readmeDaemonSet(t).Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	require.NotNil(t, spec.TerminationGracePeriodSeconds)
	c := &spec.Containers[0]
	grace := strconv.FormatInt(*spec.TerminationGracePeriodSeconds, 10)
	var stated bool
	for i, e := range c.Env {
		switch e.Name {
		case drain.EnvGrace:
			require.Equal(t, grace, e.Value, "%s states the grace twice, equal", drain.EnvGrace)
			c.Env[i].Value, stated = strconv.Itoa(manifestGrace), true
		}
	}
	require.True(t, stated, "the README's manifest sets %s", drain.EnvGrace)
	spec.TerminationGracePeriodSeconds = new(int64(manifestGrace))

	require.NotNil(t, c.Lifecycle)
	require.NotNil(t, c.Lifecycle.PreStop)
	if g := c.Lifecycle.PreStop.HTTPGet; g != nil {
		for i, h := range g.HTTPHeaders {
			require.Equal(t, "the same secret", h.Value, "the README's placeholder, which the server refuses")
			g.HTTPHeaders[i].Value = hookSecret
		}
	}
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	state := filepath.Join(api.node.Dir, "state-"+name)
	c.Image, c.ImagePullPolicy = ImageRef, corev1.PullNever
	c.Command = []string{"/podbin", "server", "-listen", "[$(POD_IP)]:8080", "-sandboxes", strconv.Itoa(readmeSandboxes),
		"-pause", "300ms", "-report", StateMount + "/report-" + name + ".json"}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "state", MountPath: StateMount})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "state",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: state, Type: &dirOrCreate}}})
	return api.onThisNode(t, name, nil, spec)
}

// onThisNode returns a pod named name of a user's manifest's spec (and
// labels), with what this node lacks: the node's network (no CNI here),
// never restarted, in the namespace the RBAC is applied in, and
// KUBERNETES_SERVICE_HOST/PORT naming the API server (see
// boundServiceAccount); create binds it to the Node.
func (a *apiPods) onThisNode(t *testing.T, name string, labels map[string]string, spec corev1.PodSpec) *corev1.Pod {
	t.Helper()
	spec.HostNetwork, spec.RestartPolicy = true, corev1.RestartPolicyNever
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels}, Spec: spec}
	serviceEnv(pod, a.apiURL(t))
	return pod
}

// newHookSecret returns a random secret for a manifest's hook, in place of
// its placeholder, which the servers refuse.
func newHookSecret(t *testing.T) string {
	t.Helper()
	secret := make([]byte, 16)
	_, err := rand.Read(secret)
	require.NoError(t, err)
	return hex.EncodeToString(secret)
}

// readmeExecHook returns the exec hook the README's manifest offers in a
// comment instead of its httpGet, uncommented.
func readmeExecHook(t *testing.T) *corev1.LifecycleHandler {
	t.Helper()
	raw, err := os.ReadFile(readme)
	require.NoError(t, err)
	const prefix = "# exec: "
	for _, line := range strings.Split(string(raw), "\n") {
		if _, after, ok := strings.Cut(line, prefix); ok {
			var h struct {
				Exec corev1.ExecAction `json:"exec"`
			}
			require.NoError(t, yaml.UnmarshalStrict([]byte("exec: "+after), &h), "%q", line)
			return &corev1.LifecycleHandler{Exec: &h.Exec}
		}
	}
	t.Fatalf("no %q line in %s", prefix, readme)
	return nil
}

// A manifestRun is what runManifestPod needs to know of the server a
// user's manifest runs.
type manifestRun struct {
	process string // a part of the server's command line
	report  string // the file the server writes its Report to, its path on the host
	// nested, when not "", is the key of the drain's Report in that file
	// (the supervisor's: "drain").
	nested    string
	sandboxes int // running at the deletion
	// ready, when not nil, runs once the pod is ready, before its
	// deletion: what the server needs then (its sandboxes created).
	ready func(t *testing.T)
	// log, when not nil, receives the pod's log as it stood at its end.
	log *string
}

// readmeRun is the manifestRun of a pod of the README's manifest; its
// server's log goes to log when it is not nil.
func readmeRun(a *apiPods, pod *corev1.Pod, log *string) manifestRun {
	return manifestRun{
		process:   "/report-" + pod.Name + ".json",
		report:    filepath.Join(a.node.Dir, "state-"+pod.Name, "report-"+pod.Name+".json"),
		sandboxes: readmeSandboxes,
		log:       log,
	}
}

// runManifestPod creates pod, a user's manifest as this node runs it,
// through the API, waits until the API shows it ready by its own probes,
// deletes it with the grace its spec has here (manifestGrace), and returns the Report its server
// wrote and the kubelet's log lines of its hooks that failed, after
// checking what every run of a user's manifest must hold: every sandbox
// preserved, exit before SIGKILL, its pod read and its Events posted with
// no 403.
func (a *apiPods) runManifestPod(t *testing.T, pod *corev1.Pod, m manifestRun) (*drain.Report, []string) {
	t.Helper()
	name := pod.Name
	a.create(t, pod)
	w, err := WatchProcess(WaitProcess(t, m.process, 2*time.Minute))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var p corev1.Pod
		code, body, err := a.cluster.Do(realapiserver.AdminToken, http.MethodGet, "/api/v1/namespaces/default/pods/"+name, nil)
		if err != nil || code != http.StatusOK || yaml.Unmarshal(body, &p) != nil {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}, 2*time.Minute, 100*time.Millisecond, "the pod never became ready by its manifest's probes; pod log:\n%s", a.node.PodLog(name))
	if m.ready != nil {
		m.ready(t)
	}
	deleted := a.remove(t, name, manifestGrace)
	died, err := w.Wait(manifestGrace*time.Second + time.Minute)
	log := a.node.PodLog(name) // at once: the kubelet removes a deleted pod's logs
	if m.log != nil {
		*m.log = log
	}
	require.NoError(t, err, "pod log:\n%s", log)
	var hooks []string
	for _, line := range a.node.KubeletLog("PreStop hook failed", "lifecycle hook for Container in Pod failed") {
		if strings.Contains(line, `pod="default/`+name+`"`) {
			hooks = append(hooks, line)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pod log:\n%s\nthe kubelet's failed hooks:\n%s", log, strings.Join(hooks, "\n"))
		}
	})
	var rep *drain.Report
	if m.nested == "" {
		rep = readJSON[drain.Report](t, m.report, a.node, name)
	} else {
		nested := *readJSON[map[string]json.RawMessage](t, m.report, a.node, name)
		require.Contains(t, nested, m.nested, m.report)
		rep = new(drain.Report)
		require.NoError(t, json.Unmarshal(nested[m.nested], rep), m.report)
	}
	t.Logf("from the deletion: T0 +%v, SIGTERM +%v, SIGKILL expected +%v, exit +%v; %v; events %+v",
		rel(rep.Budget.Start, deleted), rel(rep.Budget.SIGTERM, deleted), rel(rep.Budget.Kill, deleted), rel(died, deleted),
		rep.Preserve.Counts, rep.Events)
	assert.Equal(t, m.sandboxes, rep.Preserve.Counts[pause.Preserved], "%v", rep.Preserve.Counts)
	assert.NoError(t, rep.Err())
	assert.True(t, died.Before(rep.Budget.Kill), "exit before SIGKILL")
	assert.NotContains(t, log, "403 Forbidden", "the pod reader and its Events are allowed by the manifest's service account and Role")
	if assert.NotNil(t, rep.Events, "the drain had its pod (POD_NAME) and posted Events") {
		assert.Positive(t, rep.Events.Posted, "%+v", rep.Events)
		assert.Zero(t, rep.Events.Dropped, "%+v", rep.Events)
	}
	// Gone from the API before the next pod of a manifest starts: a pod on
	// the node's network holds its ports as host ports until then, and the
	// kubelet refuses another that declares them (NodePorts).
	require.Eventually(t, func() bool {
		code, _, err := a.cluster.Do(realapiserver.AdminToken, http.MethodGet, "/api/v1/namespaces/default/pods/"+name, nil)
		return err == nil && code == http.StatusNotFound
	}, time.Minute, 100*time.Millisecond, "the pod is still in the API server")
	return rep, hooks
}

// sandboxdDaemonSet is the DaemonSet the README calls complete and tested.
const sandboxdDaemonSet = "../../examples/sandboxd/deploy/daemonset.yaml"

// sandboxdManifestSandboxes are the sandboxes sandboxd's DaemonSet runs
// here: its -pause-latency=2s, counted one at a time on a node that never
// drained, makes their reserve 24 s of the 30 s, and they pause 8 at once.
const sandboxdManifestSandboxes = 12

// examples/sandboxd/deploy/daemonset.yaml, the DaemonSet the README calls
// complete and tested, run as written through the API server as the README's
// manifest is (readmeManifest): its args, its env (POD_NAME, POD_UID,
// POD_IP, SANDBOXD_HOOK_SECRET), its service account with rbac.yaml beside
// it, its named ports, its startup, readiness and liveness probes, its
// httpGet hook to the hook port with the secret in its header, privileged,
// its state on a hostPath. The test changes the grace (3600 s to 30 s, in
// terminationGracePeriodSeconds and -grace, which it first checks are
// equal), -runtime=runsc to the fake runtime (this image has no runsc) and
// so no privileged (which this API server refuses: kube-apiserver's
// --allow-privileged is false unless set, and internal/realapiserver sets
// none, where kubeadm sets it true), the image and
// its command (the image's entrypoint is podbin), the secret's
// placeholder in both places, the hostPath's directory, the namespace
// (rbac.yaml applied in default), and what the node lacks, a pod network:
// hostNetwork, the hook's host the node's address, and -listen=:8080 on
// that address, since the node's network is the machine's. The pod must
// become ready, the hook reach the drain, every sandbox be preserved, the
// device daemon stop on its own, the Events be posted, sandboxd exit
// before SIGKILL.
func sandboxdManifest(t *testing.T, api *apiPods) {
	ds := readDaemonSet(t, sandboxdDaemonSet)
	spec := ds.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	c := &spec.Containers[0]
	addr := api.nodeAddress(t)
	from, to := shortenGrace(t, &spec)
	c.Args = replaceArgs(t, c.Args, map[string]string{
		from:             to,
		"-runtime=runsc": "-runtime=fake",
		"-listen=:8080":  "-listen=[$(POD_IP)]:8080",
	})
	replaceHookSecret(t, c, addr)

	const name = "sandboxd-daemonset"
	state := filepath.Join(api.node.Dir, "state-"+name)
	for i, v := range spec.Volumes {
		if v.HostPath != nil {
			spec.Volumes[i].HostPath.Path = state
		}
	}
	c.Image, c.ImagePullPolicy, c.Command = ImageRef, corev1.PullNever, []string{"/sandboxd"}
	require.NotNil(t, c.SecurityContext)
	c.SecurityContext.Privileged = nil // for runsc; this API server, as kube-apiserver by default, refuses it

	rep, _ := api.runManifestPod(t, api.onThisNode(t, name, ds.Spec.Template.Labels, spec), manifestRun{
		process:   "-runtime=fake",
		report:    filepath.Join(state, "last-shutdown.json"),
		sandboxes: sandboxdManifestSandboxes,
		ready: func(t *testing.T) {
			for range sandboxdManifestSandboxes {
				createSandbox(t, "http://"+net.JoinHostPort(addr, "8080"), `{"timeout_s": 86400}`)
			}
		},
	})
	require.NotNil(t, rep.PreStop, "the kubelet's httpGet reached the drain at the hook port, its header the secret")
	assertDaemonStopped(t, filepath.Join(state, "ublkd.events"))
}

// shortenGrace makes spec's grace manifestGrace, and returns the -grace
// argument the DaemonSet must give (its terminationGracePeriodSeconds,
// which its server must be told) and the one it gets here.
func shortenGrace(t *testing.T, spec *corev1.PodSpec) (from, to string) {
	t.Helper()
	require.NotNil(t, spec.TerminationGracePeriodSeconds)
	from = fmt.Sprintf("-grace=%ds", *spec.TerminationGracePeriodSeconds)
	spec.TerminationGracePeriodSeconds = new(int64(manifestGrace))
	return from, fmt.Sprintf("-grace=%ds", manifestGrace)
}

// replaceArgs returns a copy of args with each argument that is a key of
// to replaced by its value, and fails the test unless each key is there:
// what the test changes must be in the manifest as it says.
func replaceArgs(t *testing.T, args []string, to map[string]string) []string {
	t.Helper()
	out := make([]string, len(args))
	changed := map[string]bool{}
	for i, a := range args {
		out[i] = a
		if v, ok := to[a]; ok {
			out[i], changed[a] = v, true
		}
	}
	for a := range to {
		require.True(t, changed[a], "the DaemonSet's args %q have no %s", args, a)
	}
	return out
}

// daemonSetSecret is the placeholder the DaemonSets under examples/ give
// their hook's secret, in the env and the hook's header.
const daemonSetSecret = "replace-me-with-a-long-random-secret"

// replaceHookSecret puts a random secret in place of c's daemonSetSecret
// in both places it must be (the server's env and its httpGet hook's
// header), for the servers refuse the placeholder, and gives the hook host,
// the node's address (readmeManifest says why).
func replaceHookSecret(t *testing.T, c *corev1.Container, host string) {
	t.Helper()
	secret, secrets := newHookSecret(t), 0
	for i, e := range c.Env {
		if e.Value == daemonSetSecret {
			c.Env[i].Value, secrets = secret, secrets+1
		}
	}
	require.NotNil(t, c.Lifecycle)
	require.NotNil(t, c.Lifecycle.PreStop)
	g := c.Lifecycle.PreStop.HTTPGet
	require.NotNil(t, g, "the DaemonSet's preStop is an httpGet")
	for i, h := range g.HTTPHeaders {
		if h.Value == daemonSetSecret {
			g.HTTPHeaders[i].Value, secrets = secret, secrets+1
		}
	}
	require.Equal(t, 2, secrets, "the secret's placeholder, in the env and the hook's header")
	g.Host = host
}

// assertDaemonStopped checks that the device daemon whose event log is
// events stopped on its own (its last event exit), not killed with the
// pod: a daemon killed under its devices' I/O risks the host.
func assertDaemonStopped(t *testing.T, events string) {
	t.Helper()
	data, err := os.ReadFile(events)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(data), "exit\n"), "the device daemon stopped on its own: %q", data)
}

// supervisorDaemonSet is examples/supervisor's DaemonSet, whose excerpt
// docs/other-languages.md shows, and supervisorRBAC its account and Role.
const (
	supervisorDaemonSet = "../../examples/supervisor/deploy/daemonset.yaml"
	supervisorRBAC      = "../../examples/supervisor/deploy/rbac.yaml"
)

// supervisorManifestSandboxes are the naive server's sandboxes at the
// deletion, 500 ms pauses: counted one at a time at the supervisor's first
// estimate, 1 s, on a node that never drained, their reserve leaves the
// preStop wait almost nothing of the 30 s (10 left it 9 s).
const supervisorManifestSandboxes = 20

// examples/supervisor/deploy/daemonset.yaml run as written through the API
// server, as sandboxdManifest runs sandboxd's: the supervisor as the
// container's command in front of a server it starts, its args, its env
// (POD_NAME, POD_UID, POD_IP, SUPERVISOR_HOOK_SECRET, DRAINKIT_API_KEY from
// the Secret sandbox-api-key, which the test creates), its service account
// with rbac.yaml beside it, its named ports and probes, its httpGet hook to
// the hook port with the secret in its header, its hostPaths. The test
// changes the grace (3600 s to 30 s, in the spec and -grace), the server
// and its ublk daemon (the manifest's are an example's: podbin's naive
// server on the manifest's -server-url, and podbin's fake daemon on the
// manifest's socket, its sysfs in the state volume, SUPERVISOR_SYSFS_ROOT
// naming it), the init container that copies the supervisor in with cp
// (this image has the supervisor, and no cp: the container runs it), the
// image, privileged and the host's /dev (for a real daemon's
// /dev/ublk-control and KVM; this API server refuses privileged), the
// secret's placeholder, the hostPaths' directories, the namespace, and for
// the node's network hostNetwork, the hook's host and -listen=:8081 on the
// node's address.
func supervisorManifest(t *testing.T, api *apiPods) {
	ds := readDaemonSet(t, supervisorDaemonSet)
	api.cluster.ApplyRBAC(t, supervisorRBAC, "default")
	api.cluster.MustDo(t, http.MethodPost, "/api/v1/namespaces/default/secrets", &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-api-key"},
		StringData: map[string]string{"api-key": newHookSecret(t)},
	}, http.StatusCreated, nil)
	spec := ds.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	require.Len(t, spec.InitContainers, 1)
	c := &spec.Containers[0]
	require.Equal(t, []string{"/drainkit/supervisor"}, c.Command)
	addr := api.nodeAddress(t)
	const stateMount = "/var/lib/sandbox" // the manifest's state volume
	daemon, err := json.Marshal(fakeublk.DaemonConfig{
		SysRoot:  stateMount + "/sys",
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}, {ID: 1, Major: 4000, Minor: 1}},
		Socket:   "/run/sandbox/ublkd.sock",
		EventLog: stateMount + "/daemon.events",
	})
	require.NoError(t, err)
	// The supervisor's args, then -- and the server's command: podbin's
	// naive server on -server-url's address.
	server := slices.Index(c.Args, "--")
	require.Positive(t, server, "the DaemonSet's args %q: a server's command after --", c.Args)
	from, to := shortenGrace(t, &spec)
	args := replaceArgs(t, c.Args[:server], map[string]string{
		from:                                to,
		"-listen=:8081":                     "-listen=[$(POD_IP)]:8081",
		"-server-url=http://127.0.0.1:8080": "-server-url=http://127.0.0.1:8080", // where the server below listens
	})
	d := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "-daemon=") })
	require.NotEqual(t, -1, d, "the DaemonSet's args %q have no -daemon", c.Args)
	args[d] = "-daemon=/podbin ublkd " + string(daemon)
	c.Args = append(args, "--", "/naiveserver", "-listen", "127.0.0.1:8080", "-state", stateMount+"/naive", "-pause", "500ms")
	replaceHookSecret(t, c, addr)
	c.Env = append(c.Env, corev1.EnvVar{Name: "SUPERVISOR_SYSFS_ROOT", Value: stateMount + "/sys"})

	const name = "supervisor-daemonset"
	dir := filepath.Join(api.node.Dir, "state-"+name)
	var volumes []corev1.Volume
	for _, v := range spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/dev" {
			continue // a real daemon's /dev/ublk-control, privileged
		}
		if v.HostPath != nil {
			v.HostPath.Path = filepath.Join(dir, v.Name)
		}
		volumes = append(volumes, v)
	}
	spec.Volumes = volumes
	var mounts []corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if m.Name != "dev" {
			mounts = append(mounts, m)
		}
	}
	c.VolumeMounts = mounts
	spec.InitContainers = nil
	c.Image, c.ImagePullPolicy, c.Command = ImageRef, corev1.PullNever, []string{"/supervisor"}
	require.NotNil(t, c.SecurityContext)
	c.SecurityContext.Privileged = nil

	rep, _ := api.runManifestPod(t, api.onThisNode(t, name, ds.Spec.Template.Labels, spec), manifestRun{
		process:   "-daemon=/podbin ublkd",
		report:    filepath.Join(dir, "state", "drain-report.json"),
		nested:    "drain",
		sandboxes: supervisorManifestSandboxes,
		ready: func(t *testing.T) {
			for range supervisorManifestSandboxes {
				createSandbox(t, "http://127.0.0.1:8080", "")
			}
		},
	})
	require.NotNil(t, rep.PreStop, "the kubelet's httpGet reached the drain at the hook port, its header the secret")
	assertDaemonStopped(t, filepath.Join(dir, "state", "daemon.events"))
}
