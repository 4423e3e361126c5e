package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/durflag"
	"github.com/drainkit/drainkit/internal/listenaddr"
	"github.com/drainkit/drainkit/internal/termmsg"
)

// Config is sandboxd's configuration, one field per command-line flag.
type Config struct {
	// Listen is the HTTP address of the API, readiness and liveness (-listen).
	Listen string
	// HookListen is the address of the preStop hook, GET /drain (-hook-listen): a listener
	// of its own, loopback by default (an exec hook), or the pod's own address for the
	// kubelet's httpGet. One drain request takes the node out of service: the API port,
	// which untrusted sandboxes may reach, does not serve it.
	HookListen string
	// HookSecret is the shared secret a hook request must carry in the X-Drain-Secret
	// header (the manifest's httpGet httpHeaders), from the environment variable
	// HookSecretEnv. Required unless HookListen is a loopback address.
	HookSecret string
	// StateDir holds the records of paused sandboxes, their images and
	// last-shutdown.json (-state-dir).
	StateDir string
	// Grace is the pod's termination grace period (-grace): the one number the
	// manifest's terminationGracePeriodSeconds and the server must agree on.
	Grace time.Duration
	// Runtime is "fake" or "runsc" (-runtime).
	Runtime string
	// PauseLatency is how long one pause takes (-pause-latency): exactly, in the fake
	// runtime; with runsc, the estimate of a checkpoint until the first one is measured.
	// PauseJitter spreads the fake latency over PauseLatency x [1-j, 1+j] (-pause-jitter).
	PauseLatency time.Duration
	PauseJitter  float64
	// PauseShare is how many fake pauses run at full speed at once (-pause-share): n > k
	// in flight each run at k/n of their speed, as real pauses share the node's disk or
	// CPU (sandbox.Fake.SharePauses). 0, the default: each fake pause takes its latency
	// however many run. The fake runtime's only.
	PauseShare int
	// IDSeed, when not 0, draws the IDs of new sandboxes from a sequence seeded with it
	// (-id-seed; sandbox.Node.SeedIDs): with the fake runtime, whose pause latencies follow
	// from the IDs, two servers of one seed pause the same sandboxes in the same times, as
	// drainsim's comparison needs. 0: random IDs.
	IDSeed uint64
	// Concurrency is how many pauses run at once at shutdown (-concurrency): n > 0 fixes
	// it; 0 lets pause's adaptive limit find it (between 1 and MaxConcurrency), starting
	// from the concurrency the last shutdown learned best (learned-rates.json), which its
	// first epoch checks against the learned estimate of a pause.
	Concurrency int
	// Devices is how many fake ublk devices the fake device daemon child serves
	// (-devices); 0 runs no daemon and no ublk step. ParseFlags makes it 2 with the fake
	// runtime and 0 with runsc unless the flag is given.
	Devices int
	// TerminationLog is the container's termination message path (-termination-log, or
	// the environment variable DRAINKIT_TERMINATION_LOG), where the drain's summary goes
	// at exit; empty means /dev/termination-log when it exists, as the kubelet mounts it.
	TerminationLog string
	// Pod is this pod's name for the Kubernetes API (-pod, default $POD_NAME from the
	// Downward API): sandboxd reads its deletionTimestamp (a delete --grace-period shorter
	// than -grace) and posts Events on it (deploy/rbac.yaml grants both). Empty, or no
	// service account mounted: neither, logged.
	Pod string
	// PodUID is this pod's metadata.uid (-pod-uid, default $POD_UID from the Downward API):
	// a pod of the same name with another UID (this one force-deleted, a StatefulSet's new
	// one created) is not read as this one's deletion, and Events name this pod. Empty:
	// learned from the first read.
	PodUID string
	// KubeletGrace is the grace the kubelet gives this pod when it terminates it on its
	// own (-kubelet-grace): graceful node shutdown's slice (shutdownGracePeriod minus
	// shutdownGracePeriodCriticalPods), a soft eviction's evictionMaxPodGracePeriod. With
	// -pod, a drain that finds no deletionTimestamp plans for it (drain.Config.KubeletGrace);
	// 0: not known.
	KubeletGrace time.Duration
	// KubeletConfig is the node's KubeletConfiguration (-kubelet-config, the kubelet's
	// --config file mounted from the host), from which KubeletGrace is computed for this
	// pod's priority as the kubelet does (internal/kubeletconf), with no number in the
	// manifest to drift from the node's; not with -kubelet-grace.
	KubeletConfig string
}

