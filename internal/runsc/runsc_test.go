//go:build linux

package runsc

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/realpart"
)

// fakeEnv makes the test binary act as a fake runsc (see fakeRunsc).
const fakeEnv = "DRAINKIT_FAKE_RUNSC"

func TestMain(m *testing.M) {
	if os.Getenv(usableEnv) != "" {
		os.Exit(usableMain())
	}
	if dir := os.Getenv(terminalEnv); dir != "" {
		os.Exit(terminalMain(dir))
	}
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakeRunsc(mode, os.Args[1:]))
	}
	if args := os.Getenv(autoReapEnv); args != "" {
		os.Exit(autoReapMain(strings.Split(args, ",")))
	}
	if args := strings.Split(os.Getenv(reaperEnv), ","); len(args) == 4 {
		os.Exit(reaperMain(args[0], args[1], args[2], args[3]))
	}
	// This binary's helpers (fake runsc, the reapers) are built with -race when the
	// tests are, and the race detector sleeps a second at every clean exit
	// (atexit_sleep_ms): a second per fake runsc command that succeeds. Races in them
	// are still reported; only that wait for late reports goes.
	if err := os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m)
}

// fakeRunsc stands in for runsc in the tests that check the wrapper's own behaviour:
// "hang" blocks forever; "script" answers per subcommand like the real runsc does;
// "exited:PID" and "waitgone:PID" are runsc for a container whose sandbox has exited
// (fakeExited), whose wait blocks, or, with waitgone, fails as runsc's does once the
// sandbox process is gone; "latewait" is runsc whose wait writes the exit status and is
// still running when its context ends (its state says running, with no PID); "refused" is runsc whose kill refuses to signal a sandbox whose
// process is gone, and "unknown" runsc whose kill does not know the container;
// "ctlgone:PID" is runsc whose checkpoint found the sandbox running, then could not reach
// its control server, at PID; "reset:PID" is runsc whose checkpoint's call the sandbox
// closed unread (connection reset), its other commands fakeExited's for PID;
// "ctlstopped:PID" is runsc whose checkpoint could not reach the control server at PID,
// the container stopped; "gate:DIR" is runsc that runs until it is let go (fakeGate).
func fakeRunsc(mode string, args []string) int {
	var sub, id string
	if len(args) > 0 {
		id = args[len(args)-1]
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			sub = a
			break
		}
	}
	if pid, ok := strings.CutPrefix(mode, "ctlgone:"); ok && sub == "checkpoint" {
		// runsc 0.0~20221219's words, measured: its load found the sandbox running, and
		// its connection to the control server, a moment later, was refused.
		fmt.Fprintf(os.Stderr, "checkpoint failed: connecting to control server at PID %s: connection refused\n", pid)
		return 128
	}
	if pid, ok := strings.CutPrefix(mode, "ctlstopped:"); ok {
		if sub == "checkpoint" { // runsc's words, measured: the PID still ran
			fmt.Fprintf(os.Stderr, "checkpoint failed: connecting to control server at PID %s: connection refused\n", pid)
			return 128
		}
		return fakeExited("stopped", sub, id)
	}
	if pid, ok := strings.CutPrefix(mode, "reset:"); ok && sub == "checkpoint" {
		// runsc 0.0~20221219's words, measured: the sandbox process closed the call's
		// connection with the call unread.
		fmt.Fprintf(os.Stderr, "checkpoint failed: checkpointing container %q: urpc method \"containerManager.Checkpoint\" failed: connection reset by peer\n", id)
		return 128
	} else if ok {
		return fakeExited(pid, sub, id)
	}
	if dir, ok := strings.CutPrefix(mode, "gate:"); ok {
		return fakeGate(dir)
	}
	if pid, ok := strings.CutPrefix(mode, "exited:"); ok {
		return fakeExited(pid, sub, id)
	}
	if pid, ok := strings.CutPrefix(mode, "waitgone:"); ok {
		if sub == "wait" { // runsc 0.0~20221219's words, measured
			fmt.Fprintf(os.Stderr, "waiting on container %q: sandbox no longer running and its exit status is unavailable\n", id)
			return 128
		}
		return fakeExited(pid, sub, id)
	}
	switch {
	case mode == "refused" && sub == "kill": // runsc 0.0~20221219's words, measured
		fmt.Fprintln(os.Stderr, notRunning)
		return 128
	case mode == "unknown" && sub == "kill": // the same runsc's, measured
		fmt.Fprintln(os.Stderr, "loading container: file does not exist")
		return 128
	case mode == "hang":
		time.Sleep(time.Hour)
	case mode == "latewait" && sub == "wait":
		// runsc wait that has written the exit and not yet exited when its context
		// ends: the moment it was seen as the wait's end came.
		fmt.Printf(`{"id":%q,"exitStatus":0}`, id)
		_ = os.Stdout.Sync()
		wrote(args) // for a test that ends the wait only once it did
		time.Sleep(time.Hour)
	case mode == "latewait" && sub == "state":
		fmt.Printf(`{"id":%q,"status":"running","pid":0,"bundle":"/b"}`, id)
	case mode == "sandbox":
		fmt.Println("sandbox says hello")
		time.Sleep(time.Hour) // holds stdout like a forked runsc sandbox does
	case sub == "wait":
		fmt.Printf(`{"id":%q,"exitStatus":143}`, id)
	case sub == "state" && id == "missing":
		fmt.Fprintln(os.Stderr, "loading container: file does not exist")
		return 128
	case sub == "state":
		fmt.Printf(`{"ociVersion":"1.0.2-dev","id":%q,"status":"running","pid":42,"bundle":"/b"}`, id)
	case sub == "run":
		// Fork a long-lived child that inherits stdout, as runsc run -detach does.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), fakeEnv+"=sandbox")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return 1
		}
		fmt.Println(cmd.Process.Pid)
	case sub == "checkpoint":
		fmt.Fprintln(os.Stderr, "checkpoint failed: the sandbox is busy")
		return 1
	}
	return 0
}

