//go:build linux

package main

import (
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/manifest"
)

// The manifest decodes strictly into the Kubernetes types (a misspelt or
// misplaced field fails), its supervisor command line parses with the
// supervisor's own parser, and its numbers add up.
func TestManifestIsValidAndItsBudgetAddsUp(t *testing.T) {
	ds := manifest.DaemonSet(t, "deploy/daemonset.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriod:")
	spec := ds.Spec.Template.Spec
	require.NotNil(t, spec.TerminationGracePeriodSeconds)
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second

	c := supervisorContainer(t, spec.Containers)
	args := append(c.Command[1:], c.Args...)
	manifest.Secret(t, c, EnvHookSecret, func() error { _, err := parseArgs(args, io.Discard); return err })
	cfg, err := parseArgs(args, io.Discard)
	require.NoError(t, err, "the manifest's command line parses, with a secret of its own")
	assert.Equal(t, grace, cfg.grace, "-grace equals terminationGracePeriodSeconds")
	assert.True(t, cfg.kubelet > 0 && cfg.kubelet < grace, "-kubelet-grace, the node-shutdown slice, is below the grace: %v", cfg.kubelet)
	assert.NotEmpty(t, cfg.server)

	// preStop is an httpGet to the supervisor's /drain on the -hook-listen
	// port, with the secret; the probes are its /readyz and /healthz on the
	// -listen port.
	manifest.CheckDrainHook(t, c, cfg.hookListen, manifest.Env(c, EnvHookSecret))
	_, listenPort, err := net.SplitHostPort(cfg.listen)
	require.NoError(t, err)
	require.NotNil(t, c.ReadinessProbe.HTTPGet)
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, listenPort, manifest.Port(c, c.ReadinessProbe.HTTPGet.Port.String()))
	require.NotNil(t, c.LivenessProbe.HTTPGet)
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, listenPort, manifest.Port(c, c.LivenessProbe.HTTPGet.Port.String()))

	// -server-url points at the server's API port in the same pod.
	u, err := url.Parse(cfg.serverURL)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", u.Hostname())
	assert.Equal(t, u.Port(), manifest.Port(c, "api"))

	// What a drain learns is kept on a hostPath, which outlives the pod.
	checkStateDir(t, cfg.stateDir, c, spec.Volumes)

	// Its pod and a service account that may read it and post Events.
	checkPodAccess(t, "deploy/rbac.yaml", ds.Namespace, spec)
	cfg.stateDir = t.TempDir() // nothing learned yet

	// The supervisor accepts it (reserves fit the grace period) and the
	// plan leaves AgentENV's seed scenario room: 200 sandboxes x 2 s one
	// at a time is 400 s of preserving (nothing learned: the plan counts on
	// no parallelism it has not measured, though the limit adapts from 8;
	// the level the node's first drain learns shortens it); the teardown
	// steps keep their reserves; the preStop wait may use the rest.
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	t0 := time.Now()
	sup.budget.OnPreStop(t0) // the kubelet calls GET /drain
	windows := sup.drainer.Plan().Windows("")
	names := make([]string, len(windows))
	for i, w := range windows {
		names[i] = w.Name
	}
	assert.Equal(t, []string{drain.PhaseDrain, drain.PhaseGate, drain.PhasePreserve, StepServer, StepDaemon}, names)
	st := sup.budget.State()
	assert.Equal(t, t0.Add(grace), st.Kill)
	assert.Equal(t, 5*time.Second, st.Margin, "the default margin of a long grace")
	assert.Equal(t, 30*time.Second, windows[3].Reserve, "server step")
	assert.Equal(t, 30*time.Second, windows[4].Reserve, "daemon step")
	assert.Equal(t, st.Deadline, windows[4].Deadline, "the last step ends at the budget's deadline")

	assert.Zero(t, cfg.concurrency, "the adaptive limit")
	preserve := 200 * 2 * time.Second / time.Duration(sup.preserver.Limit())
	drainEnd := st.Deadline.Add(-windows[3].Reserve - windows[4].Reserve - preserve)
	assert.Equal(t, 3600*time.Second-5*time.Second-60*time.Second-400*time.Second, drainEnd.Sub(t0),
		"with 200 running sandboxes the preStop wait ends at T0+3135s")
}

