//go:build linux

package server

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
)

// sandboxd -runtime runsc is the container's command, so PID 1 of the pod's PID namespace
// with no init in front: the gVisor processes runsc leaves (runsc-sandbox, runsc-gofer,
// ...) are re-parented to it, and it never reaped them, so a later `runsc delete` of the
// sandbox waited for a zombie until its 5 s ran out. sandboxd now runs under its built-in
// init (internal/pid1): as PID 1 of a new PID namespace it pauses a sandbox, resumes it
// where it was in the same namespace, leaves no zombie, and on SIGTERM pauses it again,
// writes its Report and its termination message, and PID 1 exits 0.
func TestAsPID1ResumesInTheSamePodWithNoZombieLeft(t *testing.T) {
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	termLog := filepath.Join(dir, "termination-log")
	cmd := exec.Command(os.Args[0], "-listen", addr, "-hook-listen", freeAddr(t), "-state-dir", dir,
		"-grace", "20s", "-runtime", "runsc", "-devices", "0", "-pause-latency", "1s", "-termination-log", termLog)
	cmd.Env = append(os.Environ(), roleEnv+"=1", pid1test.ProcEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	// The cleanup's SIGKILL to PID 1 kills every process of its namespace: the sandboxes
	// too. Their runsc state, under the namespace's own root, and their cgroups go after
	// it (removeRunscState).
	removeRunscState(t, dir)
	p := pid1test.StartPID1(t, cmd)
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
	pid1test.NoZombies(t, p.Cmd.Process.Pid)
	code, _, body = call(t, "POST", base+"/sandboxes/"+id+"/resume", "")
	require.Equal(t, http.StatusOK, code, "resumed in the same pod: %s\n%s", body, &stderr)
	require.Eventually(t, counted(saved+2), time.Minute, 20*time.Millisecond)
	counts, err := bundle.Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "the counter went on where it was: %v", counts)
	pid1test.NoZombies(t, p.Cmd.Process.Pid)

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, to PID 1")
	err = p.Wait(t, time.Minute, "PID 1 did not exit: %s", &stderr)
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
