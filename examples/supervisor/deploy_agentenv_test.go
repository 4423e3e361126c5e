//go:build linux

package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/manifest"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
)

const overlayDir = "deploy/agentenv/overlay"

// imageEntrypoint is the ENTRYPOINT of AgentENV's server image
// (deploy/docker/Dockerfile.agentenv): its DaemonSet sets no command, so
// this is the server command the supervisor must run after "--".
var imageEntrypoint = []string{"/server"}

// kustomization is the part of a Kustomization the overlay uses, decoded
// strictly: a field the test does not apply fails it.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Path string `json:"path"`
	} `json:"patches"`
	Replacements []struct {
		Source struct {
			Kind      string `json:"kind"`
			Name      string `json:"name"`
			FieldPath string `json:"fieldPath"`
		} `json:"source"`
		Targets []struct {
			Select struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
			} `json:"select"`
			FieldPaths []string `json:"fieldPaths"`
		} `json:"targets"`
	} `json:"replacements"`
}

// buildOverlay builds the overlay as kustomize does (kubectl kustomize
// deploy/agentenv/overlay gives the same): the base, the strategic merge
// patch with Kubernetes' own merge rules, then the one replacement that
// copies terminationGracePeriodSeconds into DRAINKIT_GRACE_SECONDS. Every
// document decodes strictly into the Kubernetes types.
func buildOverlay(t *testing.T) (base, out appsv1.DaemonSet) {
	t.Helper()
	var k kustomization
	raw, err := os.ReadFile(filepath.Join(overlayDir, "kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(raw, &k))
	require.Equal(t, []string{"../base", "rbac.yaml"}, k.Resources)
	require.Len(t, k.Patches, 1)
	require.Len(t, k.Replacements, 1)
	r := k.Replacements[0]
	require.Equal(t, "spec.template.spec.terminationGracePeriodSeconds", r.Source.FieldPath)
	require.Len(t, r.Targets, 1)
	require.Equal(t, []string{"spec.template.spec.containers.[name=agentenv].env.[name=DRAINKIT_GRACE_SECONDS].value"}, r.Targets[0].FieldPaths)

	raw, err = os.ReadFile(filepath.Join(overlayDir, "../base/kustomization.yaml"))
	require.NoError(t, err)
	var baseK struct {
		kustomization
		Namespace string `json:"namespace"`
	}
	require.NoError(t, yaml.UnmarshalStrict(raw, &baseK))
	raw, err = os.ReadFile(filepath.Join(overlayDir, "../base/agentenv-daemonset.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(raw, &base))
	if base.Namespace == "" {
		base.Namespace = baseK.Namespace
	}
	baseJSON, err := yaml.YAMLToJSON(raw)
	require.NoError(t, err)

	raw, err = os.ReadFile(filepath.Join(overlayDir, k.Patches[0].Path))
	require.NoError(t, err)
	var patch appsv1.DaemonSet
	require.NoError(t, yaml.UnmarshalStrict(raw, &patch), "the patch is a DaemonSet")
	misspelt := strings.Replace(string(raw), "readinessProbe:", "readinesProbe:", 1)
	require.Error(t, yaml.UnmarshalStrict([]byte(misspelt), &appsv1.DaemonSet{}), "strict decoding catches a misspelt field")
	assert.Nil(t, patch.Spec.Template.Spec.TerminationGracePeriodSeconds, "the grace is stated once, in the base")
	patchJSON, err := yaml.YAMLToJSON(raw)
	require.NoError(t, err)
	// kustomize applies a patch to the resource of the same kind, name and
	// namespace, and fails the build when the base has none; so does a
	// replacement whose source or target it cannot find.
	require.Equal(t, base.Name+"/"+base.Namespace, patch.Name+"/"+patch.Namespace, "the patch names the base's DaemonSet")
	require.Equal(t, base.Name, r.Source.Name, "the replacement's source is the base's DaemonSet")
	require.Equal(t, base.Name, r.Targets[0].Select.Name, "the replacement's target is the base's DaemonSet")

	merged, err := strategicpatch.StrategicMergePatch(baseJSON, patchJSON, appsv1.DaemonSet{})
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(merged, &out))
	assert.Equal(t, r.Source.Name, out.Name)
	spec := &out.Spec.Template.Spec
	require.NotNil(t, spec.TerminationGracePeriodSeconds)
	c := &spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "agentenv" })]
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "DRAINKIT_GRACE_SECONDS" })
	require.GreaterOrEqual(t, i, 0)
	c.Env[i].Value = strconv.FormatInt(*spec.TerminationGracePeriodSeconds, 10)
	return base, out
}

