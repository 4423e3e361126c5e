//go:build linux

package main

import (
	"io"
	"net/url"
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

	"github.com/drainkit/drainkit/examples/internal/manifest"
	"github.com/drainkit/drainkit/internal/apiflags"
)

// Every manifest a user may copy (the deploy files and the YAML of the
// README and docs/other-languages.md) that puts the supervisor in front of
// AgentENV wires it to AgentENV as the research note gives its API
// (shared/research/agentenv-and-ateom.md, "AgentENV's HTTP API, exactly"):
// listed sandboxes are keyed by sandboxID, not id (line 71), so -api
// agentenv; the DaemonSet serves the API on port 8000 (line 79); and the
// server spawns its own uvm-ublk-daemon (line 80), so the supervisor finds
// it by -daemon-socket and never starts a second one with -daemon. The
// generic manifest and both docs' copies of it ran AgentENV's image with the
// generic shape on port 8080 and a daemon of the supervisor's: copied in
// front of the real server, every list would be refused at a closed port
// (or, on 8000, find no "id": nothing preserved) and a second daemon would
// run beside the server's.
func TestManifestsThatRunAgentENVSpeakItsAPI(t *testing.T) {
	specs := userManifests(t)
	var agentenv []string
	for where, spec := range specs {
		c := supervisorContainer(t, spec.Containers)
		if !strings.Contains(strings.ToLower(c.Image+" "+c.Name), "agentenv") {
			continue // another server's manifest: the generic shape is its own choice
		}
		agentenv = append(agentenv, where)
		args := make([]string, 0, len(c.Command)-1+len(c.Args))
		for _, a := range append(slices.Clone(c.Command[1:]), c.Args...) {
			args = append(args, expand(c, strings.ReplaceAll(a, "$(DRAINKIT_GRACE_SECONDS)", "3600")))
		}
		t.Setenv(EnvHookSecret, "a-secret-of-this-test")
		cfg, err := parseArgs(args, io.Discard)
		require.NoError(t, err, "%s: the command line parses", where)
		assert.Equal(t, apiflags.AgentENV, cfg.api.API, "%s: runs AgentENV (%s) behind -api %s: its listing is keyed by sandboxID (research note line 71)", where, c.Image, cfg.api.API)
		u, err := url.Parse(cfg.serverURL)
		require.NoError(t, err)
		assert.Equal(t, "8000", u.Port(), "%s: -server-url %s: AgentENV serves its API on port 8000 (research note line 79)", where, cfg.serverURL)
		assert.Empty(t, cfg.daemon, "%s: -daemon starts a second ublk daemon: AgentENV spawns its own (research note line 80)", where)
		assert.NotEmpty(t, cfg.daemonSock, "%s: -daemon-socket names the server's own daemon", where)
	}
	slices.Sort(agentenv)
	assert.Contains(t, agentenv, "deploy/agentenv/overlay", "the overlay is checked as AgentENV's")
}

// userManifests returns the pod spec of every manifest a user may copy:
// the deploy files and the YAML of the README and docs/other-languages.md,
// keyed by where it is.
func userManifests(t *testing.T) map[string]corev1.PodSpec {
	t.Helper()
	specs := map[string]corev1.PodSpec{
		"deploy/daemonset.yaml": manifest.DaemonSet(t, "deploy/daemonset.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriod:").Spec.Template.Spec,
	}
	_, overlay := buildOverlay(t)
	specs["deploy/agentenv/overlay"] = overlay.Spec.Template.Spec
	for _, md := range []string{"README.md", "../../docs/other-languages.md"} {
		for where, spec := range yamlPodSpecs(t, md) {
			specs[where] = spec
		}
	}
	require.Len(t, specs, 5, "two deploy manifests, the README's and two in docs/other-languages.md")
	return specs
}

// yamlPodSpecs returns the pod spec of each ```yaml block of the Markdown
// file md, keyed by md:line: a pod's spec (spec: containers ...) or a
// DaemonSet's (spec: template: spec: ...), decoded strictly.
func yamlPodSpecs(t *testing.T, md string) map[string]corev1.PodSpec {
	t.Helper()
	raw, err := os.ReadFile(md)
	require.NoError(t, err)
	out := map[string]corev1.PodSpec{}
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```yaml" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		block := []byte(strings.Join(lines[start:i], "\n"))
		where := md + ":" + strconv.Itoa(start)
		var pod struct {
			Spec corev1.PodSpec `json:"spec"`
		}
		if err := yaml.UnmarshalStrict(block, &pod); err == nil {
			out[where] = pod.Spec
			continue
		}
		var ds appsv1.DaemonSet
		require.NoError(t, yaml.UnmarshalStrict(block, &ds), "%s: a pod's spec or a DaemonSet's", where)
		out[where] = ds.Spec.Template.Spec
	}
	return out
}
