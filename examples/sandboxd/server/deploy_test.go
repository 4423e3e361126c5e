package server

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/manifest"
)

const daemonSet = "../deploy/daemonset.yaml"

// The DaemonSet decodes strictly into the Kubernetes types, its command line parses with
// sandboxd's own parser, -grace is terminationGracePeriodSeconds, the hook and probes hit
// sandboxd's endpoints, and the budget adds up: with the node's design load running, the
// preStop wait ends early enough that what the kubelet leaves after it covers preserving,
// teardown and the margin.
func TestDaemonSetIsValidAndItsBudgetAddsUp(t *testing.T) {
	ds := manifest.DaemonSet(t, daemonSet, "periodSeconds: 2", "periodSecond: 2")
	assert.Equal(t, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)

	spec := ds.Spec.Template.Spec
	require.NotNil(t, spec.TerminationGracePeriodSeconds)
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	manifest.Secret(t, c, HookSecretEnv, func() error { _, err := ParseFlags(c.Args, io.Discard); return err })
	cfg, err := ParseFlags(c.Args, io.Discard)
	require.NoError(t, err, "the manifest's arguments parse, with a secret of its own")
	assert.Equal(t, grace, cfg.Grace, "-grace equals terminationGracePeriodSeconds")
	assert.True(t, slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}), "POD_NAME, -pod's default, is the pod's name: -kubelet-grace needs the pod's deletionTimestamp")
	assert.True(t, cfg.KubeletGrace > 0 && cfg.KubeletGrace < grace, "-kubelet-grace, the node-shutdown slice, is below the grace: %v", cfg.KubeletGrace)

	manifest.CheckDrainHook(t, c, cfg.HookListen, manifest.Env(c, HookSecretEnv))
	_, port, err := net.SplitHostPort(cfg.Listen)
	require.NoError(t, err)
	_, hookPort, err := net.SplitHostPort(cfg.HookListen)
	require.NoError(t, err)
	assert.NotEqual(t, port, hookPort, "the API port does not serve the hook")
	require.NotNil(t, c.ReadinessProbe.HTTPGet)
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, port, manifest.Port(c, c.ReadinessProbe.HTTPGet.Port.String()))
	require.NotNil(t, c.LivenessProbe.HTTPGet)
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, "liveness must not flip while draining")
	// A sandboxd started while the last one drains waits for the state directory, not
	// listening, up to that one's grace: the liveness probe (6 x 10 s) would restart it
	// every minute of that wait, unless a startup probe holds it off for the grace.
	require.NotNil(t, c.StartupProbe, "a startup probe covers the wait for the state directory")
	require.NotNil(t, c.StartupProbe.HTTPGet)
	assert.Equal(t, "/healthz", c.StartupProbe.HTTPGet.Path)
	assert.Equal(t, port, manifest.Port(c, c.StartupProbe.HTTPGet.Port.String()))
	assert.GreaterOrEqual(t, time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold)*time.Second, grace,
		"the startup probe waits at least the grace: the last sandboxd may drain for all of it")
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == cfg.StateDir })
	assert.True(t, mounted, "the state directory outlives the container")
	assert.Zero(t, cfg.Concurrency, "the limit adapts, from what the last drain on the node learned (kept in the state directory)")

	checkBudget(t, cfg)
}