// fakeExited is runsc for a container whose sandbox, process pid, has exited: with pid
// "stopped", runsc already knows (state stopped); otherwise pid is a zombie that runsc
// takes for running, its control server gone. wait blocks, as runsc's does on both.
func fakeExited(pid, sub, id string) int {
	switch sub {
	case "state":
		if pid == "stopped" {
			fmt.Printf(`{"id":%q,"status":"stopped","pid":-1,"bundle":"/b"}`, id)
		} else {
			fmt.Printf(`{"id":%q,"status":"running","pid":%s,"bundle":"/b"}`, id, pid)
		}
	case "wait":
		time.Sleep(time.Hour)
	default:
		fmt.Fprintf(os.Stderr, "connecting to control server at PID %s: connection refused\n", pid)
		return 128
	}
	return 0
}

// wrote marks, in the fake runsc's --root directory, that its wait wrote the exit
// (latewaitWrote), so that a test ends the wait's context after it, whatever the
// machine's load makes of the fake's start.
func wrote(args []string) {
	for _, a := range args {
		if root, ok := strings.CutPrefix(a, "--root="); ok {
			_ = os.WriteFile(filepath.Join(root, latewaitWrote), nil, 0o644)
		}
	}
}

// latewaitWrote is the file wrote makes.
const latewaitWrote = "latewait-wrote"

func fakeRuntime(t *testing.T, mode string) *Runtime {
	t.Setenv(fakeEnv, mode)
	return &Runtime{Binary: os.Args[0], Root: t.TempDir()}
}

func TestGlobalFlagsDefaultToNoNetwork(t *testing.T) {
	rt := &Runtime{Root: "/r"}
	assert.Equal(t, []string{"--root=/r", "--network=none"}, rt.GlobalFlags())
	rt = &Runtime{Root: "/r", Network: "host", Platform: "kvm", IgnoreCgroups: true, ExtraFlags: []string{"--debug"}}
	assert.Equal(t, []string{"--root=/r", "--network=host", "--platform=kvm", "--ignore-cgroups", "--debug"}, rt.GlobalFlags())
}

func TestCommandWithoutRootFailsNamingTheField(t *testing.T) {
	_, err := (&Runtime{}).State(context.Background(), "x")
	require.ErrorContains(t, err, "Runtime.Root")
}

