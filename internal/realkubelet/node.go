//go:build linux

package realkubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/internal/fakelogind"
	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/kubeletconf"
	"github.com/drainkit/drainkit/internal/realpart"
)

// KubeletVersion is the kubelet line these tests run: v1.34 still runs on
// cgroup v1 (failCgroupV1: false) and speaks CRI v1 to containerd 1.6.
const KubeletVersion = "v1.34.4"

// EnvKubelet names the kubelet binary to use; unset, Require looks where
// .ci/build-kubelet caches it.
const EnvKubelet = "DRAINKIT_KUBELET"

// NodeName is the kubelet's --hostname-override: static pods are named
// NAME-NodeName.
const NodeName = "drainkit-e2e"

// lockFile serializes Nodes on one machine and names the one running, so
// that a Start after a killed test process can clean up what it left.
const lockFile = "/run/drainkit-realkubelet.json"

// Require returns the kubelet binary's path once every part a Node needs is
// there. Where one is missing it skips the test with a message naming it,
// and fails it instead under CI=true.
func Require(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("realkubelet: a real kubelet, containerd and pods: not in -short mode")
	}
	missing := func(format string, args ...any) {
		t.Helper()
		msg := "realkubelet: " + fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: .ci/run must provide it)")
		}
		t.Skip(msg)
	}
	if runtime.GOOS != "linux" {
		missing("needs Linux")
	}
	if os.Geteuid() != 0 {
		missing("needs root (containerd, runc, mounts and cgroups)")
	}
	for _, cmd := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "go"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing("%s not on PATH (apt-get install containerd runc)", cmd)
		}
	}
	path, err := KubeletPath()
	if err != nil {
		missing("%v (run .ci/build-kubelet, or set %s)", err, EnvKubelet)
	}
	return path
}

// RunscShimVersion is the gvisor.dev/gvisor version whose shim
// .ci/build-runsc-shim builds (patched: see there).
const RunscShimVersion = "v0.0.0-20260905035102-160fafc42237"

// EnvRunscShim names the containerd-shim-runsc-v1 to use; unset,
// RequireRunsc looks where .ci/build-runsc-shim caches it.
const EnvRunscShim = "DRAINKIT_RUNSC_SHIM"

// RequireRunsc is Require for a Node whose runtime is gVisor: it also needs
// runsc on PATH and a containerd-shim-runsc-v1 (Debian's runsc ships none):
// $DRAINKIT_RUNSC_SHIM, else the one .ci/build-runsc-shim caches. It returns
// the kubelet's path and the shim's. .ci/run builds the shim after the
// kube-apiserver and runs the tests that need it after the rest of the
// suite, where it can set transparent huge pages; elsewhere it leaves them
// out (-skip RealKubeletGvisorRuntime): see docs/real-kubelet.md.
func RequireRunsc(t testing.TB) (kubelet, shim string) {
	t.Helper()
	kubelet = Require(t)
	missing := func(format string, args ...any) {
		t.Helper()
		msg := "realkubelet: " + fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: .ci/run must provide it)")
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		missing("runsc not on PATH (apt-get install runsc)")
	}
	shim, candidates := cachedBinary(EnvRunscShim, "runsc-shim-"+RunscShimVersion, "containerd-shim-runsc-v1")
	if shim != "" {
		return kubelet, shim
	}
	missing("no containerd-shim-runsc-v1 at %s (run .ci/build-runsc-shim, or set %s)", strings.Join(candidates, " or "), EnvRunscShim)
	return "", ""
}

// KubeletPath returns the kubelet binary: $DRAINKIT_KUBELET, else where
// .ci/build-kubelet caches it (/var/cache/drainkit as root, else
// $HOME/.cache/drainkit). It is an error when that file is not executable.
func KubeletPath() (string, error) {
	p, candidates := cachedBinary(EnvKubelet, "kubelet-"+KubeletVersion, "kubelet")
	if p == "" {
		return "", fmt.Errorf("no kubelet %s binary at %s", KubeletVersion, strings.Join(candidates, " or "))
	}
	return p, nil
}

