//go:build linux

package realkubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// examples/gvisor-worker as agent-substrate runs its ateom: the worker is
// the pod's container, run by containerd with runc (privileged: it makes
// namespaces and ptraces), and every sandbox it runs is a gVisor sandbox it
// starts with runsc, the binary in its image, under its state directory on
// a hostPath. A worker cannot run under runsc itself and still run
// sandboxes: gVisor does not nest. (TestRealKubeletGvisorRuntime runs the
// worker with runsc as containerd's runtime.)
//
// Three sandboxes whose shell counts in memory; the manifest is deleted,
// the kubelet SIGTERMs the worker (no preStop hook: T0 is SIGTERM), which
// checkpoints all three and exits before SIGKILL with every sandbox in its
// Report and its termination message. Started again on the same state dir,
// the worker lists them as checkpointed and restores them, and each
// counter goes on from where it was (1, 2, 3, ... with no restart).
func TestRealKubeletGvisorWorker(t *testing.T) {
	const grace, sandboxes = 15, 3
	kubelet := Require(t)
	if err := runsc.Usable(); err != nil {
		missing(t, "%v", err)
	}
	busybox, err := runsc.StaticBusybox()
	require.NoError(t, err)
	runscBin, err := exec.LookPath("runsc")
	require.NoError(t, err)
	node := Start(t, kubelet, BuildImage(t, workerBinaries(runscBin, busybox)...))

	name := "gvisor-worker"
	state := filepath.Join(node.Dir, "state-"+name)
	run := func(pod string) (*Watch, *workerClient) {
		socket := StateMount + "/" + pod + ".sock"
		p := Pod(pod, grace, state, nil, "/gvisor-worker", "-socket", socket, "-state-dir", StateMount,
			"-grace", fmt.Sprintf("%ds", grace), "-runtime", "runsc", "-concurrency", fmt.Sprint(sandboxes), "-pause-latency", "1s")
		privileged := true
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &privileged}
		node.AddPod(t, p)
		w, err := WatchProcess(WaitProcess(t, "-socket "+socket, 2*time.Minute))
		require.NoError(t, err)
		return w, dialWorker(t, "unix://"+filepath.Join(state, pod+".sock"), node, pod)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	w, c := run(name)
	started := time.Now()
	bundle := func(id string) runsc.Bundle {
		return runsc.Bundle{Dir: filepath.Join(state, "runsc", "bundles", id)}
	}
	ids := c.runSandboxes(ctx, t, sandboxes)
	for _, id := range ids {
		waitCounter(t, bundle(id), 3)
	}
	time.Sleep(time.Until(started.Add(settle))) // not timing logic: see settle
	deleted := node.DeletePod(t, name)
	died, err := w.Wait(grace*time.Second + time.Minute)
	require.NoError(t, err, "pod log:\n%s", node.PodLog(name))
	msg := terminationMessage(t, node, name)
	t.Logf("termination message:\n%s", msg)
	rep := readJSON[drain.Report](t, filepath.Join(state, "last-shutdown.json"), node, name)
	require.NotNil(t, rep.Preserve, "the Report has the preserve phase")
	t0 := rep.Budget.Start
	kill := t0.Add(grace * time.Second) // no hook: SIGTERM is T0, SIGKILL is T0 + grace
	t.Logf("manifest deleted -> SIGTERM %v; from SIGTERM: exit +%v, SIGKILL due +%v; %v",
		t0.Sub(deleted).Round(time.Millisecond), died.Sub(t0).Round(time.Millisecond), kill.Sub(t0), rep.Preserve.Counts)
	assert.Equal(t, deadline.AnchorSIGTERM, rep.Budget.Anchor, "no preStop hook: T0 is SIGTERM")
	assert.True(t, died.Before(kill), "the worker exited before the kubelet's SIGKILL")
	assert.Equal(t, sandboxes, rep.Preserve.Counts[pause.Preserved], "every sandbox checkpointed: %v", rep.Preserve.Counts)
	assert.Zero(t, rep.Lost())
	assert.Positive(t, rep.Headroom, "the Report says it ended before the expected SIGKILL")
	assert.Regexp(t, fmt.Sprintf(`^drainkit: all %d sandboxes preserved; exited \d+\.\d{3}s before SIGKILL\n`, sandboxes), msg)
	assert.Contains(t, msg, fmt.Sprintf("sandboxes: %d: ", sandboxes))
	assert.Contains(t, msg, "full report: "+StateMount+"/last-shutdown.json")
	saved := map[string]int{}
	for _, id := range ids {
		saved[id], err = bundle(id).Counter()
		require.NoError(t, err)
	}

	// Started again on the same state dir: checkpointed, then restored
	// where they were.
	again := name + "-again"
	w2, c2 := run(again)
	c2.restoreCheckpointed(ctx, t, ids)
	for _, id := range ids {
		waitCounter(t, bundle(id), saved[id]+2)
		counts, err := bundle(id).Counts()
		require.NoError(t, err)
		assert.True(t, runsc.ConsecutiveFromOne(counts), "%s restarted instead of resuming: %v", id, counts)
	}
	node.DeletePod(t, again)
	_, err = w2.Wait(grace*time.Second + time.Minute)
	require.NoError(t, err)
}