func TestInvalidContainerIDIsRejectedBeforeRunning(t *testing.T) {
	rt := fakeRuntime(t, "hang")
	err := rt.Kill(context.Background(), "../etc", syscall.SIGTERM, false)
	require.ErrorContains(t, err, "invalid container id")
}

func TestCommandReturnsWhenContextEnds(t *testing.T) {
	rt := fakeRuntime(t, "hang")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := rt.Wait(ctx, "c1")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestWaitParsesExitStatus(t *testing.T) {
	rt := fakeRuntime(t, "script")
	status, err := rt.Wait(context.Background(), "c1")
	require.NoError(t, err)
	assert.Equal(t, 143, status)
}

func TestStateParsesAndMapsMissingContainer(t *testing.T) {
	rt := fakeRuntime(t, "script")
	st, err := rt.State(context.Background(), "c1")
	require.NoError(t, err)
	assert.Equal(t, State{ID: "c1", Status: "running", Pid: 42, Bundle: "/b"}, st)

	_, err = rt.State(context.Background(), "missing")
	require.ErrorIs(t, err, ErrNotExist)
}

func TestFailureCarriesRunscMessage(t *testing.T) {
	rt := fakeRuntime(t, "script")
	err := rt.Checkpoint(context.Background(), "c1", filepath.Join(t.TempDir(), "img"))
	require.ErrorContains(t, err, "the sandbox is busy")
}

// runsc run -detach leaves a sandbox process holding its stdout; Run must return as soon as
// runsc itself exits, not when that process ends (or after WaitDelay with an error).
func TestRunDoesNotWaitForTheForkedSandbox(t *testing.T) {
	rt := fakeRuntime(t, "script")
	logPath := filepath.Join(t.TempDir(), "c1.log")
	require.NoError(t, rt.Run(context.Background(), "c1", Bundle{Dir: "/b"}, logPath))

	var pid int
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(logPath)
		_, err := fmt.Sscan(string(data), &pid)
		return err == nil && strings.Contains(string(data), "sandbox says hello")
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
}

func TestWriteBundleWritesMinimalSpec(t *testing.T) {
	if _, err := StaticBusybox(); err != nil {
		realpart.Missing(t, err.Error())
	}
	b, err := WriteBundle(filepath.Join(t.TempDir(), "b"), CounterArgs())
	require.NoError(t, err)

	data, err := os.ReadFile(filepath.Join(b.Dir, "config.json"))
	require.NoError(t, err)
	var s spec
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&s))
	assert.Equal(t, CounterArgs(), s.Process.Args)
	assert.False(t, s.Root.Readonly, "the counter writes into the rootfs")
	assert.True(t, s.Process.NoNewPrivileges)
	for _, a := range applets {
		target, err := os.Readlink(filepath.Join(b.Rootfs(), "bin", a))
		require.NoError(t, err)
		assert.Equal(t, "busybox", target)
	}
	assert.True(t, isStatic(filepath.Join(b.Rootfs(), "bin", "busybox")))

	_, err = WriteBundle(filepath.Join(t.TempDir(), "empty"), nil)
	require.Error(t, err)
}

func TestCounterReportsMissingAndGarbage(t *testing.T) {
	b := Bundle{Dir: t.TempDir()}
	_, err := b.Counter()
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, os.MkdirAll(b.Rootfs(), 0o755))
	write := func(s string) {
		require.NoError(t, os.WriteFile(filepath.Join(b.Rootfs(), CounterFile), []byte(s), 0o644))
	}
	write("1")
	_, err = b.Counter()
	require.ErrorIs(t, err, os.ErrNotExist, "no complete line yet")
	write("1\n2\n3")
	n, err := b.Counter()
	require.NoError(t, err)
	assert.Equal(t, 2, n, "a torn last line is ignored")
	write("7\n")
	n, err = b.Counter()
	require.NoError(t, err)
	assert.Equal(t, 7, n)
	write("1\nx\n")
	_, err = b.Counter()
	require.ErrorContains(t, err, `"x"`)

	assert.True(t, ConsecutiveFromOne([]int{1, 2, 3}))
	assert.True(t, ConsecutiveFromOne(nil))
	assert.False(t, ConsecutiveFromOne([]int{1, 2, 1, 2}), "a restart")
	assert.False(t, ConsecutiveFromOne([]int{1, 3}), "a gap")
}

