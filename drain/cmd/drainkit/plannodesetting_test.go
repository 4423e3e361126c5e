package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The verdict of the kubelet's own termination, read from the node's
// KubeletConfiguration, said what the work needs and which setting gives
// it: "it needs 8s (shutdownGracePeriod less shutdownGracePeriodCriticalPods
// in the KubeletConfiguration)", whichever setting held the grace to what
// it is. Where a soft eviction's evictionMaxPodGracePeriod is the smaller
// grace, or the pod is critical (its slice is shutdownGracePeriodCriticalPods),
// or the node gives slices by priority, that named a setting that already
// gives the work enough, or none there is: an operator raised it and the
// plan still said DOES NOT FIT. It now names each setting below what the
// work needs, and its value then; put in the configuration, the plan says
// FITS, and a second less, DOES NOT FIT.
//
//	4 sandboxes, 2 at once, 3 s each: 6 s of work, 8 s of grace less its margin
//	shutdown 60 s (10 s critical), a soft eviction 5 s   -> evictionMaxPodGracePeriod: 8
//	shutdown 15 s (10 s critical): the slice 5 s         -> shutdownGracePeriod: 18s
//	a critical pod, shutdown 60 s (5 s critical)         -> shutdownGracePeriodCriticalPods: 8s, shutdownGracePeriod: 63s
//	by priority, 5 s for priority 0                      -> shutdownGracePeriodSeconds: 8
func TestNodeVerdictNamesTheKubeletSettingThatHoldsTheWork(t *testing.T) {
	dir := t.TempDir()
	n := 0
	config := func(body string) string {
		t.Helper()
		n++
		path := filepath.Join(dir, "kubelet"+string(rune('a'+n))+".yaml")
		require.NoError(t, os.WriteFile(path, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o600))
		return path
	}
	verdict := regexp.MustCompile(`node shutdown\s+(FITS|DOES NOT FIT)\s+(.*)`)
	plan := func(cfg string, priority string) (string, string) {
		t.Helper()
		_, out, errw := drainkit(t, "plan", "-count", "4", "-concurrency", "2", "-estimate", "3s", "-grace", "60",
			"-kubelet-config", cfg, "-priority", priority)
		require.Empty(t, errw)
		m := verdict.FindStringSubmatch(out)
		require.NotNil(t, m, out)
		return m[1], m[2]
	}
	for _, c := range []struct {
		name, priority, short, fixed, lessBy1, want string
	}{
		{"a soft eviction's grace is the smaller", "0",
			"shutdownGracePeriod: 60s\nshutdownGracePeriodCriticalPods: 10s\nevictionSoft: {memory.available: 1Gi}\nevictionMaxPodGracePeriod: 5\n",
			"shutdownGracePeriod: 60s\nshutdownGracePeriodCriticalPods: 10s\nevictionSoft: {memory.available: 1Gi}\nevictionMaxPodGracePeriod: 8\n",
			"shutdownGracePeriod: 60s\nshutdownGracePeriodCriticalPods: 10s\nevictionSoft: {memory.available: 1Gi}\nevictionMaxPodGracePeriod: 7\n",
			"it needs 8s: evictionMaxPodGracePeriod: 8 in the KubeletConfiguration"},
		{"the node shutdown's slice", "0",
			"shutdownGracePeriod: 15s\nshutdownGracePeriodCriticalPods: 10s\n",
			"shutdownGracePeriod: 18s\nshutdownGracePeriodCriticalPods: 10s\n",
			"shutdownGracePeriod: 17s\nshutdownGracePeriodCriticalPods: 10s\n",
			"it needs 8s: shutdownGracePeriod: 18s (10s of it shutdownGracePeriodCriticalPods, the critical pods') in the KubeletConfiguration"},
		{"a critical pod's slice", "2000001000",
			"shutdownGracePeriod: 60s\nshutdownGracePeriodCriticalPods: 5s\n",
			"shutdownGracePeriod: 63s\nshutdownGracePeriodCriticalPods: 8s\n",
			"shutdownGracePeriod: 62s\nshutdownGracePeriodCriticalPods: 7s\n",
			"it needs 8s: shutdownGracePeriodCriticalPods: 8s, and shutdownGracePeriod: 63s to keep the other pods' 55s, in the KubeletConfiguration"},
		{"slices by priority", "0",
			"shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 5}]\n",
			"shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 8}]\n",
			"shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 7}]\n",
			"it needs 8s: shutdownGracePeriodSeconds: 8 in the shutdownGracePeriodByPodPriority group of priority 0 in the KubeletConfiguration"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fits, says := plan(config(c.short), c.priority)
			assert.Equal(t, "DOES NOT FIT", fits, says)
			assert.Contains(t, says, c.want)
			fits, says = plan(config(c.fixed), c.priority)
			assert.Equal(t, "FITS", fits, "the setting named, put in the configuration: %s", says)
			fits, says = plan(config(c.lessBy1), c.priority)
			assert.Equal(t, "DOES NOT FIT", fits, "a second less: %s", says)
		})
	}
}
