//go:build linux

package server

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/ublk"
)

// apiEnv is an apiConfig in JSON: sandboxd run by the test binary (roleEnv) reads its pod
// there instead of in its service account's cluster.
const apiEnv = "SANDBOXD_TEST_API"

// apiConfig is the part of a kube.Config (fakeapiserver.Start's) apiEnv passes on.
type apiConfig struct{ Host, Namespace, TokenFile, CAFile string }

func init() {
	if os.Getenv(roleEnv) == "" || os.Getenv(apiEnv) == "" {
		return
	}
	var c apiConfig
	if err := json.Unmarshal([]byte(os.Getenv(apiEnv)), &c); err != nil {
		panic(apiEnv + ": " + err.Error())
	}
	inCluster = func() kube.Config {
		return kube.Config{Host: c.Host, Namespace: c.Namespace, TokenFile: c.TokenFile, CAFile: c.CAFile}
	}
}

// Fault (docs/faults.md row 1121): the ublk step's teardown takes its reserve when it
// starts, and with no sandbox it starts at SIGTERM, before the read of the pod's deletion
// answers: with -grace 1h, the reserve of an hour's grace, 30 s. The read then finds the
// pod deleted with a grace of 30 s (the reserve in use 1.5 s) and moves the step's
// deadline to about SIGTERM + 27 s; internal/ublkstep held such a move back until only the
// reserve in use was left, the holder wait going on, for a daemon whose stop request it
// saw, and it saw it only for a ublk.DaemonFuncs (the supervisor's, row 1120). sandboxd's
// *ublk.Socket, which ublk reads the process of by its type, was told the move at once:
// 30 s of stages laid out in 27 s. Real processes: sandboxd, its fake device daemon, and
// a TLS API server that answers the pod's reads only once the step waits (an API server
// under load); kernel not known fixed; ublkb0 held by dm-0 (a stacked device: no kill
// releases it):
//
//	0 s      SIGTERM, the pod deleted with 30 s; no sandbox: the ublk step starts, its
//	         stages laid out from 30 s, and waits for dm-0
//	then     the deletion read: the deadline about 27 s, the reserve in use 1.5 s
//	before:  the last resort at once, dm-0 spared, the daemon never asked to stop
//	         (*HeldError): its device live for the pod's SIGKILL
//	then     dm-0 lets go once the step took the move: the daemon is asked to stop, and
//	         exits with no device live
//
// The read was answered 300 ms late and dm-0 let go at 1 s, in real time: an order a
// loaded machine need not keep (the step begins 4-17 ms after SIGTERM here).
func TestSandboxdTeardownTakesTheReserveOfADeletionReadAfterItBegan(t *testing.T) {
	served := fakeapiserver.NewServed(&fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "sandboxes", UID: "uid-0"})
	stepWaits := logbuf.NewSignal(`msg="ublk: waiting for the devices' holders to close"`)
	moveTaken := logbuf.NewSignal(`msg="ublk: the step's deadline moves earlier, with a reserve in use shorter`)
	var slow atomic.Bool
	_, kcfg := fakeapiserver.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() && r.Method == http.MethodGet {
			select { // the read lands after the step began
			case <-stepWaits.Seen():
			case <-r.Context().Done():
			case <-time.After(20 * time.Second): // a hang guard: the assertions below say what went wrong
			}
		}
		served.ServeHTTP(w, r)
	}), "sandboxes", "token-1")
	api, err := json.Marshal(apiConfig{Host: kcfg.Host, Namespace: kcfg.Namespace, TokenFile: kcfg.TokenFile, CAFile: kcfg.CAFile})
	require.NoError(t, err)

	dir, addr := t.TempDir(), freeAddr(t)
	cmd := exec.Command(os.Args[0], "-listen", addr, "-hook-listen", freeAddr(t), "-state-dir", dir, "-grace", "1h",
		"-pause-latency", "50ms", "-devices", "1", "-pod", "sandboxd-0", "-pod-uid", "uid-0")
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0", kernelEnv+"=6.8.0-45-generic", apiEnv+"="+string(api))
	var stderr logbuf.Buffer
	cmd.Stderr = io.MultiWriter(&stderr, stepWaits, moveTaken)
	p := pid1test.Start(t, cmd)
	waitStarted(t, "http://"+addr, &stderr)
	dm0 := filepath.Join(sysRoot(dir), "block", "ublkb0", "holders", "dm-0")
	require.NoError(t, os.MkdirAll(filepath.Dir(dm0), 0o755))
	require.NoError(t, os.WriteFile(dm0, nil, 0o644))

	slow.Store(true)
	sigterm := time.Now()
	served.Pod().Delete(sigterm, 30*time.Second) // kubectl delete --grace-period=30
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM")
	letGo := make(chan time.Time, 1)
	ended := t.Context().Done()
	go func() {
		select {
		case <-moveTaken.Seen():
		case <-ended: // the test failed before it
			return
		case <-time.After(20 * time.Second): // a hang guard, as the read's
		}
		letGo <- time.Now()
		_ = os.Remove(dm0)
	}()

	report := filepath.Join(dir, ReportFile)
	require.Eventually(t, func() bool { return lastreporttest.Finished(report) }, 20*time.Second, 10*time.Millisecond,
		"the Report written: %s", &stderr)
	td := ublkAccount(t, dir)
	if td.Verdict != ublk.VerdictStopped {
		_ = p.Cmd.Process.Kill() // the pod's SIGKILL: sandboxd waits while its daemon serves a live device
	}
	exitErr := p.Wait(t, 20*time.Second, "sandboxd did not exit: %s", &stderr)
	t.Logf("the step began at SIGTERM + %v, its deadline + %v: %s", td.Start.Sub(sigterm), td.Deadline.Sub(sigterm), td.String())
	if td.LastResort != nil {
		t.Logf("the last resort at SIGTERM + %v", td.LastResort.At.Sub(sigterm))
	}
	if s := td.Step("reserve in use"); assert.NotNil(t, s, "the deletion read after the step began, its move held back: %+v", td.Steps) {
		assert.Contains(t, s.Result, ", the stages laid out from 30s", "a 30 s deletion's reserve in use, about 1.5 s (its deletionTimestamp in whole seconds)")
	}
	assert.Contains(t, stderr.String(), "the pod's deletion read", "the deletion read by the drain")
	assert.True(t, td.Deadline.Before(sigterm.Add(30*time.Second)), "the step ends before the deletion's SIGKILL")
	assert.Nil(t, td.LastResort, "no last resort: dm-0 let go within the holder wait")
	req := td.Step("request stop")
	require.NotNil(t, req, "the daemon asked to stop")
	t.Logf("asked to stop at SIGTERM + %v, stopped at + %v", req.Start.Sub(sigterm), td.Start.Add(td.Duration).Sub(sigterm))
	assert.False(t, req.Start.Before(<-letGo), "asked once dm-0 let go, at SIGTERM + %v", req.Start.Sub(sigterm))
	assert.Equal(t, ublk.VerdictStopped, td.Verdict)
	assert.True(t, td.Daemon.Exited, "the daemon exited on its own")
	assert.NoError(t, exitErr, "sandboxd exited 0 on its own: %s", &stderr)
	events, err := os.ReadFile(filepath.Join(dir, EventLogFile))
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(events), "exit\n"), "the device daemon stopped its device and exited: %s", events)
}
