package drain

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drainkit/drainkit/internal/fakesandbox"
)

// Fault (the user's first hour): NewServer read the pod's spec at start
// (the grace, the priority, the preStop sleeps) but not the preStop hook
// itself, so a manifest whose hook never reaches the drain ran until the
// drain with nothing said: the kubelet takes any answer to an httpGet hook
// for its end (no event, no line in its log), an exec hook that calls
// something else is a hook that worked, and the drain then starts only at
// SIGTERM, with no preStop wait, its gate closed only then. The seed's
// hook is such a one: a shell loop until GET /sandboxes says none is
// running, which waits out the whole grace and leaves SIGTERM 2 s. The
// start now says, once, what the container's hook does to the drain, and
// what to change.
//
//	NewServer, the pod's spec read   one line of the preStop hook:
//	  the seed's exec loop             Warn: calls neither drainhook nor GET /drain
//	  httpGet on srv's own port        Error: never reaches the drain, the server's own port
//	  httpGet to the hook, its secret  Info: reaches the hook
func TestTheStartSaysWhatThePreStopHookDoesToTheDrain(t *testing.T) {
	const seedLoop = `while true; do n=$(curl -s localhost:8080/sandboxes | jq length); [ "$n" = 0 ] && exit 0; echo "preStop: $n sandbox(es) remaining"; sleep 3; done`
	cases := []struct {
		name    string
		preStop *corev1.LifecycleHandler
		hostNet bool // the node's network, where an httpGet to 127.0.0.1 reaches the pod's loopback
		level   string
		said    []string
	}{{
		name:    "the seed's exec loop",
		preStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", seedLoop}}},
		level:   "WARN",
		said:    []string{"calls neither drainhook nor GET /drain", "starts only at SIGTERM", "up to the whole grace", "exec {command: [/drainhook]}"},
	}, {
		name: "httpGet on the server's own port",
		preStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromString("http"),
			Host: "127.0.0.1", HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Drain-Secret", Value: "s3cr3t-of-the-test"}}}},
		hostNet: true,
		level:   "ERROR",
		said:    []string{"never reaches the drain", "is the server's own (srv.Addr, 127.0.0.1:8080)", "starts only at SIGTERM", EnvHookListen + "=127.0.0.1:8082"},
	}, {
		name: "httpGet to the hook, its secret",
		preStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromString("hook"),
			Host: "127.0.0.1", HTTPHeaders: []corev1.HTTPHeader{{Name: "x-drain-secret", Value: "s3cr3t-of-the-test"}}}},
		hostNet: true,
		level:   "INFO",
		said:    []string{"the preStop httpGet http://127.0.0.1:8082/drain reaches the hook"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api := newPodAPI(t)
			inClusterOf(t, api)
			t.Setenv(EnvHookSecret, "s3cr3t-of-the-test")
			t.Setenv(EnvGrace, "30")
			api.SetGrace(30)
			api.SetHostNetwork(c.hostNet)
			api.SetContainers(corev1.Container{Name: "node",
				Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "hook", ContainerPort: 8082}},
				Lifecycle: &corev1.Lifecycle{PreStop: c.preStop}})
			logs := logToDefault(t)

			_, err := NewServer(&http.Server{Addr: "127.0.0.1:8080"}, fakesandbox.NewNode())
			require.NoError(t, err)
			var lines []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "preStop") && strings.Contains(l, "container=node") {
					lines = append(lines, l)
				}
			}
			require.Len(t, lines, 1, "one line of the hook, once:\n%s", logs)
			assert.Contains(t, lines[0], "level="+c.level)
			for _, s := range c.said {
				assert.Contains(t, lines[0], s)
			}
		})
	}
}

// startLines is NewServer's lines of container's preStop hook in logs.
func startLines(logs, container string) []string {
	var lines []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "preStop") && strings.Contains(l, "container="+container) {
			lines = append(lines, l)
		}
	}
	return lines
}