// expand resolves $(VAR) in s from the container's literal env, as the
// kubelet does for command and args.
func expand(c corev1.Container, s string) string {
	return regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		for _, e := range c.Env {
			if e.Name == name && e.ValueFrom == nil {
				return e.Value
			}
		}
		return m
	})
}

// The overlay puts the supervisor in front of AgentENV's DaemonSet: PID 1,
// preStop and readiness on the supervisor, the API key from a Secret, the
// grace stated once; and at 3600 s with 200 running sandboxes the plan's
// numbers are the ones the README states.
func TestAgentENVOverlayIsValidAndItsBudgetAddsUp(t *testing.T) {
	base, ds := buildOverlay(t)
	spec := ds.Spec.Template.Spec
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	require.Equal(t, 3600*time.Second, grace)
	c := supervisorContainer(t, spec.Containers)
	assert.Equal(t, "agentenv", c.Name, "the server's own container, its image unchanged")
	assert.Equal(t, base.Spec.Template.Spec.Containers[0].Image, c.Image)
	require.Len(t, spec.InitContainers, 1)
	assert.Equal(t, []string{"cp", "/supervisor", c.Command[0]}, spec.InitContainers[0].Command)

	// The supervisor's command line, as the kubelet expands it.
	args := make([]string, 0, len(c.Command)-1+len(c.Args))
	for _, a := range append(slices.Clone(c.Command[1:]), c.Args...) {
		args = append(args, expand(c, a))
	}
	// The key is the server's own, from the container's environment through
	// the same secretKeyRef (resolved once, at the container's start, as the
	// server's): never a file of a Secret volume, which a rotation updates
	// under a server that still checks the old key.
	assert.False(t, slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-api-key-file") }),
		"the key is not a file a rotation changes under the server")
	bc := base.Spec.Template.Spec.Containers[0]
	baseKey := bc.Env[slices.IndexFunc(bc.Env, func(e corev1.EnvVar) bool { return e.Name == "AENV_API_KEY" })].ValueFrom.SecretKeyRef
	keyEnv := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == EnvAPIKey })
	require.GreaterOrEqual(t, keyEnv, 0, "the API key comes from the environment")
	require.NotNil(t, c.Env[keyEnv].ValueFrom)
	assert.Equal(t, baseKey, c.Env[keyEnv].ValueFrom.SecretKeyRef, "the server's own key Secret, its key")
	assert.Equal(t, []string{"PATH=/bin"}, childEnv([]string{"PATH=/bin", EnvAPIKey + "=k"}), "the server's environment goes without it")
	t.Setenv(EnvAPIKey, "k")
	manifest.Secret(t, c, EnvHookSecret, func() error { _, err := parseArgs(args, io.Discard); return err })

	cfg, err := parseArgs(args, io.Discard)
	require.NoError(t, err, "the overlay's command line parses, with a secret of its own")
	assert.Equal(t, grace, cfg.grace, "-grace is terminationGracePeriodSeconds, through the replacement")
	assert.True(t, cfg.kubelet > 0 && cfg.kubelet < grace, "-kubelet-grace, the node-shutdown slice, is below the grace: %v", cfg.kubelet)
	assert.Equal(t, APIAgentENV, cfg.api.API)
	assert.True(t, filepath.IsAbs(cfg.daemonSock), "the server's daemon, by its socket")
	assert.Empty(t, cfg.daemon, "never a second daemon")
	serverCmd := append(slices.Clone(bc.Command), bc.Args...)
	if len(bc.Command) == 0 {
		serverCmd = append(slices.Clone(imageEntrypoint), bc.Args...)
	}
	assert.Equal(t, serverCmd, cfg.server, "the server command after -- is the base's, or its image's entrypoint")
	assert.Equal(t, "/run/aenv/ublk-daemon.sock", cfg.daemonSock, "AgentENV's daemon socket, $AENV_RUNTIME/ublk-daemon.sock")

	// The Report's directory is a volume of the pod (the supervisor refuses
	// to start when it cannot create a file there).
	require.NotEmpty(t, cfg.report)
	assert.True(t, slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return !m.ReadOnly && strings.HasPrefix(filepath.Dir(cfg.report)+"/", strings.TrimSuffix(m.MountPath, "/")+"/")
	}), "-report %s is on a writable volume mount", cfg.report)

	// preStop is the supervisor's /drain on the -hook-listen port, with the
	// secret; readiness and liveness are the supervisor's, on -listen.
	require.NotNil(t, c.Lifecycle)
	require.NotNil(t, c.Lifecycle.PreStop)
	assert.Nil(t, c.Lifecycle.PreStop.Exec, "the base's unbounded shell loop is gone")
	manifest.CheckDrainHook(t, c, cfg.hookListen, manifest.Env(c, EnvHookSecret))
	_, listenPort, err := net.SplitHostPort(cfg.listen)
	require.NoError(t, err)
	require.NotNil(t, c.ReadinessProbe.HTTPGet)
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, listenPort, manifest.Port(c, c.ReadinessProbe.HTTPGet.Port.String()))
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	u := cfg.serverURL
	assert.True(t, strings.HasSuffix(u, ":"+manifest.Port(c, "http")), "-server-url is the API port, %s", u)

	// What a drain learns is kept on a hostPath (not the base's /workspace,
	// AgentENV's own), for the next drain's adaptive limit.
	assert.Zero(t, cfg.concurrency, "the adaptive limit: AgentENV's pauses write memory to disk")
	checkStateDir(t, cfg.stateDir, c, spec.Volumes)
	cfg.stateDir = t.TempDir() // nothing learned yet

	// The budget at 3600 s with 200 running sandboxes (AgentENV's double
	// behind the supervisor's own list, in virtual time): margin 5 s, 30 s
	// for each step, 200 x 1 s (the first pause estimate) = 200 s of
	// preserving, one at a time (nothing measured yet: the limit adapts
	// from 8, but the plan counts on no parallelism it has not measured);
	// the preStop wait may last until T0 + 3335 s.
	synctest.Test(t, func(t *testing.T) {
		srv, err := fakeagentenv.New(fakeagentenv.Config{APIKey: "k", PageSize: 37})
		require.NoError(t, err)
		for i := range 200 {
			_, err := srv.Create(512 << (i % 4))
			require.NoError(t, err)
		}
		cfg := cfg
		cfg.client = &http.Client{Transport: handlerTransport{srv.Handler()}}
		sup, err := newSupervisor(cfg, io.Discard)
		require.NoError(t, err)
		t0 := time.Now()
		preStop := func(query string) drain.PreStopSummary {
			rec := httptest.NewRecorder()
			sup.drainer.PreStop().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/drain"+query, nil))
			var sum drain.PreStopSummary
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &sum))
			return sum
		}
		sum := preStop("?wait=1ms") // the kubelet's call, answered after the first count
		assert.Equal(t, "waiting", sum.Reason)
		assert.Equal(t, 200, sum.Running, "every page counted")
		assert.Equal(t, grace, sum.Kill.Sub(t0))
		st := sup.budget.State()
		const margin = 5 * time.Second // the default margin of a long grace
		assert.Equal(t, margin, st.Margin)
		windows := sup.drainer.Plan().Windows("")
		assert.Equal(t, 30*time.Second, windows[3].Reserve, "server step")
		assert.Equal(t, 30*time.Second, windows[4].Reserve, "daemon step")
		preserve := windows[2].Reserve
		assert.Equal(t, 200*time.Second, preserve, "200 preserves of 1 s, one at a time")
		assert.Equal(t, grace-margin-60*time.Second-preserve, sum.DrainDeadline.Sub(t0),
			"the preStop wait may last until T0+3335s")
		t.Logf("grace %v: preStop wait until T0+%v, preserve reserve %v, steps 2x30s, margin %v",
			grace, sum.DrainDeadline.Sub(t0), preserve, st.Margin)
		sup.drainer.Force() // ends the wait
		assert.Equal(t, "forced", preStop("").Reason)
	})
}

