package drain

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/kubeletconf"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// ConfigFromEnv returns the Config that the pod's environment gives, read
// as NewServer reads it, for a server that wires New itself (a gRPC
// server, a server of its own listeners): the same manifest then drives
// both. It sets Budget from the pod's spec.terminationGracePeriodSeconds
// read through the API server when EnvPodName is set (EnvGrace, which must
// equal it, is checked against it: see EnvGrace), else from EnvGrace; Pod
// from EnvPodName and EnvPodUID (nil, logged, outside a cluster or without
// a service account); KubeletGrace from EnvKubeletGrace or
// EnvKubeletConfig; Pause's Estimator and SandboxTimeout from
// EnvPreserveEstimate and EnvSandboxTimeout; the Budget's margin from
// EnvMargin and its preStop sleep from EnvPreStopSleep or the pod's spec;
// and Logger to slog.Default(). Its one read of the spec is bounded by
// 5 s, within which a static pod's mirror pod not made yet is read again
// when the grace must come from it (see EnvGrace). The caller sets the rest
// (Sandboxes, Gate, Steps) and calls New:
//
//	cfg, err := drain.ConfigFromEnv()
//	if err != nil {
//		log.Fatal(err) // names the variable that is wrong
//	}
//	cfg.Sandboxes, cfg.Gate = lister, gate
//	cfg.Steps = []drain.Step{draingrpc.Step("grpc", srv, gate, 5*time.Second)}
//	d, err := drain.New(cfg)
//
// The preStop hook's variables (EnvHookListen, EnvHookSecret) are
// NewServer's, which serves the hook; a server of its own serves
// Drainer.PreStop behind a HookGuard, or runs drainhook (docs/drain.md).
// Errors name the variable that is wrong; they come now, not at SIGTERM.
func ConfigFromEnv() (Config, error) {
	cfg, _, err := configFromEnv()
	return cfg, err
}

// configFromEnv is ConfigFromEnv, with the pod's spec as its one read
// found it (nil without the pod), which NewServer reads the preStop hook
// from.
func configFromEnv() (Config, *podSpec, error) {
	log := slog.Default()
	pod := inCluster(log)
	spec := readSpec(pod, os.Getenv(EnvGrace) == "", log)
	grace, err := graceOf(spec, log)
	if err != nil {
		return Config{}, nil, err
	}
	kubelet, err := kubeletGrace(pod, spec, log)
	if err != nil {
		return Config{}, nil, err
	}
	pc, err := pauseFromEnv()
	if err != nil {
		return Config{}, nil, err
	}
	checkSandboxTimeout(pc, log)
	margin, err := optionalDurationEnv(EnvMargin)
	if err != nil {
		return Config{}, nil, err
	}
	sleep, err := preStopSleep(spec, log)
	if err != nil {
		return Config{}, nil, err
	}
	budget, err := deadline.New(grace, deadline.Config{Logger: log, Margin: margin, PreStopSleep: sleep})
	if err != nil {
		what := []string{graceSource(grace)}
		if margin != 0 {
			what = append(what, fmt.Sprintf("%s=%q", EnvMargin, os.Getenv(EnvMargin)))
		}
		if sleep != 0 {
			what = append(what, fmt.Sprintf("a preStop sleep of %v (%s=%q, or the pod's spec)", sleep, EnvPreStopSleep, os.Getenv(EnvPreStopSleep)))
		}
		if len(what) == 1 {
			return Config{}, nil, fmt.Errorf("drain: %s: %w", what[0], err)
		}
		return Config{}, nil, fmt.Errorf("drain: %s with %s: %w", strings.Join(what[1:], " and "), what[0], err)
	}
	return Config{Budget: budget, Logger: log, Pod: pod, KubeletGrace: kubelet, Pause: pc}, spec, nil
}

// graceSource names where ConfigFromEnv's grace came from, for an error:
// EnvGrace as it is set, when that is the grace planned with; else the
// pod's spec, which graceOf prefers (and which a set EnvGrace that differs
// does not override).
func graceSource(grace time.Duration) string {
	if v := os.Getenv(EnvGrace); v != "" {
		if env, err := durationEnv(EnvGrace); err == nil && env == grace {
			return fmt.Sprintf("%s=%q", EnvGrace, v)
		}
	}
	return fmt.Sprintf("a grace of %v (the pod's spec.terminationGracePeriodSeconds)", grace)
}

