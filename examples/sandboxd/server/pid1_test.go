package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
)

// procEnv makes the role process mount a /proc of its own PID namespace first, as a
// container runtime does for a pod's container before it starts the command.
const procEnv = "SANDBOXD_TEST_MOUNT_PROC"

// mountProc mounts a proc filesystem on /proc in the process's own mount namespace (the
// test starts it with one: Unshareflags CLONE_NEWNS, made private), so /proc shows its
// PID namespace, and removes procEnv so that no process started later mounts it again.
func mountProc() error {
	if err := os.Unsetenv(procEnv); err != nil {
		return err
	}
	return unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// sandboxd -runtime runsc is the container's command, so PID 1 of the pod's PID namespace
// with no init in front: the gVisor processes runsc leaves (runsc-sandbox, runsc-gofer,
// ...) are re-parented to it, and it never reaped them, so a later `runsc delete` of the
// sandbox waited for a zombie until its 5 s ran out. sandboxd now runs under its built-in
// init (internal/pid1): as PID 1 of a new PID namespace it pauses a sandbox, resumes it
// where it was in the same namespace, leaves no zombie, and on SIGTERM pauses it again,
// writes its Report and its termination message, and PID 1 exits 0.
func TestAsPID1ResumesInTheSamePodWithNoZombieLeft(t *testing.T) {
	if err := runsc.Usable(); err != nil {
		skipOrFail(t, "skipping real-runsc test: "+err.Error())
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	termLog := filepath.Join(dir, "termination-log")
	cmd := exec.Command(os.Args[0], "-listen", addr, "-hook-listen", freeAddr(t), "-state-dir", dir,
		"-grace", "20s", "-runtime", "runsc", "-devices", "0", "-pause-latency", "1s", "-termination-log", termLog)
	cmd.Env = append(os.Environ(), roleEnv+"=1", procEnv+"=1", "GORACE=atexit_sleep_ms=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig: syscall.SIGKILL}
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// SIGKILL to PID 1 kills every process of its namespace: the sandboxes too. Their runsc
	// state (under the namespace's own root) goes with the temporary directory.
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	base := "http://" + addr
	waitStarted(t, base, &stderr)
	bundle := runsc.Bundle{Dir: filepath.Join(dir, "runsc", "bundles", createSandbox(t, base))}
	id := filepath.Base(bundle.Dir)
	counted := func(min int) func() bool {
		return func() bool { n, err := bundle.Counter(); return err == nil && n > min }
	}
	require.Eventually(t, counted(2), time.Minute, 20*time.Millisecond)

	code, _, body := call(t, "POST", base+"/sandboxes/"+id+"/pause", "")
	require.Equal(t, http.StatusOK, code, "%s\n%s", body, &stderr)
	saved, err := bundle.Counter()
	require.NoError(t, err)
	noZombies(t, cmd.Process.Pid)
	code, _, body = call(t, "POST", base+"/sandboxes/"+id+"/resume", "")
	require.Equal(t, http.StatusOK, code, "resumed in the same pod: %s\n%s", body, &stderr)
	require.Eventually(t, counted(saved+2), time.Minute, 20*time.Millisecond)
	counts, err := bundle.Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "the counter went on where it was: %v", counts)
	noZombies(t, cmd.Process.Pid)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, to PID 1")
	select {
	case err = <-exited:
		exited <- err
	case <-time.After(time.Minute):
		t.Fatalf("PID 1 did not exit: %s", &stderr)
	}
	require.NoError(t, err, "PID 1's exit status is sandboxd's 0: %s", &stderr)
	data, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	require.NotNil(t, rep.Preserve)
	assert.Zero(t, rep.Preserve.Lost(), "the resumed sandbox paused at SIGTERM")
	msg, err := os.ReadFile(termLog)
	require.NoError(t, err, "the termination message is written")
	assert.Contains(t, string(msg), ReportFile)
}

// noZombies waits until no process of the PID namespace whose PID 1 is the host process
// init has exited unreaped. A zombie that a working init has not yet reaped is gone
// within milliseconds of its SIGCHLD; one nobody reaps stays until the namespace ends.
func noZombies(t *testing.T, init int) {
	t.Helper()
	var zombies []string
	ok := assert.Eventually(t, func() bool {
		zombies = namespaceZombies(t, init)
		return len(zombies) == 0
	}, 10*time.Second, 10*time.Millisecond)
	if !ok {
		t.Errorf("zombies in PID 1's namespace: %v", zombies)
	}
}

// namespaceZombies lists, as "pid (comm)", the zombies of the PID namespace of the host
// process init.
func namespaceZombies(t *testing.T, init int) []string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	require.NoError(t, err)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, p := range stats {
		data, err := os.ReadFile(p)
		i := bytes.LastIndexByte(data, ')') // comm may hold spaces and parentheses
		if err != nil || i < 0 || i+2 >= len(data) || data[i+2] != 'Z' {
			continue
		}
		if link, err := os.Readlink(filepath.Join(filepath.Dir(p), "ns/pid")); err == nil && link == ns {
			out = append(out, string(data[:i+1]))
		}
	}
	return out
}

// skipOrFail skips t for a missing real part, and fails it under CI=true, where every
// part must be there.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why + " (CI=true: must not be skipped)")
	}
	t.Skip(why)
}