// A Node is containerd and a standalone kubelet running static pods, all
// under Dir.
type Node struct {
	// Dir holds everything: containerd's root and state, the kubelet's
	// root, the manifests, the pods' logs and the two daemons' logs.
	Dir string

	manifests  string
	sock       string
	runsc      bool // containerd's default runtime is runsc
	containerd *daemon
	kubelet    *daemon
	kubeletCmd kubeletCmd
	lock       *os.File
	// machine-wide paths as they were before Start, to remove what the
	// Node added: the entries of machineDirs (a killed shim leaves its
	// socket, runsc its state) and /var/lib/kubelet (the device-plugin
	// directory is not under --root-dir)
	before        map[string]bool // dir/entry
	varLibKubelet bool
	// with Config.ShutdownGracePeriod: logind's stand-in, and the slice of
	// the pods without a priority
	logind        *fakelogind.Logind
	shutdownSlice time.Duration
}

// machineDirs are where containerd 1.6's shims put their sockets and the
// runsc shim its runsc's state, whatever the daemon's root.
var machineDirs = []string{"/run/containerd/s", "/run/containerd/runsc/k8s.io"}

// A daemon is containerd or the kubelet, a child of the test process.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// lockState is what lockFile records about the Node running.
type lockState struct {
	Dir  string `json:"dir"`
	Pids []int  `json:"pids"`
}

// Config is how a Node runs its pods. The zero value runs them with runc.
type Config struct {
	// RunscShim is the path of a containerd-shim-runsc-v1 (see RequireRunsc).
	// Set, containerd's default runtime is gVisor's runsc
	// (io.containerd.runsc.v1, with the host's network): a standalone
	// kubelet has no RuntimeClass lookup, so the default runtime handler
	// is the only way its pods get runsc.
	RunscShim string
	// ShutdownGracePeriod, when set, turns on the kubelet's graceful node
	// shutdown (shutdownGracePeriod in its KubeletConfiguration) with
	// ShutdownGracePeriodCriticalPods of it kept for critical pods: a
	// fakelogind on a private system bus (dbus-daemon under Dir) stands in
	// for systemd-logind, the kubelet alone is told its address, and
	// Node.Shutdown sets a shutdown off. The static pods here have no
	// priority, so each gets min(its grace, ShutdownGracePeriod -
	// ShutdownGracePeriodCriticalPods). Whole seconds, as the kubelet's
	// validation wants (>= 1 s; the critical part <= the whole).
	ShutdownGracePeriod             time.Duration
	ShutdownGracePeriodCriticalPods time.Duration
	// Kubeconfig, when set, is the path of a kubeconfig the kubelet runs
	// with (--kubeconfig): it registers the Node NodeName with that API
	// server (internal/realapiserver's, as admin) and runs the pods bound
	// to it, as in a cluster; a deletion through the API (DELETE with
	// gracePeriodSeconds, twice) is then what terminates them. Static pods
	// still run beside them. Write it with WriteKubeconfig.
	Kubeconfig string
}