// checkStateDir checks that -state-dir is on a writable volume mount of c
// whose volume is a hostPath: what a drain learned must outlive the pod.
func checkStateDir(t *testing.T, dir string, c corev1.Container, volumes []corev1.Volume) {
	t.Helper()
	require.NotEmpty(t, dir, "-state-dir is set")
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return strings.HasPrefix(dir+"/", strings.TrimSuffix(m.MountPath, "/")+"/")
	})
	require.GreaterOrEqual(t, i, 0, "-state-dir %s is on a volume mount", dir)
	assert.False(t, c.VolumeMounts[i].ReadOnly, "-state-dir is writable")
	v := slices.IndexFunc(volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[i].Name })
	require.GreaterOrEqual(t, v, 0)
	require.NotNil(t, volumes[v].HostPath, "-state-dir is a hostPath: it outlives the pod")
	require.NotNil(t, volumes[v].HostPath.Type)
	assert.Equal(t, corev1.HostPathDirectoryOrCreate, *volumes[v].HostPath.Type, "the supervisor needs it to exist")
}

// supervisorContainer returns the container whose entrypoint is the
// supervisor, and checks it is the only one.
func supervisorContainer(t *testing.T, cs []corev1.Container) corev1.Container {
	t.Helper()
	var found []corev1.Container
	for _, c := range cs {
		if len(c.Command) > 0 && strings.HasSuffix(c.Command[0], "/supervisor") {
			found = append(found, c)
		}
	}
	require.Len(t, found, 1, "one container runs the supervisor as its entrypoint")
	return found[0]
}

// The manifests' -hook-listen, expanded as the kubelet expands $(POD_IP),
// is a host:port the supervisor listens on, on an IPv4 and on an IPv6 pod:
// status.podIP is an IPv6 address on an IPv6 or IPv6-first dual-stack
// cluster, where "$(POD_IP):8082" gave "fd00:10:244::5:8082", no host:port
// (net.Listen: "too many colons in address"): the supervisor exited 1 at
// every start, the server never started, the pod in CrashLoopBackOff. A
// bracketed host serves both: Go listens on "[10.244.1.5]:8082" as on
// "10.244.1.5:8082".
func TestManifestsHookListensOnAnIPv4AndAnIPv6Pod(t *testing.T) {
	_, overlay := buildOverlay(t)
	for name, spec := range map[string]corev1.PodSpec{
		"deploy/daemonset.yaml": manifest.DaemonSet(t, "deploy/daemonset.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriod:").Spec.Template.Spec,
		overlayDir:              overlay.Spec.Template.Spec,
	} {
		c := supervisorContainer(t, spec.Containers)
		i := slices.IndexFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "-hook-listen=") })
		require.GreaterOrEqual(t, i, 0, "%s sets -hook-listen", name)
		for _, podIP := range []string{"10.244.1.5", "fd00:10:244::5", "127.0.0.1", "::1"} {
			addr := strings.ReplaceAll(strings.TrimPrefix(c.Args[i], "-hook-listen="), "$(POD_IP)", podIP) // the kubelet's $(VAR) expansion
			host, port, err := net.SplitHostPort(addr)
			require.NoError(t, err, "%s, POD_IP=%s: -hook-listen %s", name, podIP, addr)
			assert.Equal(t, podIP, host, "%s: the hook listens on the pod's address", name)
			assert.Equal(t, "8082", port, name)
			if net.ParseIP(podIP).IsLoopback() { // this machine's: the form listens, on port 0
				ln, err := net.Listen("tcp", strings.TrimSuffix(addr, ":"+port)+":0")
				if err != nil && podIP == "::1" && strings.Contains(err.Error(), "cannot assign") {
					continue // no IPv6 loopback here
				}
				require.NoError(t, err, "%s, POD_IP=%s", name, podIP)
				require.NoError(t, ln.Close())
			}
		}
	}
}