// The overlay gives the supervisor its pod (POD_NAME from the downward API,
// -pod's default) and a service account of its own whose Role allows what
// drain.Config.Pod does and nothing more: read the pod (its
// deletionTimestamp), create Events on it; bound in the base's namespace.
func TestAgentENVOverlayGivesTheSupervisorItsPodAndEvents(t *testing.T) {
	base, ds := buildOverlay(t)
	require.NotEmpty(t, base.Namespace)
	checkPodAccess(t, filepath.Join(overlayDir, "rbac.yaml"), base.Namespace, ds.Spec.Template.Spec)
}

// checkPodAccess checks the RBAC manifest at path (a ServiceAccount, its
// Role and their RoleBinding, in namespace ns) and the pod spec that runs
// the supervisor as it, with POD_NAME from the downward API.
func checkPodAccess(t *testing.T, path, ns string, spec corev1.PodSpec) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	docs := strings.Split(string(raw), "\n---\n")
	require.Len(t, docs, 3)
	var sa corev1.ServiceAccount
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &sa))
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &role))
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[2]), &binding))
	assert.Equal(t, []string{"ServiceAccount", "Role", "RoleBinding"}, []string{sa.Kind, role.Kind, binding.Kind})
	for _, m := range []metav1.ObjectMeta{sa.ObjectMeta, role.ObjectMeta, binding.ObjectMeta} {
		assert.Equal(t, ns, m.Namespace, "%s: in the DaemonSet's namespace", m.Name)
	}
	assert.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"}},
	}, role.Rules, "what kube.Pod needs, nothing more")
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, binding.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}}, binding.Subjects)

	assert.Equal(t, sa.Name, spec.ServiceAccountName, "the node pods run as it")
	c := supervisorContainer(t, spec.Containers)
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" })
	require.GreaterOrEqual(t, i, 0, "POD_NAME is set")
	require.NotNil(t, c.Env[i].ValueFrom)
	require.NotNil(t, c.Env[i].ValueFrom.FieldRef)
	assert.Equal(t, "metadata.name", c.Env[i].ValueFrom.FieldRef.FieldPath, "from the downward API")
	assert.False(t, slices.ContainsFunc(append(slices.Clone(c.Command), c.Args...), func(a string) bool { return strings.HasPrefix(a, "-pod") }),
		"no -pod: its default, POD_NAME")
	t.Setenv("POD_NAME", "agentenv-node-x7k2p")
	cfg, err := parseArgs([]string{"--", "/server"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "agentenv-node-x7k2p", cfg.pod, "-pod's default is POD_NAME")
}