// WriteKubeconfig writes a kubeconfig for the API server at server (an
// https URL), whose serving certificate chains to the CA in caFile, with
// the bearer token token, to path, for Config.Kubeconfig.
func WriteKubeconfig(path, server, caFile, token string) error {
	return os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: drainkit
  cluster:
    server: %q
    certificate-authority: %q
users:
- name: kubelet
  user:
    token: %q
contexts:
- name: drainkit
  context:
    cluster: drainkit
    user: kubelet
current-context: drainkit
`, server, caFile, token)), 0o600)
}

// validate names the field that is wrong.
func (c Config) validate() error {
	switch {
	case c.ShutdownGracePeriod < 0 || c.ShutdownGracePeriod%time.Second != 0:
		return fmt.Errorf("realkubelet: Config.ShutdownGracePeriod must be whole seconds >= 0, got %v", c.ShutdownGracePeriod)
	case c.ShutdownGracePeriodCriticalPods < 0 || c.ShutdownGracePeriodCriticalPods%time.Second != 0:
		return fmt.Errorf("realkubelet: Config.ShutdownGracePeriodCriticalPods must be whole seconds >= 0, got %v", c.ShutdownGracePeriodCriticalPods)
	case c.ShutdownGracePeriodCriticalPods > c.ShutdownGracePeriod:
		return fmt.Errorf("realkubelet: Config.ShutdownGracePeriodCriticalPods (%v) must be <= Config.ShutdownGracePeriod (%v)",
			c.ShutdownGracePeriodCriticalPods, c.ShutdownGracePeriod)
	}
	return nil
}

// Start starts containerd and the kubelet under a new temporary directory,
// imports the image tarballs images (docker archives, such as BuildImage
// writes; the first one also serves as the pod sandbox image), and returns
// once the kubelet answers its health check. It fails the test on an error.
// Everything is stopped and removed in t.Cleanup, also when the test fails.
// Its pods run with runc; StartConfig chooses.
func Start(t testing.TB, kubelet string, images ...*Image) *Node {
	t.Helper()
	return StartConfig(t, kubelet, Config{}, images...)
}

// StartConfig is Start with the pods' runtime chosen by cfg.
func StartConfig(t testing.TB, kubelet string, cfg Config, images ...*Image) *Node {
	t.Helper()
	if len(images) == 0 {
		t.Fatal("realkubelet: Start needs at least one image (the first is the sandbox image)")
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.ShutdownGracePeriod > 0 {
		if _, err := exec.LookPath("dbus-daemon"); err != nil {
			realpart.Missing(t, "realkubelet: graceful node shutdown needs dbus-daemon on PATH (apt-get install dbus-daemon)")
		}
	}
	lock, err := takeLock()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "dk-kubelet-")
	if err != nil {
		lock.Close()
		t.Fatal(err)
	}
	// The Node's files live on a tmpfs of its own: containerd's snapshots,
	// the logs, and the pods' state (sandboxd's records and images, each
	// written with fsync). On the disk, builds beside the suite (CI's
	// kube-apiserver and shim builds, its checks: CPU at the lowest priority,
	// but not the disk) held those fsyncs tens of milliseconds, and scenarios
	// whose preserve phase is the reserve the Preserver planned (16 pauses
	// of 1 s, two at a time, in 8.27 s) lost their last round to it.
	// removeLeftovers unmounts it with everything else under dir.
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
		t.Logf("realkubelet: no tmpfs for the Node's files (%v): they stay on the disk at %s", err, dir)
	}
	n := &Node{Dir: dir, manifests: filepath.Join(dir, "manifests"), sock: filepath.Join(dir, "containerd.sock"), lock: lock, runsc: cfg.RunscShim != "",
		before: map[string]bool{}}
	for _, d := range machineDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			n.before[filepath.Join(d, e.Name())] = true
		}
	}
	if _, err := os.Stat("/var/lib/kubelet"); err == nil {
		n.varLibKubelet = true
	}
	t.Cleanup(func() {
		if t.Failed() {
			n.dumpLogs(t)
		}
		if err := n.stop(); err != nil {
			t.Errorf("realkubelet: cleanup: %v", err)
		}
	})
	for _, d := range []string{n.manifests, filepath.Join(dir, "pod-logs"), filepath.Join(dir, "kubelet"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	ccfg := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(ccfg, []byte(containerdConfig(dir, images[0].Ref, cfg.RunscShim != "")), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	if cfg.RunscShim != "" {
		if err := os.WriteFile(filepath.Join(dir, "runsc.toml"), []byte(runscConfig), 0o644); err != nil {
			t.Fatal(err)
		}
		// containerd finds a runtime's shim on its PATH, by name.
		bin := filepath.Join(dir, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(cfg.RunscShim, filepath.Join(bin, "containerd-shim-runsc-v1")); err != nil {
			t.Fatal(err)
		}
		env = append(env, "PATH="+bin+":"+os.Getenv("PATH"))
	}
	n.containerd, err = n.startDaemon("containerd", env, "containerd", "--config", ccfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := n.waitContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	for _, img := range images {
		out, err := exec.CommandContext(ctx, "ctr", "--address", n.sock, "--namespace", "k8s.io",
			"images", "import", "--snapshotter", "overlayfs", img.Path).CombinedOutput()
		if err != nil {
			t.Fatalf("realkubelet: importing %s: %v: %s", img.Path, err, out)
		}
	}

	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	kcfg := filepath.Join(dir, "kubelet.yaml")
	kconf := kubeletConfig(dir, n.manifests, n.sock, port)
	var kenv []string
	if cfg.ShutdownGracePeriod > 0 {
		bus := filepath.Join(dir, "dbus")
		if err := os.MkdirAll(bus, 0o755); err != nil {
			t.Fatal(err)
		}
		// InhibitDelayMaxUSec of an hour: the kubelet never asks systemd
		// (absent) to raise it.
		if n.logind, err = fakelogind.Start(bus, fakelogind.Config{}); err != nil {
			t.Fatal(err)
		}
		kconf += fmt.Sprintf("shutdownGracePeriod: %v\nshutdownGracePeriodCriticalPods: %v\n", cfg.ShutdownGracePeriod, cfg.ShutdownGracePeriodCriticalPods)
		// The slice as drainkit plan reads it from the kubelet's file: the
		// scenarios that time the kubelet's shutdown check that reading.
		kc, err := kubeletconf.Parse([]byte(kconf))
		if err != nil {
			t.Fatal(err)
		}
		n.shutdownSlice, _ = kc.ShutdownGrace(0) // the pods here have no priority
		kenv = append(kenv, n.logind.Env())      // the kubelet's system bus, and no one else's
	}
	if err := os.WriteFile(kcfg, []byte(kconf), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", kcfg,
		"--root-dir", filepath.Join(dir, "kubelet"), "--cert-dir", filepath.Join(dir, "kubelet", "pki"),
		"--volume-plugin-dir", filepath.Join(dir, "volume-plugins"), "--hostname-override", NodeName, "--v", "2"}
	if cfg.Kubeconfig != "" {
		args = append(args, "--kubeconfig", cfg.Kubeconfig)
	}
	n.kubeletCmd = kubeletCmd{path: kubelet, env: kenv, args: args, healthz: fmt.Sprintf("http://127.0.0.1:%d/healthz", port)}
	n.startKubelet(ctx, t)
	n.waitShutdownManager(ctx, t)
	return n
}

// kubeletCmd is how the Node starts its kubelet, again after a restart.
type kubeletCmd struct {
	path    string
	env     []string
	args    []string
	healthz string
}

// startKubelet starts the kubelet and returns once it is healthy.
func (n *Node) startKubelet(ctx context.Context, t testing.TB) {
	t.Helper()
	var err error
	n.kubelet, err = n.startDaemon("kubelet", n.kubeletCmd.env, n.kubeletCmd.path, n.kubeletCmd.args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.writeLock(); err != nil { // its PID, for the next Start to clean up after a crash
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for {
		if resp, err := client.Get(n.kubeletCmd.healthz); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-n.kubelet.done:
			t.Fatalf("realkubelet: the kubelet exited at start (%s)", n.kubelet.cmd.ProcessState)
		case <-ctx.Done():
			t.Fatalf("realkubelet: the kubelet is not healthy after 60 s")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RestartKubelet stops the kubelet with SIGTERM, as a service manager
// restarting it for an upgrade does (the kubelet exits at once; the
// containers run on under containerd), starts it again with the same
// configuration and returns when it stopped and when the new one is
// healthy. The new kubelet finds its pods as they are, terminating ones
// included.
func (n *Node) RestartKubelet(t testing.TB) (stopped, healthy time.Time) {
	t.Helper()
	n.kubelet.stop(10 * time.Second)
	stopped = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n.startKubelet(ctx, t)
	return stopped, time.Now()
}

// AddPod writes pod as a static pod manifest; the kubelet sees it within a
// second (fileCheckFrequency). The file is named after the pod and appears
// whole (written aside, then renamed).
func (n *Node) AddPod(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	if pod.APIVersion == "" {
		pod.APIVersion, pod.Kind = "v1", "Pod"
	}
	data, err := json.MarshalIndent(pod, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(n.Dir, "tmp", pod.Name+".json")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, n.manifestPath(pod.Name)); err != nil {
		t.Fatal(err)
	}
}

// DeletePod removes the manifest of the static pod name and returns when it
// did: the kubelet then terminates the pod as it would any deleted pod.
func (n *Node) DeletePod(t testing.TB, name string) time.Time {
	t.Helper()
	if err := os.Remove(n.manifestPath(name)); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

func (n *Node) manifestPath(name string) string { return filepath.Join(n.manifests, name+".json") }

// PodLog returns what the containers of the static pod name wrote to stdout
// and stderr so far (the kubelet's pod logs, CRI format), for test logs.
func (n *Node) PodLog(name string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(n.Dir, "pod-logs", "*_"+name+"-"+NodeName+"_*", "*", "*.log"))
	if len(files) == 0 { // a pod of the API server's (Config.Kubeconfig): its own name
		files, _ = filepath.Glob(filepath.Join(n.Dir, "pod-logs", "*_"+name+"_*", "*", "*.log"))
	}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "== %s\n%s", strings.TrimPrefix(f, n.Dir), data)
	}
	return b.String()
}

// startDaemon starts path as the daemon name, its environment the test's
// with env added.
func (n *Node) startDaemon(name string, env []string, path string, args ...string) (*daemon, error) {
	logPath := filepath.Join(n.Dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644) // a restarted daemon logs on
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(append(os.Environ(), "TMPDIR="+filepath.Join(n.Dir, "tmp")), env...)
	// Both die with the test process; the next Start cleans up the rest.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("realkubelet: starting %s: %w", name, err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); close(d.done) }()
	return d, nil
}

func (n *Node) waitContainerd(ctx context.Context) error {
	for {
		if exec.CommandContext(ctx, "ctr", "--address", n.sock, "version").Run() == nil {
			return nil
		}
		select {
		case <-n.containerd.done:
			return fmt.Errorf("realkubelet: containerd exited at start (%s); see %s", n.containerd.cmd.ProcessState, n.containerd.log)
		case <-ctx.Done():
			return errors.New("realkubelet: containerd does not answer after 60 s")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends the kubelet first (so it restarts nothing), then every
// container process, the shims and containerd, and removes what they left.
func (n *Node) stop() error {
	defer n.lock.Close()
	for _, d := range []*daemon{n.kubelet} {
		if d != nil {
			d.stop(10 * time.Second)
		}
	}
	errs := []error{cleanupDir(n.Dir)}
	if n.logind != nil { // after the kubelet, whose connection it serves
		errs = append(errs, n.logind.Close())
	}
	if n.containerd != nil {
		n.containerd.stop(10 * time.Second)
	}
	errs = append(errs, removeLeftovers(n.Dir))
	for _, d := range machineDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if p := filepath.Join(d, e.Name()); !n.before[p] {
				_ = os.RemoveAll(p)
			}
		}
	}
	if !n.varLibKubelet {
		_ = os.RemoveAll("/var/lib/kubelet")
	}
	if err := os.Remove(lockFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (d *daemon) stop(grace time.Duration) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.done
}

// cleanupDir kills every process of the pods (all of them live in the
// kubelet's kubepods cgroups) and the containerd shims serving dir's
// containerd, and waits until they are gone.
func cleanupDir(dir string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := append(kubepodsProcs(), shimProcs(dir)...)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive after SIGKILL", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeLeftovers unmounts whatever is still mounted under dir, removes the
// kubepods cgroups and the kubelet's machine-wide files, and deletes dir.
func removeLeftovers(dir string) error {
	removeRuntimeLeftovers(dir)
	var errs []error
	for range 10 {
		mounts := mountsUnder(dir)
		if len(mounts) == 0 {
			break
		}
		for _, m := range mounts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	errs = append(errs, removeKubepods())
	_ = os.Remove("/var/lib/kubelet/device-plugins/kubelet.sock")
	// the kubelet's links to the pods' logs: POD-NODE_NAMESPACE_CONTAINER-ID.log
	links, _ := filepath.Glob("/var/log/containers/*-" + NodeName + "_*")
	for _, l := range links {
		_ = os.Remove(l)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeRuntimeLeftovers removes what the shims of dir's containerd left
// outside dir, also after a test process that was killed: each task's
// shim socket (its bundle records the address) and runsc's state of the
// task.
func removeRuntimeLeftovers(dir string) {
	tasks, _ := filepath.Glob(filepath.Join(dir, "containerd/state/io.containerd.runtime.v2.task/k8s.io/*"))
	for _, task := range tasks {
		if addr, err := os.ReadFile(filepath.Join(task, "address")); err == nil {
			if p, ok := strings.CutPrefix(strings.TrimSpace(string(addr)), "unix://"); ok && strings.HasPrefix(p, machineDirs[0]+"/") {
				_ = os.Remove(p)
			}
		}
		states, _ := filepath.Glob(filepath.Join(machineDirs[1], "*"+filepath.Base(task)+"*"))
		for _, st := range states {
			_ = os.RemoveAll(st)
		}
	}
}

// kubepodsProcs lists the processes in any of the kubelet's kubepods
// cgroups (cgroup v1: every controller's hierarchy; v2: the unified one).
func kubepodsProcs() []int {
	seen := map[int]bool{}
	var pids []int
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if st, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && st.IsDir() {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// shimProcs lists the containerd shims started by the containerd of dir
// (their command line carries its socket's path).
func shimProcs(dir string) []int {
	var pids []int
	for _, p := range processes() {
		if strings.Contains(p.cmdline, "containerd-shim") && strings.Contains(p.cmdline, dir+"/") {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// removeKubepods removes the kubepods cgroups, deepest first.
func removeKubepods() error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if st, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && st.IsDir() {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			for range 50 { // a cgroup whose last process just died can be busy a moment
				if err = unix.Rmdir(dirs[i]); err == nil || errors.Is(err, unix.ENOENT) {
					err = nil
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountsUnder returns the mount points under dir (dir included), deepest
// first.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	// deepest first: longer paths are below shorter ones
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if len(out[j]) > len(out[i]) {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// takeLock takes the machine-wide Node lock, waiting up to 10 minutes for a
// Node of another test process, and cleans up after a Node whose process
// died without doing so.
func takeLock() (*os.File, error) {
	f, err := os.OpenFile(lockFile+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("realkubelet: %w", err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		if time.Now().After(deadline) {
			f.Close()
			return nil, errors.New("realkubelet: another Node has held " + lockFile + ".lock for 10 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if data, err := os.ReadFile(lockFile); err == nil {
		var st lockState
		if json.Unmarshal(data, &st) == nil && strings.HasPrefix(st.Dir, os.TempDir()) {
			for _, pid := range st.Pids {
				if p, ok := processByPid(pid); ok && strings.Contains(p.cmdline, st.Dir) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			_ = cleanupDir(st.Dir)
			_ = removeLeftovers(st.Dir)
		}
		_ = os.Remove(lockFile)
	}
	// cgroups of a Node that never recorded itself
	_ = cleanupDirless()
	return f, nil
}

// cleanupDirless kills what is left in kubepods and removes the cgroups.
func cleanupDirless() error {
	for _, pid := range kubepodsProcs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return removeKubepods()
}

func (n *Node) writeLock() error {
	st := lockState{Dir: n.Dir, Pids: []int{n.containerd.cmd.Process.Pid, n.kubelet.cmd.Process.Pid}}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(lockFile, data, 0o644)
}

func (n *Node) dumpLogs(t testing.TB) {
	for _, d := range []*daemon{n.containerd, n.kubelet} {
		if d == nil {
			continue
		}
		data, _ := os.ReadFile(d.log)
		lines := strings.Split(string(data), "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		t.Logf("realkubelet: last lines of %s:\n%s", d.log, strings.Join(lines, "\n"))
	}
}

func freePort() (int, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return 0, err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}

// containerdConfig is containerd 1.6's configuration: everything under dir,
// the CRI plugin with runc through cgroupfs, the sandbox image imported by
// Start, and restrict_oom_score_adj, without which every sandbox fails on
// machines that lack CAP_SYS_RESOURCE ("can't get final child's PID from
// pipe: EOF": runc cannot lower oom_score_adj to the kubelet's -998).
// With runsc, gVisor's runtime is the default one, configured by
// dir/runsc.toml.
func containerdConfig(dir, sandboxImage string, runsc bool) string {
	def := "runc"
	if runsc {
		def = "runsc"
	}
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
temp = %[3]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[4]q

[ttrpc]
  address = %[5]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[7]q
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = %[10]q
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = %[11]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
`, filepath.Join(dir, "containerd/root"), filepath.Join(dir, "containerd/state"), filepath.Join(dir, "tmp"),
		filepath.Join(dir, "containerd.sock"), filepath.Join(dir, "containerd.sock.ttrpc"), filepath.Join(dir, "containerd/opt"),
		sandboxImage, filepath.Join(dir, "cni/bin"), filepath.Join(dir, "cni/conf"), def, filepath.Join(dir, "runsc.toml"))
}

