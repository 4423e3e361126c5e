package kubeletconf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/drainkit/drainkit/kube"
)

// Kind is the kind of a KubeletConfiguration document.
const Kind = "KubeletConfiguration"

// SystemCriticalPriority is the priority of the system-node-critical and
// system-cluster-critical classes' floor, the critical pods of
// shutdownGracePeriodCriticalPods (k8s.io/kubernetes/pkg/apis/scheduling).
const SystemCriticalPriority = 2_000_000_000

// A Config is the part of a KubeletConfiguration that says what the
// kubelet's own terminations give a pod.
type Config struct {
	Kind                            string          `json:"kind"`
	ShutdownGracePeriod             metav1.Duration `json:"shutdownGracePeriod"`
	ShutdownGracePeriodCriticalPods metav1.Duration `json:"shutdownGracePeriodCriticalPods"`
	// ShutdownGracePeriodByPodPriority, when set, replaces the two above
	// (the kubelet refuses both at once).
	ShutdownGracePeriodByPodPriority []PriorityGrace `json:"shutdownGracePeriodByPodPriority"`
	// EvictionSoft holds the soft eviction thresholds; none, no soft
	// eviction happens.
	EvictionSoft map[string]string `json:"evictionSoft"`
	// EvictionMaxPodGracePeriod is the most a soft eviction gives a pod,
	// in seconds. The kubelet takes any value: one below 1, negative
	// included (its flag's help says a negative one defers to the pod's
	// grace), gives the 1 s it always gives (calculateEffectiveGracePeriod
	// raises the override to 1, v1.34.4).
	EvictionMaxPodGracePeriod int32 `json:"evictionMaxPodGracePeriod"`
}

// A PriorityGrace is one group of shutdownGracePeriodByPodPriority: the
// pods from Priority up to the next group's get ShutdownGracePeriodSeconds,
// or the 1 s the kubelet always gives when it is below 1 (negative too: the
// kubelet does not validate it).
type PriorityGrace struct {
	Priority                   int32 `json:"priority"`
	ShutdownGracePeriodSeconds int64 `json:"shutdownGracePeriodSeconds"`
}

// Read reads and parses the KubeletConfiguration at path; its errors
// name the file.
func Read(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse parses a KubeletConfiguration, YAML or JSON. A document of
// another kind, or with durations or groups the kubelet would refuse, is
// an error saying what is wrong.
func Parse(data []byte) (*Config, error) {
	var c Config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("not a KubeletConfiguration: %w", err)
	}
	switch {
	case c.Kind == "":
		return nil, errors.New("no kind: not a KubeletConfiguration (the file of the kubelet's --config)")
	case c.Kind != Kind:
		return nil, fmt.Errorf("a %s, not a %s (the file of the kubelet's --config)", c.Kind, Kind)
	case c.ShutdownGracePeriod.Duration < 0 || c.ShutdownGracePeriodCriticalPods.Duration < 0:
		return nil, errors.New("shutdownGracePeriod and shutdownGracePeriodCriticalPods must not be negative")
	case subSecond(c.ShutdownGracePeriod.Duration):
		return nil, fmt.Errorf("shutdownGracePeriod %v must be zero or at least 1s (the kubelet refuses it)", c.ShutdownGracePeriod.Duration)
	case subSecond(c.ShutdownGracePeriodCriticalPods.Duration):
		return nil, fmt.Errorf("shutdownGracePeriodCriticalPods %v must be zero or at least 1s (the kubelet refuses it)", c.ShutdownGracePeriodCriticalPods.Duration)
	case c.ShutdownGracePeriodCriticalPods.Duration > c.ShutdownGracePeriod.Duration:
		return nil, fmt.Errorf("shutdownGracePeriodCriticalPods %v is more than shutdownGracePeriod %v", c.ShutdownGracePeriodCriticalPods.Duration, c.ShutdownGracePeriod.Duration)
	case len(c.ShutdownGracePeriodByPodPriority) > 0 && c.ShutdownGracePeriod.Duration > 0:
		return nil, errors.New("both shutdownGracePeriodByPodPriority and shutdownGracePeriod: the kubelet takes one")
	}
	return &c, nil
}