// Fault: the overlay gave the supervisor AgentENV's key as a file of the
// Secret agentenv-auth's volume, which the kubelet updates when the Secret
// is rotated (and the supervisor reads again, row 236), while the server
// has the same key from its environment (AENV_API_KEY, secretKeyRef),
// resolved once when the container starts. After a rotation the supervisor
// sent the new key to a server that checks the old one until it restarts:
// readiness failed on 401 and, at the drain, every pause was refused 401
// (permanent) and every sandbox lost. The supervisor now takes the key as
// the server does, from the container's environment through the same
// secretKeyRef, so both hold one version of it. On loopback, the Secret
// rotated as the kubelet applies it: a volume's file rewritten, the
// environment left as it was at the container's start.
func TestOverlaySendsTheKeyTheServerHoldsAfterASecretRotation(t *testing.T) {
	base, ds := buildOverlay(t)
	spec := ds.Spec.Template.Spec
	c := supervisorContainer(t, spec.Containers)
	bc := base.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(bc.Env, func(e corev1.EnvVar) bool { return e.Name == "AENV_API_KEY" })
	require.GreaterOrEqual(t, i, 0)
	serverKey := bc.Env[i].ValueFrom.SecretKeyRef // read by the server once, at its start

	srv, err := fakeagentenv.New(fakeagentenv.Config{APIKey: "k1"}) // the server's key stays k1 until it restarts
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	args := []string{"-api", "agentenv", "-server-url", ts.URL}
	var rotate func(string) // what a rotation of the Secret changes for the supervisor
	for _, a := range c.Args {
		if path, ok := strings.CutPrefix(a, "-api-key-file="); ok {
			mount := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == filepath.Dir(path) })
			require.GreaterOrEqual(t, mount, 0)
			vol := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[mount].Name })
			require.NotNil(t, spec.Volumes[vol].Secret)
			require.Equal(t, serverKey.Name, spec.Volumes[vol].Secret.SecretName)
			file := filepath.Join(t.TempDir(), "api-key")
			require.NoError(t, os.WriteFile(file, []byte("k1"), 0o600))
			args = append(args, "-api-key-file", file)
			rotate = func(key string) { require.NoError(t, os.WriteFile(file, []byte(key), 0o600)) } // the kubelet updates a Secret volume
		}
	}
	for _, e := range c.Env {
		if e.Name == EnvAPIKey {
			require.NotNil(t, e.ValueFrom)
			assert.Equal(t, serverKey, e.ValueFrom.SecretKeyRef, "the server's own key, through the same reference")
			t.Setenv(EnvAPIKey, "k1")
			rotate = func(string) {} // an environment is resolved once, at the container's start
		}
	}
	require.NotNil(t, rotate, "the overlay gives the supervisor the API key")
	cfg, err := parseArgs(append(args, "--", "server"), io.Discard)
	require.NoError(t, err)
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	defer sup.src.CloseIdleConnections()
	defer sup.sweepList.(*notPaused).closeIdleConnections()
	probe := func() int {
		w := httptest.NewRecorder()
		sup.ready(w, httptest.NewRequest("GET", "/readyz", nil))
		return w.Code
	}
	require.Equal(t, 200, probe())

	rotate("k2")
	w := httptest.NewRecorder()
	sup.ready(w, httptest.NewRequest("GET", "/readyz", nil))
	assert.Equal(t, 200, w.Code, "after the Secret's rotation, the server still checking k1: %s", w.Body.String())
}