// Defaults for the flags.
const (
	DefaultListen       = "127.0.0.1:8080"
	DefaultHookListen   = "127.0.0.1:8082"
	DefaultGrace        = 30 * time.Second
	DefaultPauseLatency = 500 * time.Millisecond
	DefaultConcurrency  = 0 // adaptive
	DefaultDevices      = 2
	// MaxConcurrency is the ceiling of the adaptive limit (-concurrency 0): pause's own.
	MaxConcurrency = 32
	// MaxDevices is the most fake devices -devices may ask for: the fake device daemon
	// gets its configuration in one environment variable, which the kernel caps at
	// 128 KiB (about 3000 devices with a long state directory).
	MaxDevices = 1024
)

// HookSecretEnv is the environment variable holding Config.HookSecret.
const HookSecretEnv = "SANDBOXD_HOOK_SECRET"

// ParseFlags parses sandboxd's command line (without the program name), and takes
// HookSecret from the environment variable HookSecretEnv. Usage and errors go to output;
// -h returns flag.ErrHelp.
func ParseFlags(args []string, output io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&c.Listen, "listen", DefaultListen, "HTTP listen address of the API, /readyz and /healthz")
	fs.StringVar(&c.HookListen, "hook-listen", DefaultHookListen, "listen address of the preStop hook GET /drain; not loopback: needs "+HookSecretEnv)
	fs.StringVar(&c.StateDir, "state-dir", "", "directory for paused-sandbox records, images and last-shutdown.json (required)")
	durflag.GraceVar(fs, &c.Grace, "grace", DefaultGrace, "the pod's termination grace period (terminationGracePeriodSeconds)")
	fs.StringVar(&c.Runtime, "runtime", "fake", "sandbox runtime: fake or runsc")
	durflag.DurationVar(fs, &c.PauseLatency, "pause-latency", DefaultPauseLatency, "how long one pause takes (fake runtime); with runsc, the first estimate of a checkpoint")
	fs.Float64Var(&c.PauseJitter, "pause-jitter", 0, "spread of the pause latency, a fraction in [0, 1) (fake runtime)")
	fs.IntVar(&c.PauseShare, "pause-share", 0, "fake pauses at full speed at once; more share that speed, as pauses share a disk (fake runtime); 0: no sharing")
	fs.Uint64Var(&c.IDSeed, "id-seed", 0, "draw new sandboxes' IDs (and so the fake runtime's pause latencies) from this seed; 0: random")
	fs.IntVar(&c.Concurrency, "concurrency", DefaultConcurrency, "pauses run at once at shutdown; 0: adaptive, from what the last shutdown learned")
	fs.StringVar(&c.TerminationLog, "termination-log", "", "file for the drain's summary at exit, the pod's terminationMessagePath (default: $"+termmsg.EnvPath+", else "+termmsg.DefaultPath+" if it exists)")
	fs.StringVar(&c.Pod, "pod", os.Getenv(drain.EnvPodName), "this pod's name, for its deletionTimestamp and Events through the Kubernetes API (needs deploy/rbac.yaml); empty: no API access")
	fs.StringVar(&c.PodUID, "pod-uid", os.Getenv(drain.EnvPodUID), "this pod's metadata.uid (Downward API), so that a new pod of its name is not taken for it; empty: learned from the first read")
	durflag.GraceVar(fs, &c.KubeletGrace, "kubelet-grace", 0, "the grace the kubelet gives this pod when it terminates it on its own (graceful node shutdown's slice), in `seconds` or as a duration (25s); needs -pod; not given: not known")
	fs.StringVar(&c.KubeletConfig, "kubelet-config", "", "the node's KubeletConfiguration `FILE` (the kubelet's --config, mounted from the host): -kubelet-grace computed from it for this pod's priority; needs -pod")
	fs.IntVar(&c.Devices, "devices", 0, "fake ublk devices served by a fake device daemon child, 0 for none (default 2 with the fake runtime, 0 with runsc)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	devicesSet := false
	fs.Visit(func(f *flag.Flag) { devicesSet = devicesSet || f.Name == "devices" })
	if !devicesSet && c.Runtime == "fake" {
		c.Devices = DefaultDevices
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.HookSecret = os.Getenv(HookSecretEnv)
	return c, c.Validate()
}

// Validate reports the first bad field, naming its flag.
func (c Config) Validate() error {
	for _, a := range []struct{ flag, addr string }{{"-listen", c.Listen}, {"-hook-listen", c.HookListen}} {
		if a.addr == "" {
			return fmt.Errorf("%s is required", a.flag)
		}
		if err := listenaddr.Check(a.addr); err != nil {
			return fmt.Errorf("%s %s %w", a.flag, a.addr, err)
		}
	}
	if listenaddr.SamePort(c.Listen, c.HookListen) { // the second listener would refuse it as if another process held the port
		return fmt.Errorf("-hook-listen %s and -listen %s take the same port: give the preStop hook a port of its own", c.HookListen, c.Listen)
	}
	if err := listenaddr.CheckSecret(HookSecretEnv, c.HookSecret); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(c.HookSecret) == "" && !listenaddr.Loopback(c.HookListen): // white space alone is no secret (drain.HookGuard)
		return fmt.Errorf("-hook-listen %s is not a loopback address: set %s, the secret the preStop hook sends", c.HookListen, HookSecretEnv)
	case c.StateDir == "":
		return errors.New("-state-dir is required")
	case c.Grace < 2*time.Second:
		return fmt.Errorf("-grace %v is below the kubelet's 2 s minimum", c.Grace)
	case c.Runtime != "fake" && c.Runtime != "runsc":
		return fmt.Errorf("-runtime %q: want fake or runsc", c.Runtime)
	case c.PauseLatency < 0:
		return fmt.Errorf("-pause-latency %v is negative", c.PauseLatency)
	case !(c.PauseJitter >= 0 && c.PauseJitter < 1): // NaN fails both
		return fmt.Errorf("-pause-jitter %v is outside [0, 1)", c.PauseJitter)
	case c.PauseShare < 0:
		return fmt.Errorf("-pause-share %d is negative (0: no sharing)", c.PauseShare)
	case c.PauseShare > 0 && c.Runtime != "fake":
		return fmt.Errorf("-pause-share %d is the fake runtime's: real %s pauses share the node as they do", c.PauseShare, c.Runtime)
	case c.Concurrency < 0:
		return fmt.Errorf("-concurrency %d is negative (0 adapts)", c.Concurrency)
	case c.Devices < 0:
		return fmt.Errorf("-devices %d is negative", c.Devices)
	case c.Devices > MaxDevices:
		return fmt.Errorf("-devices %d is more than the fake device daemon takes, %d", c.Devices, MaxDevices)
	case c.Devices > 0 && len(daemonSocket(c.StateDir)) > maxSocketPath:
		return fmt.Errorf("-state-dir %s is too long for the fake device daemon's socket %s (a Unix socket's path holds %d bytes): give a shorter one, or -devices 0",
			c.StateDir, daemonSocket(c.StateDir), maxSocketPath)
	case c.KubeletGrace < 0:
		return fmt.Errorf("-kubelet-grace %v is negative", c.KubeletGrace)
	}
	return nil
}