// subSecond reports whether d is a duration between zero and one second,
// which the kubelet's validation refuses for shutdownGracePeriod and
// shutdownGracePeriodCriticalPods ("must be either zero or otherwise >= 1
// sec").
func subSecond(d time.Duration) bool { return d > 0 && d < time.Second }

// groups returns the node-shutdown groups, lowest priority first, as the
// kubelet lays them out: shutdownGracePeriodByPodPriority, or the two
// groups shutdownGracePeriod makes (the pods below SystemCriticalPriority
// get it less shutdownGracePeriodCriticalPods, whole seconds; the
// critical ones the rest); none when graceful node shutdown is off.
func (c *Config) groups() []PriorityGrace {
	if len(c.ShutdownGracePeriodByPodPriority) > 0 {
		g := slices.Clone(c.ShutdownGracePeriodByPodPriority)
		// sort.Slice with the kubelet's less (newPodManager, v1.34.4), not a stable
		// sort: groups of one priority, which its validation lets through, keep the
		// order it gives them, which past 12 groups is not the file's.
		sort.Slice(g, func(i, j int) bool { return g[i].Priority < g[j].Priority })
		return g
	}
	whole, critical := c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration
	if whole == 0 {
		return nil
	}
	others := whole - critical
	return []PriorityGrace{
		{Priority: 0, ShutdownGracePeriodSeconds: int64(others / time.Second)},
		{Priority: SystemCriticalPriority, ShutdownGracePeriodSeconds: int64((whole - others) / time.Second)},
	}
}

// ShutdownGrace returns the grace graceful node shutdown gives a pod of
// priority (its priority class's value; 0 without one), before the
// kubelet takes the pod's own terminationGracePeriodSeconds when that is
// shorter, and false when graceful node shutdown is off. A pod belongs to
// the group of the highest priority not above its own; one below every
// group to the lowest. Of two groups at one priority (the kubelet runs
// with them), a pod at that priority belongs to the first, in the
// kubelet's order (see groups), and one above it to the last. A group of
// no time (or less) gives the 1 s the kubelet always gives.
func (c *Config) ShutdownGrace(priority int32) (time.Duration, bool) {
	g := c.groups()
	if len(g) == 0 {
		return 0, false
	}
	i := groupOf(g, priority)
	return max(time.Duration(g[i].ShutdownGracePeriodSeconds)*time.Second, time.Second), true
}

// groupOf returns the index in g, sorted by groups, of the group the kubelet
// puts a pod of priority in (groupByPriority, v1.34.4): the first whose
// priority is not below the pod's, or the one before it when that one's is
// above, or the last when none is. A search from the top for the last group
// not above the pod's priority took the last of two groups at the pod's
// priority, where the kubelet takes the first.
func groupOf(g []PriorityGrace, priority int32) int {
	i := sort.Search(len(g), func(i int) bool { return g[i].Priority >= priority })
	switch {
	case i == len(g):
		return len(g) - 1
	case i > 0 && g[i].Priority > priority:
		return i - 1
	}
	return i
}

// SoftEvictionGrace returns the grace a soft node-pressure eviction gives
// a pod (evictionMaxPodGracePeriod, at least the 1 s the kubelet always
// gives, a negative one's too), and false when the node has no soft
// eviction thresholds.
func (c *Config) SoftEvictionGrace() (time.Duration, bool) {
	if len(c.EvictionSoft) == 0 {
		return 0, false
	}
	return max(time.Duration(c.EvictionMaxPodGracePeriod)*time.Second, time.Second), true
}

