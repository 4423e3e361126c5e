package drain

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// The end-to-end test of the seed (AgentENV #413) with real processes: this
// test binary, re-executed, is a sandbox server with fake sandboxes (their
// preserve writes a state file; their 24 h timeouts never end on their own)
// and a device daemon child (internal/fakeublk, torn down by the ublk
// package's Teardown step); kubeletsim terminates it exactly as the
// kubelet would, with a grace period scaled down to 6 s.
//
//	drainkit: T0 preStop ... 2.6 s drain deadline -> hook returns; SIGTERM (SIGKILL due 6.6 s)
//	          preserve 12 x 0.3 s, 8 at a time; daemon stopped; exit ~3.5 s
//	seed:     T0 preStop waits for 0 sandboxes ... 6 s hook abandoned; SIGTERM (2 s floor)
//	          one pause at a time ... 8 s SIGKILL: sandboxes lost, daemon killed

const (
	e2eRoleEnv = "DRAIN_E2E_ROLE"
	e2eGrace   = 6 * time.Second
	e2eN       = 12
	e2ePause   = 300 * time.Millisecond
	e2eLimit   = 8
	// e2eMargin covers the request latency between the kubelet's T0 and
	// the server's, which the kubelet's truncation to whole seconds can
	// turn into up to 1 s more.
	e2eMargin = 1500 * time.Millisecond
)

// e2eEnv is the environment of every helper process: the race detector's
// default 1 s sleep at exit would read as a slow shutdown.
func e2eEnv(kv ...string) []string {
	return append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), kv...)
}

func TestEndToEndKubeletTerminationOfARealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and a 6 s grace period")
	}
	t.Run("drainkit/httpGet", func(t *testing.T) {
		dir, tl := e2eRun(t, "drainkit", false)
		assert.False(t, tl.Killed, "the server exited before SIGKILL:\n%s", tl)
		assert.Equal(t, http.StatusOK, tl.HookStatus, "the hook reached the drain (the kubelet takes a 404 for a hook that returned)")
		assert.Positive(t, tl.Headroom())
		assert.Equal(t, e2eN, countStateFiles(t, dir), "every sandbox preserved")
		assertDaemonStoppedCleanly(t, dir)
		rep := readReport(t, dir)
		assert.Zero(t, rep.Lost())
		assert.Equal(t, deadline.AnchorPreStop, rep.Budget.Anchor)
		assert.Equal(t, reasonDeadline, rep.PreStop.Reason, "the preStop wait gave up at the drain deadline")
		assert.Less(t, tl.SIGTERM.Sub(tl.Start), e2eGrace, "the hook returned inside the grace period")
		require.NoError(t, rep.Err())
	})
	t.Run("drainkit/exec", func(t *testing.T) {
		dir, tl := e2eRun(t, "drainkit", true)
		assert.False(t, tl.Killed, "the server exited before SIGKILL:\n%s", tl)
		assert.Empty(t, tl.HookErr)
		assert.Equal(t, e2eN, countStateFiles(t, dir))
		assertDaemonStoppedCleanly(t, dir)
	})
	t.Run("seed", func(t *testing.T) {
		dir, tl := e2eRun(t, "seed", false)
		assert.True(t, tl.HookKept, "the unbounded preStop wait used the whole grace period")
		assert.Equal(t, kubeletsim.MinimumGracePeriod, tl.Remaining)
		assert.True(t, tl.Killed, "SIGKILL came mid-shutdown:\n%s", tl)
		assert.Less(t, countStateFiles(t, dir), e2eN, "sandboxes lost")
		log := daemonLog(t, dir)
		assert.NotContains(t, log, "exit", "the device daemon was SIGKILLed")
		assert.NotContains(t, log, "sigterm", "it was never even asked to stop")
		assert.Equal(t, []int{0, 1}, sysTree(t, dir).Devices(), "its devices were live when it died")
	})
}