// UblkReserve is the time kept for the ublk step: a twentieth of the grace period, between
// 500 ms and 30 s. At shutdown the grace is the one the kubelet uses, when a deletion (or a
// node shutdown's slice) gave less than -grace: see ublkReserve.
func (c Config) UblkReserve() time.Duration { return ublkReserve(c.Grace) }

// HTTPReserve is the time kept for shutting the HTTP server down: a fortieth of the grace
// period, between 250 ms and 5 s; at shutdown, of the grace the kubelet uses.
func (c Config) HTTPReserve() time.Duration { return httpReserve(c.Grace) }

// ublkReserve is UblkReserve for a grace period of grace.
func ublkReserve(grace time.Duration) time.Duration {
	return min(max(grace/20, 500*time.Millisecond), 30*time.Second)
}

// httpReserve is HTTPReserve for a grace period of grace.
func httpReserve(grace time.Duration) time.Duration {
	return min(max(grace/40, 250*time.Millisecond), 5*time.Second)
}

// PauseEstimate is the first estimate of one pause, before any was measured: the longest
// a pause of the fake runtime takes, PauseLatency x (1 + PauseJitter), at least a
// millisecond. A round of parallel pauses lasts as long as its slowest, so the mean would
// plan too little time for the preserve phase. It saturates at the largest Duration.
func (c Config) PauseEstimate() time.Duration {
	longest := float64(c.PauseLatency) * (1 + c.PauseJitter)
	if longest >= math.MaxInt64 { // converted, it would wrap round to a negative Duration
		return math.MaxInt64
	}
	return max(time.Duration(longest), time.Millisecond)
}