// workerBinaries is what the worker's image holds: podbin (the pod
// sandbox), the worker, runsc and a static busybox (its sandboxes' root
// file system).
func workerBinaries(runscBin, busybox string) []Binary {
	return []Binary{
		{Name: "podbin", Package: "./internal/realkubelet/podbin"},
		{Name: "gvisor-worker", Package: "./examples/gvisor-worker"},
		{Name: "runsc", File: runscBin},
		{Name: "bin/busybox", File: busybox},
	}
}

// missing skips the test with a message naming what is missing, and fails
// it under CI=true.
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := "realkubelet: " + fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: .ci/run must provide it)")
	}
	t.Skip(msg)
}

// waitCounter waits until the counter sandbox of b has written more than
// n.
func waitCounter(t *testing.T, b runsc.Bundle, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := b.Counter()
		return err == nil && c > n
	}, time.Minute, 20*time.Millisecond, "the counter in %s did not pass %d", b.Dir, n)
}

// sandboxReply is gvisor-worker's SandboxReply.
type sandboxReply struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// workerClient calls gvisor-worker's gRPC service (drainkit.worker.Worker,
// JSON-coded: examples/gvisor-worker/api.go) over its Unix socket. node
// and pod say where the worker runs, for its log in a failure's message.
type workerClient struct {
	cc   *grpc.ClientConn
	node *Node
	pod  string
}

// dialWorker connects to the worker at target (a gRPC target:
// unix://PATH, passthrough:///HOST:PORT) once it answers List.
func dialWorker(t *testing.T, target string, node *Node, pod string) *workerClient {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	c := &workerClient{cc: cc, node: node, pod: pod}
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var list json.RawMessage
		return c.call(ctx, "List", struct{}{}, &list) == nil
	}, 2*time.Minute, 50*time.Millisecond, "the worker never answered on %s; pod log:\n%s", target, node.PodLog(pod))
	return c
}

func (c *workerClient) call(ctx context.Context, method string, req, reply any) error {
	return c.cc.Invoke(ctx, "/drainkit.worker.Worker/"+method, req, reply, grpc.ForceCodec(jsonCodec{}))
}

// runSandboxes asks the worker to run n sandboxes and returns their IDs.
func (c *workerClient) runSandboxes(ctx context.Context, t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		var r sandboxReply
		require.NoError(t, c.call(ctx, "Run", struct{}{}, &r), "pod log:\n%s", c.node.PodLog(c.pod))
		ids = append(ids, r.ID)
	}
	return ids
}

// restoreCheckpointed checks that the worker, started again on the state
// dir of a worker that checkpointed ids, lists each of them paused, and
// restores each to running.
func (c *workerClient) restoreCheckpointed(ctx context.Context, t *testing.T, ids []string) {
	t.Helper()
	var list struct {
		Sandboxes []sandboxReply `json:"sandboxes"`
	}
	require.NoError(t, c.call(ctx, "List", struct{}{}, &list))
	states := map[string]string{}
	for _, s := range list.Sandboxes {
		states[s.ID] = s.State
	}
	for _, id := range ids {
		assert.Equal(t, "paused", states[id], "sandbox %s was checkpointed: it must come back paused", id)
		var r sandboxReply
		require.NoError(t, c.call(ctx, "Restore", map[string]string{"id": id}, &r), "pod log:\n%s", c.node.PodLog(c.pod))
		assert.Equal(t, "running", r.State)
	}
}