// e2eRun starts the server in mode, terminates it with kubeletsim and
// returns its state directory and the timeline.
func e2eRun(t *testing.T, mode string, execHook bool) (string, *kubeletsim.Timeline) {
	dir := t.TempDir()
	child, addr := e2eStart(t, dir, "E2E_MODE="+mode)
	var hook kubeletsim.Hook = kubeletsim.HTTPGet{URL: "http://" + addr + "/drain"}
	if execHook {
		hook = kubeletsim.Exec{Path: os.Args[0], Args: []string{"-test.run=^$"},
			Env: e2eEnv(e2eRoleEnv+"=hook", "E2E_URL=http://"+addr+"/drain")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tl, err := kubeletsim.Terminate(ctx, child, hook, e2eGrace)
	require.NoError(t, err)
	t.Logf("%s timeline:\n%s", mode, tl)
	t.Cleanup(func() { // after the caller's assertions: the report says why one failed
		if b, err := os.ReadFile(filepath.Join(dir, "report.json")); err == nil && t.Failed() {
			t.Logf("report: %s", b)
		}
	})
	return dir, tl
}

// e2eStart starts the server with its state in dir and returns it and its
// address.
func e2eStart(t *testing.T, dir string, env ...string) (*kubeletsim.Child, string) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = e2eEnv(append([]string{e2eRoleEnv + "=server", "E2E_DIR=" + dir}, env...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	child := kubeletsimtest.Start(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the server did not start")
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	require.True(t, ok, "unexpected first line %q", line)
	return child, addr
}

// Fault: a person's Ctrl-C (SIGINT) after SIGTERM, with real signals.
// There is no preStop hook (T0 is the SIGTERM); the last step would wait
// until the budget's deadline, 4.5 s away; the SIGINT cuts it to its
// 200 ms reserve. (A SIGTERM again would not: docs/faults.md row 187.)
//
//	0 s SIGTERM -> preserve, ublk, http ... "hang" waits for its deadline (4.5 s)
//	SIGINT once the listener closed -> "hang" gets 200 ms -> exit
func TestEndToEndSIGINTForcesTheRest(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	dir := t.TempDir()
	child, addr := e2eStart(t, dir, "E2E_MODE=drainkit", "E2E_HANG_STEP=1")
	first := time.Now()
	require.NoError(t, child.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { // the http step closed the listener: "hang" is next
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 10*time.Second, 10*time.Millisecond)
	second := time.Now()
	require.NoError(t, child.Signal(syscall.SIGINT))
	select {
	case <-child.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not exit after SIGINT")
	}
	exited := time.Now()
	rep := readReport(t, dir)
	assert.True(t, rep.Forced)
	assert.Equal(t, deadline.AnchorSIGTERM, rep.Budget.Anchor)
	assert.Equal(t, e2eN, countStateFiles(t, dir))
	assertDaemonStoppedCleanly(t, dir)
	hang := rep.Phase("hang")
	require.NotNil(t, hang)
	assert.Equal(t, TimedOut, hang.Result)
	assert.Contains(t, hang.Error, ErrForced.Error())
	assert.True(t, hang.Deadline.Sub(first) > 4*time.Second, "its own deadline was seconds away")
	assert.True(t, hang.End.Before(hang.Deadline), "force ended it before its deadline")
	assert.True(t, rep.ForcedAt.After(rep.Phase("http").Start), "forced by SIGINT, sent once the http step ran")
	assert.True(t, exited.Before(hang.Deadline), "the server exited %v after SIGINT, before the hang step's deadline", exited.Sub(second))
}

func daemonLog(t *testing.T, dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "daemon.log"))
	require.NoError(t, err)
	return string(b)
}

// assertDaemonStoppedCleanly checks the daemon's own log and the sysfs tree:
// asked to stop, it deleted every device and exited by itself.
func assertDaemonStoppedCleanly(t *testing.T, dir string) {
	t.Helper()
	log := daemonLog(t, dir)
	assert.Contains(t, log, "sigterm")
	assert.Contains(t, log, "delete 0\n")
	assert.Contains(t, log, "delete 1\n")
	assert.True(t, strings.HasSuffix(log, "exit\n"), "the daemon exited by itself:\n%s", log)
	assert.Empty(t, sysTree(t, dir).Devices(), "every device deleted")
}

func sysTree(t *testing.T, dir string) *fakeublk.Tree {
	tree, err := fakeublk.NewTree(filepath.Join(dir, "sys"))
	require.NoError(t, err)
	return tree
}

func countStateFiles(t *testing.T, dir string) int {
	m, err := filepath.Glob(filepath.Join(dir, "*.state"))
	require.NoError(t, err)
	return len(m)
}

func readReport(t *testing.T, dir string) *Report {
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	var r Report
	require.NoError(t, json.Unmarshal(b, &r))
	return &r
}

// runE2ERole runs one helper process of the end-to-end test.
func runE2ERole(role string) int {
	var err error
	switch role {
	case "server":
		err = e2eServer(os.Getenv("E2E_MODE"), os.Getenv("E2E_DIR"))
	case "defaults":
		err = defaultsServer(os.Getenv("E2E_DIR"))
	case "onecall":
		return oneCallServer()
	case "handlesignals":
		return handleSignalsProcess()
	case "reportafter":
		return reportAfterDrainProcess(os.Getenv("E2E_MODE"))
	case "hook": // the exec preStop hook, as drain/cmd/drainhook runs it
		_, err = ExecHook{URL: os.Getenv("E2E_URL"), RequestTimeout: time.Second, Start: ProcessStart()}.Run(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, "hook:", err)
		}
		return 0 // a hook always exits 0
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		return 1
	}
	return 0
}

// e2eNode is an end-to-end server's sandboxes, sb-0 to sb-(n-1): the i-th
// preserve takes pauses[i] and writes <id>.state; they never end on their
// own.
type e2eNode struct {
	dir    string
	pauses []time.Duration
	mu     sync.Mutex
	run    map[string]bool
}

// newE2ENode returns a node with one running sandbox per pause time.
func newE2ENode(dir string, pauses []time.Duration) *e2eNode {
	n := &e2eNode{dir: dir, pauses: pauses, run: map[string]bool{}}
	for i := range pauses {
		n.run["sb-"+strconv.Itoa(i)] = true
	}
	return n
}

type e2eSandbox struct {
	id    string
	pause time.Duration
	node  *e2eNode
}

func (s e2eSandbox) ID() string { return s.id }

func (s e2eSandbox) Preserve(ctx context.Context) error {
	t := time.NewTimer(s.pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := os.WriteFile(filepath.Join(s.node.dir, s.id+".state"), []byte("paused"), 0o644); err != nil {
		return err
	}
	s.node.mu.Lock()
	delete(s.node.run, s.id)
	s.node.mu.Unlock()
	return nil
}

func (n *e2eNode) List(context.Context) ([]pause.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []pause.Sandbox
	for i, d := range n.pauses {
		if id := "sb-" + strconv.Itoa(i); n.run[id] {
			out = append(out, e2eSandbox{id: id, pause: d, node: n})
		}
	}
	return out, nil
}

func e2eServer(mode, dir string) error {
	node := newE2ENode(dir, slices.Repeat([]time.Duration{e2ePause}, e2eN))
	// The device daemon: a real child (internal/fakeublk) serving two
	// devices in a fake sysfs tree, which it stops and deletes on SIGTERM.
	sys := filepath.Join(dir, "sys")
	daemon, err := fakeublk.Start(context.Background(), fakeublk.DaemonConfig{
		SysRoot:  sys,
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 240, Minor: 0, Reads: 3}, {ID: 1, Major: 240, Minor: 1, Writes: 2}},
		Step:     50 * time.Millisecond,
		EventLog: filepath.Join(dir, "daemon.log"),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	srv := &http.Server{Handler: mux}
	if mode == "seed" {
		return seedServer(node, ln, mux, srv, func(ctx context.Context) error {
			if err := syscall.Kill(daemon.Pid(), syscall.SIGTERM); err != nil {
				return err
			}
			select {
			case <-daemon.Done():
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}
	proc, err := ublk.FindProcess(daemon.Pid())
	if err != nil {
		return err
	}
	// The holders scan reads an empty procfs: no process can hold a fake
	// device, and a scan of the machine's /proc costs what everything else
	// running there costs (0.1 s idle, up to 1.5 s at a load of 13 on 2
	// cores), which the step's 1 s reserve, scaled down with the grace,
	// cannot cover. The scan of a real /proc is blockdev's and ublk's test.
	procfs := filepath.Join(dir, "proc")
	if err := os.Mkdir(procfs, 0o755); err != nil {
		return err
	}
	td, err := ublk.New(proc, ublkhook.With(ublk.Config{NoControl: true, Reserve: time.Second, PollInterval: 20 * time.Millisecond},
		ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: procfs}))
	if err != nil {
		return err
	}

	budget, err := deadline.New(e2eGrace, deadline.Config{Margin: e2eMargin})
	if err != nil {
		return err
	}
	cfg := Config{
		Budget:    budget,
		Sandboxes: node,
		// A prior of twice the real pause, as a server would set one it
		// has not measured yet: an estimate exactly equal to the pause
		// left no slack for an exec hook's start-up on a loaded machine.
		Pause:        pause.Config{Limit: e2eLimit, Estimator: deadline.NewEstimator(2 * e2ePause)},
		PollInterval: 100 * time.Millisecond,
		Steps: []Step{
			td,
			HTTPServerStep("http", srv, 300*time.Millisecond),
		},
	}
	if os.Getenv("E2E_HANG_STEP") != "" { // a last step that waits for its context: only force ends it early
		cfg.Steps = append(cfg.Steps, step("hang", 200*time.Millisecond, func(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) }))
	}
	d, err := New(cfg)
	if err != nil {
		return err
	}
	mux.Handle("GET /drain", d.PreStop())
	mux.Handle("GET /readyz", d.Gate().Readiness(nil))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT) // before anyone can signal us
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("listening", ln.Addr())
	rep := d.ServeSignals(context.Background(), sigs)
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return errors.Join(os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644), rep.Err())
}

// seedServer is the seed's behaviour, written without drainkit: a preStop
// that waits until no sandbox runs, with no deadline, and a SIGTERM handler
// that pauses sandboxes one at a time, then stops the daemon.
func seedServer(node *e2eNode, ln net.Listener, mux *http.ServeMux, srv *http.Server, stopDaemon func(context.Context) error) error {
	mux.HandleFunc("GET /drain", func(w http.ResponseWriter, r *http.Request) {
		for {
			sbs, _ := node.List(r.Context())
			if len(sbs) == 0 || r.Context().Err() != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("listening", ln.Addr())
	<-sig
	sbs, _ := node.List(context.Background())
	for _, s := range sbs {
		_ = s.Preserve(context.Background())
	}
	return errors.Join(stopDaemon(context.Background()), srv.Close())
}