// checkBudget builds sandboxd's Drainer for cfg (with the fake runtime standing in, its
// pause estimate set to the runtime's) and 200 running sandboxes, anchors the budget at a
// preStop call, and checks the plan against the kubelet's arithmetic.
func checkBudget(t *testing.T, cfg Config) {
	const load = 200
	require.Equal(t, "runsc", cfg.Runtime)
	estimate := cfg.PauseEstimate()
	cfg.Runtime, cfg.PauseLatency, cfg.Devices = "fake", estimate, 0
	cfg.Listen, cfg.HookListen, cfg.StateDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	s, err := New(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer s.Close()
	defer s.Drainer().Force() // ends the preStop wait this test starts
	for range load {
		_, err := s.Node().Create(context.Background(), 86400)
		require.NoError(t, err)
	}
	// The kubelet's preStop call anchors T0 and makes the drain wait count the load.
	rec := httptest.NewRecorder()
	s.Drainer().PreStop().ServeHTTP(rec, httptest.NewRequest("GET", "/drain?wait=0s", nil)) // after the first count
	require.Equal(t, 200, rec.Code)
	require.Equal(t, load, s.Drainer().Running())
	t0 := s.Drainer().Budget().Start()
	windows := s.Drainer().Plan().Windows("")
	names := make([]string, len(windows))
	for i, w := range windows {
		names[i] = w.Name
	}
	require.Equal(t, []string{drain.PhaseDrain, drain.PhaseGate, drain.PhasePreserve, "http"}, names)

	preserve := windows[2].Reserve
	limit := 1 // nothing learned: the drain counts on no more than one at a time
	assert.Equal(t, time.Duration((load+limit-1)/limit)*estimate, preserve.Round(time.Second),
		"preserve reserve: %d sandboxes x %v, %d at a time", load, estimate, limit)
	drainEnd := windows[0].Deadline.Sub(t0)
	budget, err := deadline.New(cfg.Grace, deadline.Config{}) // the default margin, as the server's
	require.NoError(t, err)
	after := preserve + cfg.HTTPReserve() + budget.Margin() // runsc mode has no ublk step
	assert.Equal(t, cfg.Grace-after, drainEnd,
		"the drain phase leaves the SIGTERM phase its reserves (drain ends at T0+%v)", drainEnd)
	// The hook returns at the drain deadline (plus up to a second the kubelet truncates):
	// what the kubelet then leaves before SIGKILL must cover everything after it.
	left := deadline.KubeletRemaining(cfg.Grace, drainEnd+999*time.Millisecond)
	assert.GreaterOrEqual(t, left, after-time.Second, "kubelet leaves %v after the hook, %v needed", left, after)
	t.Logf("preserve reserve %v, drain ends at T0+%v, the kubelet leaves %v", preserve, drainEnd, left)
	assert.Greater(t, drainEnd, cfg.Grace/2, "the preStop wait still gets most of the hour")
}

// The DaemonSet runs as the service account rbac.yaml binds to a Role that
// lets sandboxd read its pod and post events (internal/realapiserver
// proves the Role enough against a real API server), and gives -pod its
// name through the Downward API.
func TestRBACManifestGrantsWhatSandboxdNeeds(t *testing.T) {
	raw, err := os.ReadFile(daemonSet)
	require.NoError(t, err)
	var ds appsv1.DaemonSet
	require.NoError(t, yaml.UnmarshalStrict(raw, &ds))
	rbac, err := os.ReadFile("../deploy/rbac.yaml")
	require.NoError(t, err)
	var sa corev1.ServiceAccount
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	for _, doc := range strings.Split(string(rbac), "\n---\n") {
		var meta metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		switch meta.Kind {
		case "ServiceAccount":
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &sa))
		case "Role":
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &role))
		case "RoleBinding":
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &binding))
		default:
			t.Fatalf("unexpected kind %q in rbac.yaml", meta.Kind)
		}
	}
	assert.Equal(t, ds.Spec.Template.Spec.ServiceAccountName, sa.Name)
	assert.Equal(t, ds.Namespace, sa.Namespace)
	assert.Equal(t, ds.Namespace, role.Namespace)
	assert.Contains(t, role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}})
	assert.Contains(t, role.Rules, rbacv1.PolicyRule{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"}})
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, binding.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}, binding.Subjects)

	c := ds.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" })
	require.GreaterOrEqual(t, i, 0, "the manifest sets POD_NAME")
	require.NotNil(t, c.Env[i].ValueFrom)
	assert.Equal(t, "metadata.name", c.Env[i].ValueFrom.FieldRef.FieldPath)
	t.Setenv(HookSecretEnv, "s")
	t.Setenv("POD_NAME", "sandboxd-x7k2p")
	cfg, err := ParseFlags(c.Args, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "sandboxd-x7k2p", cfg.Pod, "-pod defaults to $POD_NAME")
}

// The DaemonSet's arguments, expanded as the kubelet expands $(VAR) from the container's
// environment, parse and listen on an IPv4 and on an IPv6 pod: status.podIP is an IPv6
// address on an IPv6 or IPv6-first dual-stack cluster, where "$(POD_IP):8082" gave
// "fd00:10:244::5:8082", which is no host:port (net.Listen: "too many colons in
// address"), so sandboxd exited 1 at every start, the pod in CrashLoopBackOff. A bracketed
// host serves both: Go listens on "[10.244.1.5]:8082" as on "10.244.1.5:8082".
func TestDaemonSetHookListensOnAnIPv4AndAnIPv6Pod(t *testing.T) {
	ds := manifest.DaemonSet(t, daemonSet, "periodSeconds: 2", "periodSecond: 2")
	c := ds.Spec.Template.Spec.Containers[0]
	t.Setenv(HookSecretEnv, "a-secret-of-this-test") // the manifest's is a placeholder to replace
	for _, podIP := range []string{"10.244.1.5", "fd00:10:244::5", "127.0.0.1", "::1"} {
		args := make([]string, len(c.Args))
		for i, a := range c.Args { // the kubelet's $(VAR) expansion, for the pod's address
			args[i] = strings.ReplaceAll(a, "$(POD_IP)", podIP)
		}
		cfg, err := ParseFlags(args, io.Discard)
		require.NoError(t, err, "POD_IP=%s", podIP)
		host, port, err := net.SplitHostPort(cfg.HookListen)
		require.NoError(t, err, "POD_IP=%s: -hook-listen %s", podIP, cfg.HookListen)
		assert.Equal(t, podIP, host, "the hook listens on the pod's address")
		assert.Equal(t, "8082", port)
		if net.ParseIP(podIP).IsLoopback() { // this machine's: the form listens, on port 0
			ln, err := net.Listen("tcp", strings.TrimSuffix(cfg.HookListen, ":"+port)+":0")
			if err != nil && podIP == "::1" && strings.Contains(err.Error(), "cannot assign") {
				continue // no IPv6 loopback here
			}
			require.NoError(t, err, "POD_IP=%s", podIP)
			require.NoError(t, ln.Close())
		}
	}
}