// OwnGrace returns the grace the kubelet's own terminations give a pod of
// priority, the smaller of ShutdownGrace and SoftEvictionGrace (as
// drain.Config.KubeletGrace wants it), and false when the node has
// neither.
func (c *Config) OwnGrace(priority int32) (time.Duration, bool) {
	shutdown, graceful := c.ShutdownGrace(priority)
	soft, evicts := c.SoftEvictionGrace()
	switch {
	case graceful && evicts:
		return min(shutdown, soft), true
	case graceful:
		return shutdown, true
	}
	return soft, evicts
}

// Raise returns the settings of c that hold the kubelet's own grace for a
// pod of priority (OwnGrace) below grace, a whole number of seconds, each
// with the value that gives the pod grace: evictionMaxPodGracePeriod for
// a soft eviction; for a node shutdown, the pod's group's
// shutdownGracePeriodSeconds when the node gives slices by priority, else
// shutdownGracePeriod (whose slice for the pods below SystemCriticalPriority
// is what shutdownGracePeriodCriticalPods leaves of it), or for a critical
// pod shutdownGracePeriodCriticalPods, with shutdownGracePeriod raised as
// much to keep the other pods' slice. None when OwnGrace gives grace
// already. Naming the setting shutdownGracePeriod alone sent an operator
// to raise a setting that gave enough already when a soft eviction's grace
// was the smaller.
func (c *Config) Raise(priority int32, grace time.Duration) []string {
	var set []string
	if soft, ok := c.SoftEvictionGrace(); ok && soft < grace {
		set = append(set, fmt.Sprintf("evictionMaxPodGracePeriod: %d", grace/time.Second))
	}
	shutdown, ok := c.ShutdownGrace(priority)
	switch {
	case !ok || shutdown >= grace:
	case len(c.ShutdownGracePeriodByPodPriority) > 0:
		g := c.groups()
		set = append(set, fmt.Sprintf("shutdownGracePeriodSeconds: %d in the shutdownGracePeriodByPodPriority group of priority %d",
			grace/time.Second, g[groupOf(g, priority)].Priority))
	case priority >= SystemCriticalPriority:
		others := max(c.ShutdownGracePeriod.Duration-c.ShutdownGracePeriodCriticalPods.Duration, 0)
		set = append(set, fmt.Sprintf("shutdownGracePeriodCriticalPods: %s, and shutdownGracePeriod: %s to keep the other pods' %s,",
			seconds(grace), seconds(others+grace), seconds(others)))
	default:
		critical := c.ShutdownGracePeriodCriticalPods.Duration
		set = append(set, fmt.Sprintf("shutdownGracePeriod: %s (%s of it shutdownGracePeriodCriticalPods, the critical pods')",
			seconds(grace+critical), seconds(critical)))
	}
	return set
}

// seconds writes d as a KubeletConfiguration's durations usually are:
// "63s", not "1m3s", when it is whole seconds.
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// LeastOwnGrace is OwnGrace for a pod whose priority is not known: the
// least any priority gets, early rather than late.
func (c *Config) LeastOwnGrace() (time.Duration, bool) {
	least, ok := time.Duration(0), false
	for _, priority := range c.groupPriorities() {
		if d, _ := c.OwnGrace(priority); !ok || d < least {
			least, ok = d, true
		}
	}
	if !ok {
		return c.SoftEvictionGrace()
	}
	return least, true
}

// groupPriorities returns a priority in each node-shutdown group that has
// any pod: each group's own priority, which the first of several groups at
// it takes, and the one above it, which the last takes when it is below the
// next group's (groupOf). A group that is neither has no pod: its grace is
// no pod's.
func (c *Config) groupPriorities() []int32 {
	var ps []int32
	for _, g := range c.groups() {
		ps = append(ps, g.Priority)
		if g.Priority < math.MaxInt32 {
			ps = append(ps, g.Priority+1)
		}
	}
	return ps
}

// A PodGrace is what a node's configuration gives one pod at the
// kubelet's own terminations (ForPod).
type PodGrace struct {
	// Grace is OwnGrace for Priority, or LeastOwnGrace when the priority
	// could not be read (PriorityErr); zero when the node gives none.
	Grace       time.Duration
	Priority    int32
	PriorityErr error
}