// realRuntime returns a Runtime over the real runsc, or skips the test.
func realRuntime(t testing.TB) *Runtime {
	if err := Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	rt := &Runtime{Root: t.TempDir()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, rt.DeleteAll(ctx))
	})
	return rt
}

// containerID is the ID of this test process's real container called name: name, then
// a tag drawn once per process. runsc names a sandbox's control socket
// (@runsc-sandbox.ID, in its network namespace) and its cgroup (/ID at the root of every
// hierarchy, for a spec with no cgroupsPath, as WriteBundle writes it) by the ID alone,
// whatever its --root. Two test processes at once (this package's tests in two
// worktrees, two CI jobs on one runner) that both ran "s" made the second's run fail,
// "address already in use"; where their network namespaces differ, both sandboxes share
// one cgroup (throttled together by the CPU quota the "slow" test sets), and the
// first's delete fails once it cannot remove it.
func containerID(name string) string { return name + "-" + processTag }

// processTag tells this test process's containers from another's: random, not the PID,
// which another PID namespace may give a concurrent test process too.
var processTag = rand.Text()[:8]

// waitCounter waits until the bundle's counter is above min and returns it.
func waitCounter(t testing.TB, b Bundle, min int) int {
	var n int
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		v, err := b.Counter()
		if err == nil && v > min {
			return v
		}
		n = v
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("counter in %s did not pass %d (last %d)", b.Dir, min, n)
	return 0
}

func TestCheckpointRestoreResumesCounter(t *testing.T) {
	rt := realRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	b, err := WriteBundle(filepath.Join(dir, "b"), CounterArgs())
	require.NoError(t, err)
	logPath := filepath.Join(dir, "s.log")
	id := containerID("s")

	require.NoError(t, rt.Run(ctx, id, b, logPath))
	st, err := rt.State(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "running", st.Status)
	waitCounter(t, b, 3)

	img := filepath.Join(dir, "img")
	require.NoError(t, rt.Checkpoint(ctx, id, img))
	st, err = rt.State(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "stopped", st.Status)
	saved, err := b.Counter()
	require.NoError(t, err)
	require.NoError(t, rt.Delete(ctx, id, false))

	require.NoError(t, rt.Restore(ctx, id, b, img, logPath))
	next := waitCounter(t, b, saved)
	waitCounter(t, b, next)
	counts, err := b.Counts()
	require.NoError(t, err)
	assert.True(t, ConsecutiveFromOne(counts), "the counter restarted or skipped: %v", counts)
}

func TestKillAndWaitReportSignalExit(t *testing.T) {
	rt := realRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	b, err := WriteBundle(filepath.Join(dir, "b"), CounterArgs())
	require.NoError(t, err)
	id := containerID("k")

	// runsc wait reports the exit status only to a waiter attached before the exit; a
	// machine slow enough to start the wait after the kill gets another try.
	var status int
	for attempt := 1; ; attempt++ {
		require.NoError(t, rt.Run(ctx, id, b, filepath.Join(dir, "k.log")))
		waited := make(chan error, 1)
		go func() {
			var err error
			status, err = rt.Wait(ctx, id)
			waited <- err
		}()
		waitCounter(t, b, 5)
		require.NoError(t, rt.Kill(ctx, id, syscall.SIGKILL, true))
		err := <-waited
		if err != nil && strings.Contains(err.Error(), "exit status is unavailable") && attempt < 3 {
			require.NoError(t, rt.Delete(ctx, id, true))
			require.NoError(t, os.Remove(filepath.Join(b.Rootfs(), CounterFile)))
			continue
		}
		require.NoError(t, err)
		break
	}
	assert.Equal(t, 128+int(syscall.SIGKILL), status)

	require.NoError(t, rt.Delete(ctx, id, false))
	_, err = rt.State(ctx, id)
	require.ErrorIs(t, err, ErrNotExist)
	ids, err := rt.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, ids)
	require.True(t, errors.Is(rt.Kill(ctx, id, syscall.SIGTERM, false), ErrNotExist))
}
