package drain

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// ConfigFromEnv reads the manifest's variables as NewServer does, for a
// server that calls New itself (a review: a gRPC server copying the
// README's manifest had every DRAINKIT_* variable silently ignored), and
// its errors name the variable.
func TestConfigFromEnvReadsWhatNewServerReads(t *testing.T) {
	t.Setenv(EnvPodName, "")
	t.Setenv(EnvGrace, "90")
	t.Setenv(EnvPreserveEstimate, "3s")
	t.Setenv(EnvSandboxTimeout, "20s")
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, cfg.Budget.Grace())
	assert.Equal(t, 3*time.Second, cfg.Pause.Estimator.Estimate())
	assert.Equal(t, 20*time.Second, cfg.Pause.SandboxTimeout)
	assert.Nil(t, cfg.Pod, "no POD_NAME: no pod")
	assert.NotNil(t, cfg.Logger)

	for name, val := range map[string]string{EnvGrace: "ninety", EnvPreserveEstimate: "-3s", EnvSandboxTimeout: "soon"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, val)
			_, err := ConfigFromEnv()
			require.Error(t, err)
			assert.Contains(t, err.Error(), name+"=")
		})
	}
	t.Run("margin", func(t *testing.T) {
		assert.Equal(t, 5*time.Second, cfg.Budget.Margin(), "unset: a tenth of 90 s, at most 5 s")
		t.Setenv(EnvMargin, "12s")
		cfg, err := ConfigFromEnv()
		require.NoError(t, err)
		assert.Equal(t, 12*time.Second, cfg.Budget.Margin())
		t.Setenv(EnvMargin, "90")
		_, err = ConfigFromEnv()
		assert.ErrorContains(t, err, EnvMargin+`="90" with `+EnvGrace+`="90"`, "not shorter than the grace; the variable as set")
		t.Setenv(EnvMargin, "late")
		_, err = ConfigFromEnv()
		assert.ErrorContains(t, err, EnvMargin+`="late"`)
	})
	t.Run("unset grace", func(t *testing.T) {
		t.Setenv(EnvGrace, "")
		_, err := ConfigFromEnv()
		assert.ErrorContains(t, err, EnvGrace+" is not set")
	})
}

// sleepPlanned is the preStop sleep budget b plans with: how far before
// SIGTERM it puts T0.
func sleepPlanned(b interface {
	OnSIGTERM(time.Time) bool
	Start() time.Time
}) time.Duration {
	at := time.Now()
	b.OnSIGTERM(at)
	return at.Sub(b.Start())
}

// A preStop sleep hook calls no server: the kubelet sleeps, then sends
// SIGTERM with the sleep spent. DRAINKIT_PRESTOP_SLEEP declares it; before,
// the one-call path had no way to, and planned SIGKILL the sleep too late
// (G after SIGTERM instead of G − N).
func TestConfigFromEnvTakesThePreStopSleep(t *testing.T) {
	t.Setenv(EnvPodName, "")
	t.Setenv(EnvGrace, "30")
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	assert.Zero(t, sleepPlanned(cfg.Budget), "unset: none")

	t.Setenv(EnvPreStopSleep, "10")
	cfg, err = ConfigFromEnv()
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, sleepPlanned(cfg.Budget), "T0 the sleep before SIGTERM")

	t.Setenv(EnvPreStopSleep, "0")
	cfg, err = ConfigFromEnv()
	require.NoError(t, err)
	assert.Zero(t, sleepPlanned(cfg.Budget), "0 declares none")

	// The refusal of a bad value says that 0 is taken (it once said "want
	// a positive" only, of a variable whose "0" means no sleep).
	for val, want := range map[string]string{"forever": EnvPreStopSleep + `="forever": want whole seconds (3600) or a positive Go duration (1h), or 0 for no preStop sleep`,
		"-5": EnvPreStopSleep + `="-5": want a positive number of seconds, or 0 for no preStop sleep`,
		"31": "a preStop sleep of 31s"} {
		t.Setenv(EnvPreStopSleep, val)
		_, err = ConfigFromEnv()
		assert.ErrorContains(t, err, want, val)
	}
}

// With the pod's API access the spec says: a pod of one container gives
// its sleep, over a variable that differs (logged at Error); in a pod of
// several the variable says which is this one's, and unset the longest is
// planned with (early, never late), logged at Warn.
func TestConfigFromEnvReadsThePreStopSleepFromThePodsSpec(t *testing.T) {
	api := newPodAPI(t)
	api.SetGrace(30)
	inClusterOf(t, api)
	t.Setenv(EnvGrace, "")
	sleep := func(name string, s int64) corev1.Container {
		return corev1.Container{Name: name, Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}}}
	}
	logs := logToDefault(t)
	planned := func() time.Duration {
		t.Helper()
		cfg, err := ConfigFromEnv()
		require.NoError(t, err)
		return sleepPlanned(cfg.Budget)
	}

	api.SetContainers(sleep("server", 7))
	assert.Equal(t, 7*time.Second, planned(), "the one container's")
	t.Setenv(EnvPreStopSleep, "3")
	assert.Equal(t, 7*time.Second, planned(), "the spec's, which the kubelet sleeps")
	assert.Contains(t, logs.String(), `level=ERROR msg="drain: `+EnvPreStopSleep+`=3s is not the container's lifecycle.preStop.sleep.seconds, 7s`)

	api.SetContainers(sleep("server", 0), sleep("proxy", 12), sleep("agent", 4))
	assert.Equal(t, 3*time.Second, planned(), "several: the variable says")
	t.Setenv(EnvPreStopSleep, "")
	assert.Equal(t, 12*time.Second, planned(), "unset: the longest")
	assert.Contains(t, logs.String(), "planning with the longest, 12s (proxy's)")

	api.Refuse(http.StatusForbidden)
	t.Setenv(EnvGrace, "30")
	t.Setenv(EnvPreStopSleep, "5")
	assert.Equal(t, 5*time.Second, planned(), "unread: the variable")
	assert.Contains(t, logs.String(), "the pod's preStop sleep hooks could not be read")
}