// jsonCodec is the worker's gRPC codec: plain JSON.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return "json" }

// examples/gvisor-worker with runsc as containerd's runtime: the worker
// itself runs inside gVisor. Its sandboxes are the in-process fake (-runtime
// fake): gVisor does not nest, so a worker under runsc cannot run runsc
// sandboxes (TestRealKubeletGvisorWorker runs those). What this case proves
// is the termination path through gVisor: the kubelet's SIGTERM reaches the
// worker through the runsc shim and the sentry, the worker checkpoints
// every sandbox to its hostPath state dir and exits (status 0, before
// SIGKILL) with its summary in the termination message, and the worker
// started again on the same state dir brings every sandbox back.
func TestRealKubeletGvisorRuntimeWorker(t *testing.T) {
	const grace, sandboxes = 10, 6
	kubelet, shim := RequireRunsc(t)
	node := StartConfig(t, kubelet, Config{RunscShim: shim}, BuildImage(t,
		Binary{Name: "podbin", Package: "./internal/realkubelet/podbin"},
		Binary{Name: "gvisor-worker", Package: "./examples/gvisor-worker"}))
	name := "gvisor-runtime-worker"
	state := filepath.Join(node.Dir, "state-"+name)
	// Under gVisor a Unix socket on the hostPath is the sandbox's own: the
	// worker serves on the host's loopback (runsc's network = "host").
	run := func(pod string) (*ExitWatch, *workerClient) {
		addr := freeAddr(t)
		node.AddPod(t, Pod(pod, grace, state, nil, "/gvisor-worker", "-listen", addr, "-state-dir", StateMount,
			"-grace", fmt.Sprintf("%ds", grace), "-runtime", "fake", "-pause-latency", "300ms", "-concurrency", "3"))
		w := node.WatchExit(t, node.ContainerID(t, pod, 2*time.Minute))
		return w, dialWorker(t, "passthrough:///"+addr, node, pod)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	w, c := run(name)
	started := time.Now()
	ids := c.runSandboxes(ctx, t, sandboxes)
	time.Sleep(time.Until(started.Add(settle))) // not timing logic: see settle
	deleted := node.DeletePod(t, name)
	died, status, err := w.Wait(grace*time.Second + time.Minute)
	require.NoError(t, err, "pod log:\n%s", node.PodLog(name))
	msg := terminationMessage(t, node, name)
	t.Logf("termination message:\n%s", msg)
	rep := readJSON[drain.Report](t, filepath.Join(state, "last-shutdown.json"), node, name)
	require.NotNil(t, rep.Preserve, "the Report has the preserve phase")
	t0 := rep.Budget.Start
	kill := t0.Add(grace * time.Second)
	t.Logf("under runsc: manifest deleted -> SIGTERM %v; from SIGTERM: exit +%v (status %d), SIGKILL due +%v; %v",
		t0.Sub(deleted).Round(time.Millisecond), died.Sub(t0).Round(time.Millisecond), status, kill.Sub(t0), rep.Preserve.Counts)
	assert.Equal(t, deadline.AnchorSIGTERM, rep.Budget.Anchor, "no preStop hook: T0 is SIGTERM")
	assert.Zero(t, status, "the worker exited 0, not by SIGKILL (137)")
	assert.True(t, died.Before(kill), "the worker exited before the kubelet's SIGKILL")
	assert.Equal(t, sandboxes, rep.Preserve.Counts[pause.Preserved], "every sandbox checkpointed: %v", rep.Preserve.Counts)
	assert.Zero(t, rep.Lost())
	assert.Regexp(t, fmt.Sprintf(`^drainkit: all %d sandboxes preserved; exited \d+\.\d{3}s before SIGKILL\n`, sandboxes), msg)
	assert.Contains(t, msg, fmt.Sprintf("sandboxes: %d: ", sandboxes))

	again := name + "-again"
	w2, c2 := run(again)
	c2.restoreCheckpointed(ctx, t, ids)
	node.DeletePod(t, again)
	_, status, err = w2.Wait(grace*time.Second + time.Minute)
	require.NoError(t, err)
	assert.Zero(t, status)
}
