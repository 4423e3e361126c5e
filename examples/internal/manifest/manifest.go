package manifest

import (
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/drainkit/drainkit/internal/listenaddr"
)

// DaemonSet reads the manifest at path and decodes it strictly: a field
// the Kubernetes types do not have fails the test. It proves the decoding
// strict by misspelling the manifest's first from as to, which must then
// fail, and checks the manifest is a DaemonSet.
func DaemonSet(t testing.TB, path, from, to string) appsv1.DaemonSet {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var ds appsv1.DaemonSet
	require.NoError(t, yaml.UnmarshalStrict(raw, &ds))
	require.Contains(t, string(raw), from, "the field to misspell")
	misspelt := strings.Replace(string(raw), from, to, 1)
	require.Error(t, yaml.UnmarshalStrict([]byte(misspelt), &appsv1.DaemonSet{}), "strict decoding catches a misspelt field")
	assert.Equal(t, "DaemonSet", ds.Kind)
	return ds
}

// Env returns the value the container's env gives the variable name, the
// last one when it is listed twice as the kubelet does, or "".
func Env(c corev1.Container, name string) string {
	value := ""
	for _, e := range c.Env {
		if e.Name == name {
			value = e.Value
		}
	}
	return value
}

// Port resolves a named or numeric container port to its number.
func Port(c corev1.Container, port string) string {
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == port })
	if i < 0 {
		return port
	}
	return strconv.Itoa(int(c.Ports[i].ContainerPort))
}

// CheckDrainHook checks the container's preStop hook: an httpGet (so the
// drain sees T0 itself, as an exec hook would not let it) of /drain on the
// port of hookListen, the -hook-listen address, sending the secret in its
// one header, X-Drain-Secret.
func CheckDrainHook(t testing.TB, c corev1.Container, hookListen, secret string) {
	t.Helper()
	require.NotNil(t, c.Lifecycle)
	require.NotNil(t, c.Lifecycle.PreStop)
	hook := c.Lifecycle.PreStop.HTTPGet
	require.NotNil(t, hook, "preStop is an httpGet: the drain sees T0 itself")
	assert.Equal(t, "/drain", hook.Path)
	_, hookPort, err := net.SplitHostPort(hookListen)
	require.NoError(t, err)
	assert.Equal(t, hookPort, Port(c, hook.Port.String()), "the hook goes to -hook-listen's port")
	require.Len(t, hook.HTTPHeaders, 1)
	assert.Equal(t, "X-Drain-Secret", hook.HTTPHeaders[0].Name)
	assert.Equal(t, secret, hook.HTTPHeaders[0].Value, "the hook sends the secret the drain expects")
}

// Secret checks that the container's variable env holds the preStop hook
// secret the manifests ship for the reader to replace (a public
// placeholder: listenaddr.CheckSecret) and that parse, run with it set,
// refuses it naming env, so a manifest applied as it is fails at start
// instead of guarding the hook with nothing. It then sets env to a secret
// of the test's own for the rest of the test and returns it.
func Secret(t testing.TB, c corev1.Container, env string, parse func() error) string {
	t.Helper()
	placeholder := Env(c, env)
	require.Error(t, listenaddr.CheckSecret(env, placeholder), "the manifest's %s is the placeholder to replace: %q", env, placeholder)
	t.Setenv(env, placeholder)
	err := parse()
	require.Error(t, err, "the placeholder %s is refused", env)
	assert.Contains(t, err.Error(), env+" is the manifest's placeholder")
	const secret = "a-secret-of-this-test"
	t.Setenv(env, secret)
	return secret
}