// inCluster returns the pod this process runs in, or nil, logged, when
// EnvPodName is unset or the service account is not mounted.
func inCluster(log *slog.Logger) *kube.Pod {
	name := os.Getenv(EnvPodName)
	if name == "" {
		log.Info("drain: " + EnvPodName + " is not set: no deletionTimestamp from the API server, no Events")
		return nil
	}
	cfg := inClusterConfig(log)
	cfg.UID = os.Getenv(EnvPodUID)
	pod, err := kube.New(name, cfg)
	if err != nil {
		log.Warn("drain: no Kubernetes API access: no deletionTimestamp from the API server, no Events", "error", err)
		return nil
	}
	return pod
}

// inClusterConfig is the kube.Config of the pod this process runs in;
// tests point it at an API server of their own.
var inClusterConfig = func(log *slog.Logger) kube.Config { return kube.Config{Logger: log} }

// podGraceTimeout bounds ConfigFromEnv's read of the pod's spec.
const podGraceTimeout = 5 * time.Second

// podSpec is the pod's spec as ConfigFromEnv's one read of it found it,
// or why that read failed. The grace, the priority and the preStop sleeps
// all come from it: read apart, they took three requests, and three
// timeouts of podGraceTimeout (15 s at start) when the API server did not
// answer. The fields read do not change in a pod's life.
type podSpec struct {
	spec kube.Spec
	err  error
	// id is what the reads showed of the pod: a static pod found through
	// its mirror pod (Static), or one whose mirror pod the kubelet had not
	// made (MirrorPending).
	id kube.Identity
}

// readSpec reads pod's spec within podGraceTimeout; nil when pod is. When
// the grace must come from it (needGrace: EnvGrace unset) and the read
// finds a static pod's mirror pod not made yet (kube.Identity.MirrorPending:
// a 404, POD_UID its config hash), it reads again every podPoll within the
// same bound, while a read can still start a podPoll before its end: the
// kubelet starts a static pod before it made the mirror pod when it has
// not registered the node yet (the node's boot), and makes it at its next
// sync of the pod, a second or so later when the node is registered by
// then. Failing at once on that 404, the server exited, for the kubelet to
// start it again after a back-off that grows to 5 minutes. The start takes
// no longer than one read that the API server does not answer already
// does.
func readSpec(pod *kube.Pod, needGrace bool, log *slog.Logger) *podSpec {
	if pod == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), podGraceTimeout)
	defer cancel()
	s, err := pod.Spec(ctx)
	if err != nil && needGrace && pod.Identity().MirrorPending() {
		log.Info("drain: the pod is not in the API server yet: "+EnvPodUID+" is a static pod's (its config hash), whose mirror pod the kubelet makes once it reaches "+
			"the API server; its spec, for the grace ("+EnvGrace+" is not set), is read again", "every", podPoll, "for", podGraceTimeout, "read", err)
		for kube.IsNotFound(err) && pod.Identity().MirrorPending() {
			if dl, _ := ctx.Deadline(); time.Until(dl) <= podPoll {
				break
			}
			time.Sleep(podPoll)
			s, err = pod.Spec(ctx)
		}
	}
	return &podSpec{spec: s, err: err, id: pod.Identity()}
}

// grace is the spec's terminationGracePeriodSeconds (kube.Spec.Grace), or
// the read's error.
func (p *podSpec) grace() (time.Duration, error) {
	if p.err != nil {
		return 0, p.err
	}
	return p.spec.Grace()
}

// sleeps is the spec's containers' preStop sleeps
// (kube.Spec.PreStopSleeps), or the read's error.
func (p *podSpec) sleeps() (map[string]time.Duration, error) {
	if p.err != nil {
		return nil, p.err
	}
	return p.spec.PreStopSleeps()
}

// graceOf is the pod's spec.terminationGracePeriodSeconds, as read
// through the API server when the pod is known (spec not nil), else
// EnvGrace. With EnvGrace set as well, see checkedGrace.
func graceOf(spec *podSpec, log *slog.Logger) (time.Duration, error) {
	if spec == nil {
		return graceFromEnv()
	}
	if os.Getenv(EnvGrace) != "" {
		env, err := graceFromEnv()
		if err != nil {
			return 0, err
		}
		return checkedGrace(spec, env, log), nil
	}
	g, err := spec.grace()
	switch {
	case err != nil && spec.id.MirrorPending():
		return 0, fmt.Errorf("drain: %s is not set, and the pod's spec, which gives the grace then, could not be read: %s is a static pod's (its config hash), "+
			"whose mirror pod the kubelet had not made in the API server in the %v the start reads it for (it has not reached the API server or registered the node yet), "+
			"and a static pod runs without it: set %s to the manifest's terminationGracePeriodSeconds (or %s is not the mirror pod's name, "+
			"the manifest's, a dash, the node's: fieldRef metadata.name): %w", EnvGrace, EnvPodUID, podGraceTimeout, EnvGrace, EnvPodName, err)
	case err != nil:
		_, envErr := graceFromEnv()
		return 0, fmt.Errorf("%w, and the pod's spec could not be read: %w", envErr, err)
	case spec.id.Static:
		log.Warn("drain: grace from a static pod's spec.terminationGracePeriodSeconds, read through its mirror pod: a start before the kubelet makes the mirror pod "+
			"(at the node's boot, before it reaches the API server) cannot read it, and fails; set "+EnvGrace+" to it", "grace", g)
	case g == time.Second: // what the kubelet gives a 0 too (kube.Spec.Grace)
		log.Warn("drain: grace from the pod's spec.terminationGracePeriodSeconds: 1 s, which the kubelet gives a 0 or a 1, SIGKILL 2 s after SIGTERM: "+
			"planning the drain in it; give the pod the time its sandboxes' preserves take", "grace", g)
	default:
		log.Info("drain: grace from the pod's spec.terminationGracePeriodSeconds", "grace", g)
	}
	return g, nil
}