// Fault (row 3700): an exec hook that runs drainhook was said to reach
// the drain whatever its -url: drainhook then calls the URL given, not
// DRAINKIT_HOOK_LISTEN, and one at the server's own port gets its 404,
// one at another port a refused connection: drainhook gives up, exits 1,
// and the drain starts only at SIGTERM, while the start had said at Info
// that it starts at the hook's call. The -url is now judged as the
// httpGet's URL is.
//
//	NewServer, srv on 127.0.0.1:8080, the hook on 127.0.0.1:8082
//	  /drainhook -url http://127.0.0.1:8080/drain   Error: the server's own port
//	  /drainhook --url=http://127.0.0.1:9090/drain  Error: not the hook's port
//	  /drainhook -url http://127.0.0.1:8082/drain   Info: reaches the hook
//	  /drainhook                                    Info: DRAINKIT_HOOK_LISTEN
func TestTheStartJudgesDrainhooksURL(t *testing.T) {
	cases := []struct {
		cmd   []string
		level string
		said  string
	}{
		{[]string{"/drainhook", "-url", "http://127.0.0.1:8080/drain"}, "ERROR", "its port 8080 is the server's own"},
		{[]string{"/drainhook", "--url=http://127.0.0.1:9090/drain"}, "ERROR", "its port 9090 is not the hook's, 8082"},
		{[]string{"/drainhook", "-url", "http://127.0.0.1:8082/prestop"}, "ERROR", "its path /prestop is not /drain"},
		{[]string{"/drainhook", "-url", "http://127.0.0.1:8082/drain"}, "INFO", "drainhook calls http://127.0.0.1:8082/drain, the hook"},
		{[]string{"/drainhook"}, "INFO", "the preStop hook runs drainhook, which calls GET /drain at " + EnvHookListen},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.cmd, " "), func(t *testing.T) {
			api := newPodAPI(t)
			inClusterOf(t, api)
			t.Setenv(EnvGrace, "30")
			api.SetGrace(30)
			api.SetContainers(corev1.Container{Name: "node",
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: c.cmd}}}})
			logs := logToDefault(t)

			_, err := NewServer(&http.Server{Addr: "127.0.0.1:8080"}, fakesandbox.NewNode())
			require.NoError(t, err)
			lines := startLines(logs.String(), "node")
			require.Len(t, lines, 1, "one line of the hook, once:\n%s", logs)
			assert.Contains(t, lines[0], "level="+c.level)
			assert.Contains(t, lines[0], c.said)
		})
	}
}