// runscConfig is the runsc.toml of containerd's runsc runtime: the pods'
// sandboxes use the host's network stack (hostNetwork pods; no CNI here).
const runscConfig = `[runsc_config]
  network = "host"
`

// kubeletConfig is a standalone KubeletConfiguration: static pods from
// manifests (checked every second), containerd through cgroupfs on cgroup
// v1, no server on 10250, health on 127.0.0.1:healthz, no eviction or image
// garbage collection to get in the way.
func kubeletConfig(dir, manifests, sock string, healthz int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %[1]q
fileCheckFrequency: 1s
syncFrequency: 10s
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://%[2]s
imageServiceEndpoint: unix://%[2]s
podLogsDir: %[3]q
enableServer: false
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[4]d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, manifests, sock, filepath.Join(dir, "pod-logs"), healthz)
}

// cachedBinary returns the executable $env names, else the first of
// name in the .ci build scripts' caches (/var/cache/drainkit/dir as root,
// else $HOME/.cache/drainkit/dir), and the places it looked; "" when none
// is an executable file.
func cachedBinary(env, dir, name string) (string, []string) {
	var candidates []string
	if p := os.Getenv(env); p != "" {
		candidates = []string{p}
	} else {
		candidates = append(candidates, filepath.Join("/var/cache/drainkit", dir, name))
		if home, err := os.UserHomeDir(); err == nil {
			candidates = append(candidates, filepath.Join(home, ".cache/drainkit", dir, name))
		}
	}
	for _, p := range candidates {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, candidates
		}
	}
	return "", candidates
}