// checkedGrace is the pod's spec.terminationGracePeriodSeconds when it can
// be read, else env, EnvGrace's: the spec's is what the kubelet gives the
// pod, and a variable that says otherwise (a manifest changed in one
// place of two) is logged as the error it is. A termination the kubelet
// makes on its own sets no deletionTimestamp that would correct a longer
// one: its preStop wait would run to the spec's end, SIGTERM 2 s before
// SIGKILL.
func checkedGrace(spec *podSpec, env time.Duration, log *slog.Logger) time.Duration {
	g, err := spec.grace()
	switch {
	case err != nil:
		log.Warn("drain: "+EnvGrace+" could not be checked against the pod's spec.terminationGracePeriodSeconds: planning with it", "grace", env, "error", err)
		return env
	case g != env:
		log.Error(fmt.Sprintf("drain: %s=%v is not the pod's spec.terminationGracePeriodSeconds, %v: planning with the spec's, which the kubelet uses; make them equal in the manifest",
			EnvGrace, env, g), "grace", g, "variable", env)
	}
	return g
}

// graceFromEnv reads EnvGrace.
func graceFromEnv() (time.Duration, error) {
	if os.Getenv(EnvGrace) == "" {
		return 0, fmt.Errorf("drain: %s is not set: give it the pod's terminationGracePeriodSeconds", EnvGrace)
	}
	return durationEnv(EnvGrace)
}

// kubeletGrace reads EnvKubeletGrace, or the node's configuration at
// EnvKubeletConfig (kubeletconf.Setting.Resolve); zero when neither is
// set, or when pod is nil (logged: without the pod's deletionTimestamp a
// drain cannot tell the kubelet's own termination from a deletion).
func kubeletGrace(pod *kube.Pod, spec *podSpec, log *slog.Logger) (time.Duration, error) {
	g, err := optionalDurationEnv(EnvKubeletGrace)
	if err != nil {
		return 0, err
	}
	s := kubeletconf.Setting{GraceName: EnvKubeletGrace, ConfigName: EnvKubeletConfig, Grace: g, Config: os.Getenv(EnvKubeletConfig)}
	if spec != nil { // the priority from the spec read once
		s.Priority = func() (int32, error) { return spec.spec.Priority(), spec.err }
	}
	ctx, cancel := context.WithTimeout(context.Background(), podGraceTimeout)
	defer cancel()
	g, err = s.Resolve(ctx, pod, log, "("+EnvPodName+" and a service account): "+kubeletGraceNeedsPod)
	if err != nil {
		return 0, fmt.Errorf("drain: %w", err)
	}
	return g, nil
}

// pauseFromEnv is the Preserver's configuration from EnvPreserveEstimate
// and EnvSandboxTimeout; the zero Config when neither is set.
func pauseFromEnv() (pause.Config, error) {
	var pc pause.Config
	est, err := optionalDurationEnv(EnvPreserveEstimate)
	if err != nil {
		return pc, err
	}
	if est > 0 {
		pc.Estimator = deadline.NewEstimator(est)
	}
	pc.SandboxTimeout, err = optionalDurationEnv(EnvSandboxTimeout)
	return pc, err
}

// checkSandboxTimeout warns when EnvSandboxTimeout is below
// EnvPreserveEstimate: a preserve that takes the estimate is given up
// before it ends. Not an error: an estimate raised on purpose above the
// usual preserve (a plan that reserves for the slowest) is legitimate.
func checkSandboxTimeout(pc pause.Config, log *slog.Logger) {
	if pc.Estimator == nil || pc.SandboxTimeout == 0 {
		return
	}
	if est := pc.Estimator.Estimate(); pc.SandboxTimeout < est {
		log.Warn("drain: "+EnvSandboxTimeout+" is below "+EnvPreserveEstimate+": a preserve that takes the estimate is given up (timed_out) before it ends; "+
			"raise the timeout unless the estimate is above the usual preserve on purpose",
			EnvSandboxTimeout, pc.SandboxTimeout, EnvPreserveEstimate, est)
	}
}

