package kubeletconf_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/kubeletconf"
	"github.com/drainkit/drainkit/kube"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// shutdownGracePeriod and its critical part make two groups, as the
// kubelet's migrateConfig does: the pods below SystemCriticalPriority get
// the whole less the critical part, in whole seconds; the critical ones
// the rest.
func TestShutdownGracePeriodMakesTwoGroups(t *testing.T) {
	c, err := kubeletconf.Parse([]byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
shutdownGracePeriod: 30s
shutdownGracePeriodCriticalPods: 10500ms
`))
	require.NoError(t, err)
	for priority, want := range map[int32]time.Duration{
		0:                                      19 * time.Second, // 19.5 s, whole seconds
		-5:                                     19 * time.Second, // below every group: the lowest
		1000:                                   19 * time.Second,
		kubeletconf.SystemCriticalPriority - 1: 19 * time.Second,
		kubeletconf.SystemCriticalPriority:     10 * time.Second, // 30 - 19.5 = 10.5
		kubeletconf.SystemCriticalPriority + 1000: 10 * time.Second, // system-node-critical
	} {
		got, ok := c.ShutdownGrace(priority)
		assert.True(t, ok)
		assert.Equal(t, want, got, "priority %d", priority)
	}
	_, ok := c.SoftEvictionGrace()
	assert.False(t, ok, "no soft thresholds: no soft eviction")
}

// shutdownGracePeriodByPodPriority, in any order: a pod belongs to the
// group of the highest priority not above its own (the kubelet's
// groupByPriority), one below every group to the lowest.
func TestShutdownGracePeriodByPodPriority(t *testing.T) {
	c, err := kubeletconf.Parse([]byte(`{"kind": "KubeletConfiguration",
"shutdownGracePeriodByPodPriority": [
  {"priority": 100000, "shutdownGracePeriodSeconds": 120},
  {"priority": 0, "shutdownGracePeriodSeconds": 30},
  {"priority": 2000000000, "shutdownGracePeriodSeconds": 10},
  {"priority": 10000, "shutdownGracePeriodSeconds": 60}]}`))
	require.NoError(t, err)
	for priority, want := range map[int32]time.Duration{
		-1: 30 * time.Second, 0: 30 * time.Second, 9999: 30 * time.Second, 10000: 60 * time.Second,
		99999: 60 * time.Second, 100000: 120 * time.Second, 2000000000: 10 * time.Second, 2000001000: 10 * time.Second,
	} {
		got, ok := c.ShutdownGrace(priority)
		assert.True(t, ok)
		assert.Equal(t, want, got, "priority %d", priority)
	}
}

// Every pod's slice given to the critical ones leaves the others none: the
// kubelet still gives them its 1 s.
func TestAShutdownGroupOfNoTimeGivesOneSecond(t *testing.T) {
	c, err := kubeletconf.Parse([]byte("kind: KubeletConfiguration\nshutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 30s\n"))
	require.NoError(t, err)
	g, ok := c.ShutdownGrace(0)
	assert.True(t, ok)
	assert.Equal(t, time.Second, g)
	g, _ = c.ShutdownGrace(kubeletconf.SystemCriticalPriority)
	assert.Equal(t, 30*time.Second, g)
}

func TestGracefulNodeShutdownOff(t *testing.T) {
	c, err := kubeletconf.Parse([]byte("kind: KubeletConfiguration\n"))
	require.NoError(t, err)
	_, ok := c.ShutdownGrace(0)
	assert.False(t, ok)
}

// A soft eviction gives evictionMaxPodGracePeriod, and at least the 1 s
// the kubelet always gives (its default, 0, is 1 s).
func TestSoftEvictionGrace(t *testing.T) {
	for doc, want := range map[string]time.Duration{
		"evictionSoft: {memory.available: 500Mi}\nevictionMaxPodGracePeriod: 45": 45 * time.Second,
		"evictionSoft: {memory.available: 500Mi}":                                time.Second,
	} {
		c, err := kubeletconf.Parse([]byte("kind: KubeletConfiguration\n" + doc))
		require.NoError(t, err)
		got, ok := c.SoftEvictionGrace()
		assert.True(t, ok, doc)
		assert.Equal(t, want, got, doc)
	}
}

func TestParseSaysWhatIsWrong(t *testing.T) {
	for doc, want := range map[string]string{
		"shutdownGracePeriod: 30s": "no kind",
		"kind: Pod":                "a Pod, not a KubeletConfiguration",
		"kind: KubeletConfiguration\nshutdownGracePeriod: soon":                                                                                  "not a KubeletConfiguration",
		"kind: KubeletConfiguration\nshutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s":                                             "shutdownGracePeriodCriticalPods 20s is more than shutdownGracePeriod 10s",
		"kind: KubeletConfiguration\nshutdownGracePeriod: -10s":                                                                                  "must not be negative",
		"kind: KubeletConfiguration\nshutdownGracePeriod: 10s\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 5}]": "the kubelet takes one",
		"{{": "not a KubeletConfiguration",
	} {
		_, err := kubeletconf.Parse([]byte(doc))
		assert.ErrorContains(t, err, want, doc)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte("kind: Pod"), 0o600))
	_, err := kubeletconf.Read(path)
	assert.ErrorContains(t, err, path+": a Pod")
	_, err = kubeletconf.Read(filepath.Join(t.TempDir(), "none.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func Example() {
	c, err := kubeletconf.Parse([]byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
shutdownGracePeriod: 30s
shutdownGracePeriodCriticalPods: 10s
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	g, _ := c.ShutdownGrace(0)
	critical, _ := c.ShutdownGrace(kubeletconf.SystemCriticalPriority + 1000) // system-node-critical
	fmt.Println(g, critical)
	// Output: 20s 10s
}

// OwnGrace is what drain.Config.KubeletGrace wants: the smaller of the
// node shutdown's slice and a soft eviction's grace; LeastOwnGrace the
// least any priority gets.
func TestOwnGrace(t *testing.T) {
	c, err := kubeletconf.Parse([]byte("kind: KubeletConfiguration\nshutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n"))
	require.NoError(t, err)
	g, ok := c.OwnGrace(0)
	assert.True(t, ok)
	assert.Equal(t, 20*time.Second, g)
	g, _ = c.LeastOwnGrace()
	assert.Equal(t, 10*time.Second, g, "the critical pods' slice")

	c, err = kubeletconf.Parse([]byte("kind: KubeletConfiguration\nshutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\nevictionSoft: {memory.available: 1Gi}\nevictionMaxPodGracePeriod: 15\n"))
	require.NoError(t, err)
	g, _ = c.OwnGrace(0)
	assert.Equal(t, 15*time.Second, g, "a soft eviction gives less")
	g, _ = c.OwnGrace(kubeletconf.SystemCriticalPriority)
	assert.Equal(t, 10*time.Second, g)

	c, err = kubeletconf.Parse([]byte("kind: KubeletConfiguration\nevictionSoft: {memory.available: 1Gi}\nevictionMaxPodGracePeriod: 15\n"))
	require.NoError(t, err)
	g, ok = c.LeastOwnGrace()
	assert.True(t, ok)
	assert.Equal(t, 15*time.Second, g, "no node shutdown: the eviction's")

	c, err = kubeletconf.Parse([]byte("kind: KubeletConfiguration\n"))
	require.NoError(t, err)
	_, ok = c.OwnGrace(0)
	assert.False(t, ok)
	_, ok = c.LeastOwnGrace()
	assert.False(t, ok)
}

// Without the pod's API access a server cannot tell the kubelet's own
// termination from a deletion: either setting is ignored, saying why;
// a file that cannot be read is still an error, and both settings are.
func TestResolveWithoutThePod(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte("kind: KubeletConfiguration\nshutdownGracePeriod: 30s\n"), 0o600))
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for _, s := range []kubeletconf.Setting{{Grace: 25 * time.Second}, {Config: path}} {
		s.GraceName, s.ConfigName = "-kubelet-grace", "-kubelet-config"
		g, err := s.Resolve(t.Context(), nil, log, "(-pod): why")
		require.NoError(t, err)
		assert.Zero(t, g)
	}
	assert.Contains(t, logs.String(), `"-kubelet-grace is ignored without the pod's API access (-pod): why"`)
	assert.Contains(t, logs.String(), `"-kubelet-config is ignored without the pod's API access (-pod): why"`)

	_, err := kubeletconf.Setting{ConfigName: "-kubelet-config", Config: filepath.Join(t.TempDir(), "none")}.Resolve(t.Context(), nil, log, "")
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, "-kubelet-config: ")
	_, err = kubeletconf.Setting{GraceName: "G", ConfigName: "C", Grace: time.Second, Config: path}.Resolve(t.Context(), nil, log, "")
	assert.ErrorContains(t, err, "C and G are both set")
	g, err := kubeletconf.Setting{}.Resolve(t.Context(), nil, log, "")
	assert.NoError(t, err)
	assert.Zero(t, g, "neither: not known")
}

// A negative evictionMaxPodGracePeriod is one the kubelet runs with (it does not
// validate the field; its flag's help says "If negative, defer to pod specified
// value"), and its soft evictions then give the 1 s it always gives: the override
// below the pod's grace wins, and is raised to 1 s (calculateEffectiveGracePeriod,
// v1.34.4). Fault: Parse refused it, "evictionMaxPodGracePeriod must not be
// negative", so a server given such a node's configuration (-kubelet-config,
// DRAINKIT_KUBELET_CONFIG) failed to start naming the file, where its kubelet ran.
func TestNegativeEvictionMaxPodGracePeriodGivesOneSecond(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte("kind: KubeletConfiguration\nevictionSoft: {memory.available: 500Mi}\nevictionMaxPodGracePeriod: -1\n"), 0o600))
	c, err := kubeletconf.Read(path)
	require.NoError(t, err)
	g, ok := c.SoftEvictionGrace()
	assert.True(t, ok)
	assert.Equal(t, time.Second, g)

	s := kubeletconf.Setting{GraceName: "-kubelet-grace", ConfigName: "-kubelet-config", Config: path,
		Priority: func() (int32, error) { return 0, nil }}
	g, err = s.Resolve(t.Context(), &kube.Pod{}, slog.New(slog.DiscardHandler), "")
	require.NoError(t, err)
	assert.Equal(t, time.Second, g, "the kubelet's own grace")
}

// A shutdownGracePeriod or shutdownGracePeriodCriticalPods between zero and one
// second is a configuration the kubelet refuses to start with ("must be either zero
// or otherwise >= 1 sec", its validation, v1.34.4), and Parse says so, as its doc
// says of every duration the kubelet would refuse. Fault: Parse took 500ms and made
// a group of it (1 s), a number no running kubelet's configuration gives.
func TestSubSecondShutdownGracePeriodIsRefusedAsTheKubeletDoes(t *testing.T) {
	for doc, want := range map[string]string{
		"shutdownGracePeriod: 500ms":                                       "shutdownGracePeriod 500ms must be zero or at least 1s",
		"shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 500ms": "shutdownGracePeriodCriticalPods 500ms must be zero or at least 1s",
	} {
		_, err := kubeletconf.Parse([]byte("kind: KubeletConfiguration\n" + doc))
		assert.ErrorContains(t, err, want, doc)
	}
	_, err := kubeletconf.Parse([]byte("kind: KubeletConfiguration\nshutdownGracePeriod: 1500ms\nshutdownGracePeriodCriticalPods: 1s"))
	assert.NoError(t, err, "1 s and more, whole or not, the kubelet takes")
}

// A group of shutdownGracePeriodByPodPriority whose shutdownGracePeriodSeconds is
// negative is one the kubelet runs with (its validation does not look at the
// groups' seconds): its pods get the 1 s it always gives, as a group of no time
// (the override below the pod's grace, raised to 1 by calculateEffectiveGracePeriod,
// v1.34.4). Fault: Parse refused it, "shutdownGracePeriodByPodPriority[0]...must not
// be negative", so a server given such a node's configuration failed to start.
func TestANegativeShutdownGroupGivesOneSecond(t *testing.T) {
	c, err := kubeletconf.Parse([]byte("kind: KubeletConfiguration\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: -5}, {priority: 100000, shutdownGracePeriodSeconds: 60}]"))
	require.NoError(t, err)
	g, ok := c.ShutdownGrace(0)
	assert.True(t, ok)
	assert.Equal(t, time.Second, g)
	g, _ = c.ShutdownGrace(100000)
	assert.Equal(t, time.Minute, g)
	g, _ = c.LeastOwnGrace()
	assert.Equal(t, time.Second, g)
}

// Two groups of shutdownGracePeriodByPodPriority at one priority are a
// configuration the kubelet runs with (its validation does not look at the
// groups' priorities). It sorts the groups with sort.Slice and puts a pod in the
// first group, in that order, whose priority is not below the pod's, stepping
// back one when that priority is above it (newPodManager, groupByPriority,
// v1.34.4): a pod exactly at the shared priority gets the first of the two, one
// above it the last. Fault: ShutdownGrace took the last group at or below the
// pod's priority, so a pod at 0 with groups [0: 10 s, 0: 20 s] was given 20 s
// where the kubelet gives it 10 s, and its drain planned 10 s it never has.
func TestTwoShutdownGroupsAtOnePriorityGiveWhatTheKubeletGives(t *testing.T) {
	c, err := kubeletconf.Parse([]byte("kind: KubeletConfiguration\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 10}, {priority: 0, shutdownGracePeriodSeconds: 20}, {priority: 1000, shutdownGracePeriodSeconds: 60}]"))
	require.NoError(t, err, "the kubelet runs with it")
	for priority, want := range map[int32]time.Duration{
		-1: 10 * time.Second, 0: 10 * time.Second, // below or at 0: the first group of 0
		1: 20 * time.Second, 999: 20 * time.Second, // above 0: the last
		1000: time.Minute,
	} {
		got, ok := c.ShutdownGrace(priority)
		assert.True(t, ok)
		assert.Equal(t, want, got, "priority %d", priority)
	}
	g, _ := c.LeastOwnGrace()
	assert.Equal(t, 10*time.Second, g)

	// With no priority between the two groups of 0 and the next group, no pod is
	// in the second group of 0: the least any priority gets is the first's.
	c, err = kubeletconf.Parse([]byte("kind: KubeletConfiguration\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 20}, {priority: 0, shutdownGracePeriodSeconds: 10}, {priority: 1, shutdownGracePeriodSeconds: 30}]"))
	require.NoError(t, err)
	g, _ = c.ShutdownGrace(0)
	assert.Equal(t, 20*time.Second, g)
	g, _ = c.LeastOwnGrace()
	assert.Equal(t, 20*time.Second, g, "no pod gets the group of 10 s")
	// With one, the pods between get the second group's 10 s.
	c, err = kubeletconf.Parse([]byte("kind: KubeletConfiguration\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 20}, {priority: 0, shutdownGracePeriodSeconds: 10}, {priority: 5, shutdownGracePeriodSeconds: 30}]"))
	require.NoError(t, err)
	g, _ = c.ShutdownGrace(4)
	assert.Equal(t, 10*time.Second, g)
	g, _ = c.LeastOwnGrace()
	assert.Equal(t, 10*time.Second, g)

	// sort.Slice is not stable: past 12 groups the kubelet's order of two groups of
	// one priority is not the file's. Here it puts the 20 s group first (the
	// kubelet v1.34.4, built with go1.26.8, runs this sort): pods at 0 get 20 s,
	// the ones above it 10 s.
	c, err = kubeletconf.Parse([]byte(`{"kind": "KubeletConfiguration", "shutdownGracePeriodByPodPriority": [
  {"priority": 0, "shutdownGracePeriodSeconds": 10}, {"priority": 0, "shutdownGracePeriodSeconds": 20},
  {"priority": 3000, "shutdownGracePeriodSeconds": 30}, {"priority": 7000, "shutdownGracePeriodSeconds": 40},
  {"priority": 11000, "shutdownGracePeriodSeconds": 50}, {"priority": 5000, "shutdownGracePeriodSeconds": 60},
  {"priority": 8000, "shutdownGracePeriodSeconds": 70}, {"priority": 6000, "shutdownGracePeriodSeconds": 80},
  {"priority": 10000, "shutdownGracePeriodSeconds": 90}, {"priority": 4000, "shutdownGracePeriodSeconds": 100},
  {"priority": 1000, "shutdownGracePeriodSeconds": 110}, {"priority": 2000, "shutdownGracePeriodSeconds": 120},
  {"priority": 9000, "shutdownGracePeriodSeconds": 130}]}`))
	require.NoError(t, err)
	g, _ = c.ShutdownGrace(0)
	assert.Equal(t, 20*time.Second, g)
	g, _ = c.ShutdownGrace(1)
	assert.Equal(t, 10*time.Second, g)
}

// Raise names every setting that holds the kubelet's own grace below the
// one asked for, each with the value that gives it, and none once they
// give it: a soft eviction's 5 s and a node shutdown's 20 s slice, for 25 s.
func TestRaiseNamesEverySettingBelowTheGrace(t *testing.T) {
	c, err := kubeletconf.Parse([]byte("kind: KubeletConfiguration\nshutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n" +
		"evictionSoft: {memory.available: 1Gi}\nevictionMaxPodGracePeriod: 5\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"evictionMaxPodGracePeriod: 25", "shutdownGracePeriod: 35s (10s of it shutdownGracePeriodCriticalPods, the critical pods')"},
		c.Raise(0, 25*time.Second))
	assert.Equal(t, []string{"evictionMaxPodGracePeriod: 20"}, c.Raise(0, 20*time.Second), "the slice gives 20 s")
	assert.Empty(t, c.Raise(0, 5*time.Second))
}
