//go:build linux

package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: the device daemon (-daemon) exited while the server ran, before
// any termination: here one that exits 0 at once, as a daemon that forks
// into the background does (one that crashed, or that the OOM killer
// killed, is the same to the server: its devices are not served). The
// supervisor logged it at Info ("child exited"), /readyz stayed 200, and
// the drain after it ended with exit status 0 and no word of the daemon in
// the note or the termination message. It is now an ERROR line, /readyz
// answers 503 naming it, and the note, the termination message and an
// exit status of 1 say it. Real processes:
//
//	before: /readyz 200 for 5 s after the daemon's exit; exit 0, no note
//	now:    /readyz 503 "the device daemon (-daemon) exited 0 on its own";
//	        exit 1, the note and the termination message name it
func TestDaemonThatExitsBeforeTerminationIsNotReadyAndNoCleanExit(t *testing.T) {
	dir := t.TempDir()
	report, termLog := filepath.Join(dir, "report.json"), filepath.Join(dir, "termination-log")
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "5s", "-report", report, "-termination-log", termLog,
			"-daemon", "true"},
		helperCommand("stubserver", "-listen", api),
		EnvSysfsRoot+"="+filepath.Join(dir, "sys"), EnvProcfsRoot+"="+emptyProcfs(filepath.Join(dir, "sys")))

	var body string
	ready := assert.Eventually(t, func() bool {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, "the device daemon (-daemon) exited 0 on its own")
	}, 5*time.Second, 20*time.Millisecond, "not ready once the daemon exited, and /readyz says why")
	require.True(t, ready, "/readyz said %q", body)

	sup.signal(t, syscall.SIGTERM)
	code := sup.exitCode(t, 15*time.Second)
	rep := readReport(t, report)
	assert.Equal(t, 0, rep.Server.Code, "the server itself exited 0")
	require.NotNil(t, rep.Daemon)
	assert.Equal(t, "exited 0", rep.Daemon.String())
	assert.Equal(t, 1, code, "a daemon gone before its teardown is no clean exit")
	assert.Equal(t, code, rep.ExitCode)
	assert.Contains(t, rep.Note, "the device daemon (-daemon) exited 0 on its own")
	assert.Contains(t, readFile(t, termLog), "the device daemon (-daemon) exited 0 on its own")
}