// mountinfoOf points mountinfoPath at a mount table for the test.
func mountinfoOf(t *testing.T, table string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mountinfo")
	require.NoError(t, os.WriteFile(path, []byte(table), 0o600))
	old := mountinfoPath
	mountinfoPath = path
	t.Cleanup(func() { mountinfoPath = old })
}

// A container's mount table, as the kubelet and containerd make it: its
// termination message file is bind-mounted from the kubelet's directory of
// this container.
const serverMounts = `1510 1409 0:144 / / rw,relatime master:437 - overlay overlay rw,lowerdir=/var/lib/containerd/l1,upperdir=/var/lib/containerd/u,workdir=/var/lib/containerd/w
1514 1510 8:1 /var/lib/kubelet/pods/5d1c6b0e-2f4b-4a57-9d3b-8c1f0e6a7b21/etc-hosts /etc/hosts rw,relatime - ext4 /dev/sda1 rw
1515 1510 8:1 /var/lib/kubelet/pods/5d1c6b0e-2f4b-4a57-9d3b-8c1f0e6a7b21/containers/server/0a1b2c3d /dev/termination-log rw,relatime - ext4 /dev/sda1 rw
1516 1510 8:1 /var/lib/kubelet/pods/5d1c6b0e-2f4b-4a57-9d3b-8c1f0e6a7b21/volumes/kubernetes.io~empty-dir/state /state rw,relatime - ext4 /dev/sda1 rw
`

// Fault (a review of row 394): in a pod of several containers the longest
// preStop sleep was planned with, whichever was this container's: a server
// with no hook beside a sidecar sleeping 20 s of a 30 s grace planned
// SIGKILL 10 s after SIGTERM. This process's container is the one whose
// kubelet directory it has mounted.
func TestConfigFromEnvTakesItsOwnContainersSleep(t *testing.T) {
	api := newPodAPI(t)
	api.SetGrace(30)
	inClusterOf(t, api)
	t.Setenv(EnvGrace, "")
	t.Setenv(EnvPreStopSleep, "")
	api.SetContainers(corev1.Container{Name: "server"},
		corev1.Container{Name: "proxy", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 20}}}})
	mountinfoOf(t, serverMounts)
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	assert.Zero(t, sleepPlanned(cfg.Budget), "the server's own: none")

	mountinfoOf(t, strings.ReplaceAll(serverMounts, "containers/server/", "containers/elsewhere/"))
	cfg, err = ConfigFromEnv()
	require.NoError(t, err)
	assert.Equal(t, 20*time.Second, sleepPlanned(cfg.Budget), "a container not in the spec: not known, the longest")
}

func TestMountedContainerNamesOneContainerOrNone(t *testing.T) {
	name, known := mountedContainer(serverMounts)
	assert.True(t, known)
	assert.Equal(t, "server", name)
	// As the real kubelet v1.34.4 and containerd mounted it for a static
	// pod named mi (its directory on a tmpfs; a static pod's UID is a hash).
	name, known = mountedContainer("117 101 0:39 /kubelet/pods/525dad15216b8a8169609eba96c794ed/containers/mi/85d2b754 /dev/termination-log rw,relatime - tmpfs tmpfs rw,mode=755\n")
	assert.True(t, known)
	assert.Equal(t, "mi", name)
	_, known = mountedContainer("1510 1409 0:144 / / rw - overlay overlay rw\n")
	assert.False(t, known, "no kubelet directory: outside a pod")
	two := serverMounts + "1517 1510 8:1 /var/lib/kubelet/pods/5d1c6b0e-2f4b-4a57-9d3b-8c1f0e6a7b21/containers/proxy/9f8e /extra rw - ext4 /dev/sda1 rw\n"
	_, known = mountedContainer(two)
	assert.False(t, known, "two names: not known")
}