// preStopSleep is the container's preStop sleep (EnvPreStopSleep), from
// the pod's spec when the pod is known (spec not nil): see EnvPreStopSleep.
func preStopSleep(spec *podSpec, log *slog.Logger) (time.Duration, error) {
	env, set, err := sleepEnv()
	if err != nil || spec == nil {
		return env, err
	}
	sleeps, err := spec.sleeps()
	if err != nil {
		log.Warn("drain: the pod's preStop sleep hooks could not be read: planning with "+EnvPreStopSleep, "sleep", env, "error", err)
		return env, nil
	}
	name, known := ownContainer(sleeps)
	if known {
		s := sleeps[name]
		if set && s != env {
			log.Error(fmt.Sprintf("drain: %s=%v is not the container's lifecycle.preStop.sleep.seconds, %v: planning with the spec's, which the kubelet sleeps; make them equal in the manifest",
				EnvPreStopSleep, env, s), "container", name, "sleep", s, "variable", env)
		}
		return s, nil
	}
	longest, which := time.Duration(0), ""
	for name, s := range sleeps {
		if s > longest || s == longest && name < which {
			longest, which = s, name
		}
	}
	switch {
	case set:
		return env, nil
	case longest > 0:
		log.Warn(fmt.Sprintf("drain: the pod's containers have preStop sleep hooks and which container this is is not known: planning with the longest, "+
			"%v (%s's), which plans SIGKILL early, never late; set %s to this container's (0 for none)", longest, which, EnvPreStopSleep), "sleeps", sleeps)
	}
	return longest, nil
}

// ownContainer names this process's container among the pod's: the only
// one, or the one whose directory of the kubelet this process has mounted
// (mountedContainer). known is false when neither tells.
func ownContainer[V any](sleeps map[string]V) (name string, known bool) {
	if len(sleeps) == 1 {
		for name := range sleeps {
			return name, true
		}
	}
	mi, err := os.ReadFile(mountinfoPath)
	if err != nil {
		return "", false
	}
	name, known = mountedContainer(string(mi))
	_, inSpec := sleeps[name]
	return name, known && inSpec
}

// mountinfoPath is this process's mount table; tests point it elsewhere.
var mountinfoPath = "/proc/self/mountinfo"

// containerDir matches the kubelet's directory of one of a pod's
// containers, /var/lib/kubelet/pods/UID/containers/NAME/, which holds the
// file it bind-mounts as the container's termination message
// (terminationMessagePath, /dev/termination-log by default).
var containerDir = regexp.MustCompile(`/pods/[0-9a-f-]+/containers/([a-z0-9]([-a-z0-9]*[a-z0-9])?)/`)

// mountedContainer finds the container name in the roots of mountinfo's
// mounts (its fourth field): known only when they name exactly one.
func mountedContainer(mountinfo string) (name string, known bool) {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := containerDir.FindStringSubmatch(f[3])
		switch {
		case m == nil:
		case name == "":
			name = m[1]
		case name != m[1]:
			return "", false
		}
	}
	return name, name != ""
}

// sleepEnv reads EnvPreStopSleep: whole seconds or a Go duration, "0" for
// none; set says whether it is set.
func sleepEnv() (d time.Duration, set bool, err error) {
	v := os.Getenv(EnvPreStopSleep)
	if v == "" {
		return 0, false, nil
	}
	if z, err := time.ParseDuration(v); err == nil && z == 0 { // "0", "0s"...
		return 0, true, nil
	}
	d, err = durationEnv(EnvPreStopSleep)
	if err != nil {
		return 0, false, fmt.Errorf("%w, or 0 for no preStop sleep", err)
	}
	return d, true, nil
}

// optionalDurationEnv reads the variable name as durationEnv does; zero
// when it is unset.
func optionalDurationEnv(name string) (time.Duration, error) {
	if os.Getenv(name) == "" {
		return 0, nil
	}
	return durationEnv(name)
}

// durationEnv reads the variable name: whole seconds or a positive Go
// duration.
func durationEnv(name string) (time.Duration, error) {
	v := os.Getenv(name)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 || n > int64(time.Duration(1<<63-1)/time.Second) {
			return 0, fmt.Errorf("drain: %s=%q: want a positive number of seconds", name, v)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("drain: %s=%q: want whole seconds (3600) or a positive Go duration (1h)", name, v)
	}
	return d, nil
}