// ForPod reads the configuration at path and the priority of pod (through
// the API server, by ctx) and returns the grace the kubelet's own
// terminations give it: drain.Config.KubeletGrace from the node's own
// configuration, with no number in a manifest to drift from it. A
// priority that cannot be read gives the least any priority gets, early
// rather than late. The error is the file's.
func ForPod(ctx context.Context, path string, pod *kube.Pod) (PodGrace, error) {
	return forPriority(path, func() (int32, error) { return pod.Priority(ctx) })
}

// forPriority is ForPod with the pod's priority from priority.
func forPriority(path string, priority func() (int32, error)) (PodGrace, error) {
	c, err := Read(path)
	if err != nil {
		return PodGrace{}, err
	}
	var pg PodGrace
	pg.Priority, pg.PriorityErr = priority()
	if pg.PriorityErr != nil {
		pg.Grace, _ = c.LeastOwnGrace()
	} else {
		pg.Grace, _ = c.OwnGrace(pg.Priority)
	}
	return pg, nil
}

// Setting is how a server takes the kubelet's own grace: a number
// (GraceName, e.g. -kubelet-grace or DRAINKIT_KUBELET_GRACE) or the
// node's configuration file (ConfigName, e.g. -kubelet-config), by the
// names its errors and log lines give them.
type Setting struct {
	GraceName, ConfigName string
	Grace                 time.Duration
	Config                string // the file's path; "" when not given
	// Priority, when not nil, gives the pod's priority in place of a read
	// of the pod (kube.Pod.Priority): a server that has read the pod's
	// spec already (kube.Pod.Spec) reads it once.
	Priority func() (int32, error)
}

// Resolve is the server's drain.Config.KubeletGrace from s: the node's
// configuration for pod (ForPod, within ctx) when a file is given, else
// the number; zero, with a warning, without the pod, whose drain cannot
// tell the kubelet's own termination from a deletion (why says how the
// server gets that access, and that: "(-pod): only its missing ...").
// Both given, or a file that cannot be read, is an error naming them.
func (s Setting) Resolve(ctx context.Context, pod *kube.Pod, log *slog.Logger, why string) (time.Duration, error) {
	switch {
	case s.Config != "" && s.Grace > 0:
		return 0, fmt.Errorf("%s and %s are both set: the node's configuration says what the kubelet gives; set one", s.ConfigName, s.GraceName)
	case s.Config == "" && (s.Grace == 0 || pod != nil):
		return s.Grace, nil
	case s.Config == "":
		log.Warn(s.GraceName+" is ignored without the pod's API access "+why, "kubelet_grace", s.Grace)
		return 0, nil
	case pod == nil:
		if _, err := Read(s.Config); err != nil {
			return 0, fmt.Errorf("%s: %w", s.ConfigName, err)
		}
		log.Warn(s.ConfigName+" is ignored without the pod's API access "+why, "file", s.Config)
		return 0, nil
	}
	priority := s.Priority
	if priority == nil {
		priority = func() (int32, error) { return pod.Priority(ctx) }
	}
	pg, err := forPriority(s.Config, priority)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", s.ConfigName, err)
	}
	if pg.PriorityErr != nil {
		log.Warn("the pod's priority could not be read: the kubelet's own grace is the least any priority gets in "+s.ConfigName,
			"file", s.Config, "kubelet_grace", pg.Grace, "error", pg.PriorityErr)
	}
	if pg.Grace == 0 {
		log.Info("the node's kubelet gives no grace of its own (graceful node shutdown off, no soft eviction)", "file", s.Config)
		return 0, nil
	}
	log.Info("the kubelet's own grace, from the node's configuration", "kubelet_grace", pg.Grace, "priority", pg.Priority, "file", s.Config)
	return pg.Grace, nil
}