// "0s" declares no sleep as "0" does; the error of a sleep longer than the
// grace names the sleep, also with a margin set.
func TestPreStopSleepZeroDurationAndErrors(t *testing.T) {
	t.Setenv(EnvPodName, "")
	t.Setenv(EnvGrace, "30")
	t.Setenv(EnvPreStopSleep, "0s")
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	assert.Zero(t, sleepPlanned(cfg.Budget))

	t.Setenv(EnvPreStopSleep, "31")
	t.Setenv(EnvMargin, "2s")
	_, err = ConfigFromEnv()
	assert.ErrorContains(t, err, EnvMargin+`="2s" and a preStop sleep of 31s (`+EnvPreStopSleep+`="31", or the pod's spec) with `+EnvGrace+`="30"`)
}

// Fault (a docs review): a budget that the grace could not hold named
// DRAINKIT_GRACE with the parsed grace ("30s" of a variable set to "30"),
// and named it too when the grace came from the pod's spec, the variable
// unset. The error names the grace as it was given.
func TestConfigFromEnvNamesTheGraceWhereItCameFrom(t *testing.T) {
	api := newPodAPI(t)
	api.SetGrace(30)
	inClusterOf(t, api)
	t.Setenv(EnvGrace, "")
	t.Setenv(EnvMargin, "40")
	_, err := ConfigFromEnv()
	assert.ErrorContains(t, err, EnvMargin+`="40" with a grace of 30s (the pod's spec.terminationGracePeriodSeconds)`)
	assert.NotContains(t, err.Error(), EnvGrace)

	t.Setenv(EnvGrace, "30")
	_, err = ConfigFromEnv()
	assert.ErrorContains(t, err, EnvMargin+`="40" with `+EnvGrace+`="30"`, "the variable as set, the spec agreeing")
}

// Fault: a server that read the manifest with ConfigFromEnv and brought a
// Preserver of its own (made with pause.New, wrapped) had
// DRAINKIT_SANDBOX_TIMEOUT and DRAINKIT_PRESERVE_ESTIMATE silently
// ignored: Config.Pause configures only the default Preserver, and New
// took it beside a Preserver without a word, so the plan reserved the
// Preserver's own 1 s estimate for preserves the manifest said take 3 s,
// and no preserve was bounded. New now refuses the two together, naming
// the fields set and the variables. docs/faults.md row 476.
func TestPauseConfigBesideAPreserverOfItsOwnIsRefused(t *testing.T) {
	t.Setenv(EnvPodName, "")
	t.Setenv(EnvGrace, "90")
	t.Setenv(EnvPreserveEstimate, "3s")
	t.Setenv(EnvSandboxTimeout, "20s")
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	node := fakesandbox.NewNode()
	own, err := pause.New(node, pause.Config{})
	require.NoError(t, err)
	cfg.Sandboxes, cfg.Preserver = node, own
	d, err := New(cfg)
	if err == nil {
		t.Fatalf("New took Config.Pause beside Config.Preserver: the plan's estimate is %v, not the manifest's 3s; no preserve is bounded by its 20s",
			d.preserver.Estimator().Estimate())
	}
	assert.ErrorContains(t, err, "drain: Config.Pause (SandboxTimeout, Estimator) is set, but so is Config.Preserver")
	assert.ErrorContains(t, err, EnvSandboxTimeout)

	cfg.Pause = pause.Config{}
	_, err = New(cfg)
	assert.NoError(t, err, "a Preserver with a zero Config.Pause")
}

// Fault (row 3840): the preStop sleeps were read from spec.containers
// alone, where the kubelet v1.34 runs a native sidecar's sleep too (an
// init container with restartPolicy Always; kubecontainer.GetContainerSpec
// visits the init containers). A drainkit server in such a sidecar
// sleeping 10 s of a 30 s grace, beside an app sleeping 20 s, was not in
// the sleeps read, so its container was not known: it planned with the
// longest, the app's.
//
//	pod: initContainers [drainkit (Always): sleep 10 s]  containers [app: sleep 20 s]
//	this process mounts containers/drainkit/
//	  before: planned 20 s (the app's, "not known")
//	  after:  planned 10 s (its own)
func TestConfigFromEnvTakesANativeSidecarServersOwnSleep(t *testing.T) {
	api := newPodAPI(t)
	api.SetGrace(30)
	inClusterOf(t, api)
	t.Setenv(EnvGrace, "")
	t.Setenv(EnvPreStopSleep, "")
	sleep := func(s int64) *corev1.Lifecycle {
		return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}}
	}
	always := corev1.ContainerRestartPolicyAlways
	api.SetInitContainers(corev1.Container{Name: "setup", Lifecycle: sleep(25)},
		corev1.Container{Name: "drainkit", RestartPolicy: &always, Lifecycle: sleep(10)})
	api.SetContainers(corev1.Container{Name: "app", Lifecycle: sleep(20)})
	mountinfoOf(t, strings.ReplaceAll(serverMounts, "containers/server/", "containers/drainkit/"))
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, sleepPlanned(cfg.Budget), "the sidecar's own sleep")

	mountinfoOf(t, strings.ReplaceAll(serverMounts, "containers/server/", "containers/setup/"))
	cfg, err = ConfigFromEnv()
	require.NoError(t, err)
	assert.Equal(t, 20*time.Second, sleepPlanned(cfg.Budget),
		"an init container that ran to its end sleeps no more: not known, the longest of those the kubelet runs")
}