// Fault (row 3701): the start read the preStop hooks of spec.containers
// alone, where the kubelet runs the hook of a native sidecar too (an init
// container with restartPolicy Always: kubecontainer.GetContainerSpec
// visits the init containers). A drainkit server in such a sidecar beside
// one app container was taken for the app (the only container read): its
// own hook, here on the server's own port, was never judged, and the line
// said of the app's that there was none.
//
//	pod: initContainers [drainkit (Always): httpGet :8080/drain]  containers [app]
//	this process mounts containers/drainkit/
//	  before: one line, container=app, Info "no preStop hook"
//	  after:  one line, container=drainkit, Error "the server's own"
func TestTheStartJudgesTheHookOfANativeSidecarServer(t *testing.T) {
	api := newPodAPI(t)
	inClusterOf(t, api)
	t.Setenv(EnvHookSecret, "s3cr3t-of-the-test")
	t.Setenv(EnvGrace, "30")
	api.SetGrace(30)
	api.SetHostNetwork(true)
	always := corev1.ContainerRestartPolicyAlways
	api.SetInitContainers(corev1.Container{Name: "drainkit", RestartPolicy: &always,
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt32(8080),
			Host: "127.0.0.1", HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Drain-Secret", Value: "s3cr3t-of-the-test"}}}}}})
	api.SetContainers(corev1.Container{Name: "app"})
	mountinfoOf(t, strings.ReplaceAll(serverMounts, "containers/server/", "containers/drainkit/"))
	logs := logToDefault(t)

	_, err := NewServer(&http.Server{Addr: "127.0.0.1:8080"}, fakesandbox.NewNode())
	require.NoError(t, err)
	assert.Empty(t, startLines(logs.String(), "app"), "the app's container is not this one")
	lines := startLines(logs.String(), "drainkit")
	require.Len(t, lines, 1, "one line of the sidecar's hook:\n%s", logs)
	assert.Contains(t, lines[0], "level=ERROR")
	assert.Contains(t, lines[0], "its port 8080 is the server's own")
}

// Fault (row 3702): a hook listening on localhost (DRAINKIT_HOOK_LISTEN
// localhost:8082, where net.Listen takes 127.0.0.1) and an httpGet with
// host 127.0.0.1 on the node's network, which reaches it, was said at
// Error never to reach the drain: its host "is not the address the hook
// listens on". False Errors are worse than silence.
//
//	hostNetwork, DRAINKIT_HOOK_LISTEN=localhost:8082
//	  httpGet host 127.0.0.1 port 8082 /drain, the secret   Info (was Error)
func TestTheStartTakesLocalhostForTheLoopbackItListensOn(t *testing.T) {
	api := newPodAPI(t)
	inClusterOf(t, api)
	t.Setenv(EnvHookListen, "localhost:8082")
	t.Setenv(EnvHookSecret, "s3cr3t-of-the-test")
	t.Setenv(EnvGrace, "30")
	api.SetGrace(30)
	api.SetHostNetwork(true)
	api.SetContainers(corev1.Container{Name: "node",
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt32(8082),
			Host: "127.0.0.1", HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Drain-Secret", Value: "s3cr3t-of-the-test"}}}}}})
	logs := logToDefault(t)

	_, err := NewServer(&http.Server{Addr: "127.0.0.1:8080"}, fakesandbox.NewNode())
	require.NoError(t, err)
	lines := startLines(logs.String(), "node")
	require.Len(t, lines, 1, "one line of the hook, once:\n%s", logs)
	assert.Contains(t, lines[0], "level=INFO")
	assert.Contains(t, lines[0], "reaches the hook")
}

// Fault (row 3703): a postStart hook that reaches GET /drain (an httpGet
// copied from the preStop, its secret included) is called by the kubelet
// as the container starts: the first call closes the gate and turns
// readiness off, taking the node out of service for its whole life, or,
// refused while the hook is not yet listened on, fails the postStart and
// the kubelet kills the container. The start read the spec and said
// nothing of it; it now says it at Error.
//
//	NewServer, the pod's spec read
//	  preStop httpGet to the hook, postStart the same   Error: postStart starts the drain
func TestTheStartSaysAPostStartHookThatCallsTheDrain(t *testing.T) {
	api := newPodAPI(t)
	inClusterOf(t, api)
	t.Setenv(EnvHookSecret, "s3cr3t-of-the-test")
	t.Setenv(EnvGrace, "30")
	api.SetGrace(30)
	api.SetHostNetwork(true)
	hook := &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt32(8082),
		Host: "127.0.0.1", HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Drain-Secret", Value: "s3cr3t-of-the-test"}}}}
	api.SetContainers(corev1.Container{Name: "node", Lifecycle: &corev1.Lifecycle{PreStop: hook, PostStart: hook}})
	logs := logToDefault(t)

	_, err := NewServer(&http.Server{Addr: "127.0.0.1:8080"}, fakesandbox.NewNode())
	require.NoError(t, err)
	var postStart []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "postStart") {
			postStart = append(postStart, l)
		}
	}
	require.Len(t, postStart, 1, "one line of the postStart hook:\n%s", logs)
	assert.Contains(t, postStart[0], "level=ERROR")
	assert.Contains(t, postStart[0], "container=node")
	assert.Contains(t, postStart[0], "as the container starts")
}
