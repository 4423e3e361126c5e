//go:build linux

package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/pause"
)

// A sandboxd process on dir, as its pod runs it.
type sandboxdProc struct {
	*pid1test.Process
	base   string
	stderr *logbuf.Buffer
}

// startSandboxd starts sandboxd as a real process on the state directory dir, with the
// fake runtime and no devices, named pod in its environment (POD_NAME, as the manifest
// sets it; -pod is empty: no Kubernetes API here); it does not wait for it to serve.
func startSandboxd(t *testing.T, dir, pod string) *sandboxdProc {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "-listen", addr, "-hook-listen", freeAddr(t), "-state-dir", dir, "-grace", "6s",
		"-pause-latency", "50ms", "-devices", "0", "-pod", "")
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0", "POD_NAME="+pod)
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	return &sandboxdProc{Process: pid1test.Start(t, cmd), base: "http://" + addr, stderr: &stderr}
}

// waitWaiting waits until the process says it waits for the state directory, or serves
// (as it did before the lock), and checks that it waits for holder: it names holder's PID
// and pod, and nothing answers at its address, no API, no /readyz (it must not admit
// sandboxes before it owns its state).
func (p *sandboxdProc) waitWaiting(t *testing.T, holder *sandboxdProc, pod string) {
	t.Helper()
	serves := func() bool {
		resp, err := http.Get(p.base + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}
	const waiting = "state directory held by another server; waiting for it to exit before touching it"
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), waiting) || serves() },
		30*time.Second, 10*time.Millisecond, "neither waits nor serves:\n%s", p.stderr)
	assert.False(t, serves(), "the second sandboxd serves on a state directory another one holds:\n%s", p.stderr)
	assert.Contains(t, p.stderr.String(), waiting)
	assert.Contains(t, p.stderr.String(), fmt.Sprintf(`holder="pid %d (%s) since `, holder.Cmd.Process.Pid, pod))
}

// listStates returns the state of each sandbox the sandboxd at base lists, by ID.
func listStates(t *testing.T, base string) map[string]string {
	t.Helper()
	code, _, body := call(t, "GET", base+"/sandboxes", "")
	require.Equal(t, http.StatusOK, code, body)
	var list []map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	states := map[string]string{}
	for _, v := range list {
		states[v["id"]] = v["state"]
	}
	return states
}

// The fault: a sandboxd started on the state directory of one still draining (a
// DaemonSet rolling update with maxSurge) removed the old one's runsc state and wrote
// the same images directory, and the old one's preserves failed. The timeline now:
//
//	old: serves two sandboxes
//	new: starts on the same -state-dir     -> "held by another server", old's PID and pod;
//	                                          not listening: /readyz refused
//	old: SIGTERM, pauses both, exits 0
//	new:                                   -> "state directory taken"; serves both, paused
func TestSecondSandboxdWaitsForTheStateDirectoryUntilTheFirstExits(t *testing.T) {
	dir := t.TempDir()
	old := startSandboxd(t, dir, "sandboxd-old")
	waitStarted(t, old.base, old.stderr)
	ids := []string{createSandbox(t, old.base), createSandbox(t, old.base)}

	next := startSandboxd(t, dir, "sandboxd-new")
	next.waitWaiting(t, old, "sandboxd-old")
	assert.Equal(t, map[string]string{ids[0]: "running", ids[1]: "running"}, listStates(t, old.base),
		"the old sandboxd serves on, its sandboxes untouched")

	require.NoError(t, old.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, old.Wait(t, 30*time.Second, "the old sandboxd did not exit: %s", old.stderr),
		"exit status 0: %s", old.stderr)
	assert.Contains(t, old.stderr.String(), "preserved=2 lost=0", "the old one preserved both")

	waitStarted(t, next.base, next.stderr)
	assert.Contains(t, next.stderr.String(), `msg="state directory taken"`)
	assert.Equal(t, map[string]string{ids[0]: "paused", ids[1]: "paused"}, listStates(t, next.base),
		"the new sandboxd took over what the old one preserved")
	code, _, body := call(t, "POST", next.base+"/sandboxes/"+ids[0]+"/resume", "")
	assert.Equal(t, http.StatusOK, code, body)
}

// A sandboxd SIGKILLed (out of memory, its grace run out) releases the state directory
// all the same: the kernel drops the lock with the process, and the one waiting for it
// takes it.
func TestSandboxdWaitingForAKilledOneTakesTheStateDirectory(t *testing.T) {
	dir := t.TempDir()
	old := startSandboxd(t, dir, "sandboxd-old")
	waitStarted(t, old.base, old.stderr)
	next := startSandboxd(t, dir, "sandboxd-new")
	next.waitWaiting(t, old, "sandboxd-old")

	require.NoError(t, old.Cmd.Process.Kill())
	err := old.Wait(t, 30*time.Second, "the old sandboxd did not die")
	require.Error(t, err)
	assert.Equal(t, "signal: killed", err.Error())
	waitStarted(t, next.base, next.stderr)
	assert.Contains(t, next.stderr.String(), `msg="state directory taken"`)
}

// A sandboxd whose own SIGTERM comes while it waits for the state directory (the kubelet
// deleting a pod that never got to run) exits 1 with an error that says why and names
// the holder, and touched nothing in the directory: the old sandboxd then drains as if
// it had never been there.
func TestSandboxdTerminatedWhileWaitingExitsTouchingNothing(t *testing.T) {
	dir := t.TempDir()
	old := startSandboxd(t, dir, "sandboxd-old")
	waitStarted(t, old.base, old.stderr)
	ids := []string{createSandbox(t, old.base), createSandbox(t, old.base)}
	before := tree(t, dir)

	next := startSandboxd(t, dir, "sandboxd-new")
	next.waitWaiting(t, old, "sandboxd-old")
	require.NoError(t, next.Cmd.Process.Signal(syscall.SIGTERM))
	err := next.Wait(t, 30*time.Second, "the waiting sandboxd did not exit: %s", next.stderr)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exit status 1, not %v: %s", err, next.stderr)
	assert.Equal(t, 1, exit.ExitCode(), "%s", next.stderr)
	assert.Regexp(t, fmt.Sprintf(`sandboxd: state directory %s: gave up waiting after \S+ for pid %d \(sandboxd-old\) since \S+, which holds it: SIGTERM received\n`,
		dir, old.Cmd.Process.Pid), next.stderr.String())
	assert.Equal(t, before, tree(t, dir), "the waiting sandboxd touched nothing in the state directory")

	assert.Equal(t, map[string]string{ids[0]: "running", ids[1]: "running"}, listStates(t, old.base))
	require.NoError(t, old.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, old.Wait(t, 30*time.Second, "the old sandboxd did not exit: %s", old.stderr),
		"exit status 0: %s", old.stderr)
	data, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
}

// tree lists every file under dir with its size, mode and modification time.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %v %d %s", path, fi.Mode(), fi.Size(), fi.ModTime().Format(time.RFC3339Nano)))
		return nil
	}))
	return out
}
