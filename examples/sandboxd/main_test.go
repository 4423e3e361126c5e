//go:build linux

package main

import (
	"context"
	"fmt"
	"net"
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
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/examples/sandboxd/server"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1"
	"github.com/drainkit/drainkit/internal/startsig/startsigtest"
)

// mainEnv makes the test binary run sandboxd's main with its arguments.
const mainEnv = "SANDBOXD_MAIN_TEST"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" { // main(), which os.Exit ends
		pid1.Init()
		fakeublk.MainIfDaemon()
		os.Exit(server.Main(context.Background(), os.Args[1:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// Fault (row 1112): sandboxd stops holding its signals when Close ends (the Catcher's
// Stop, last), before it exits, and a SIGTERM between the two (the kubelet's again: a
// restarted kubelet, a runtime that sends the stop signal with every stop request) had its
// default action. After a New that failed, that is while Main writes the termination
// message, the one account of why: the process ended by the signal, status 143 where 1
// was due, and no message. Here New fails at the -listen address another process holds,
// and the termination message is a FIFO that nobody reads until the SIGTERM has come:
//
//	sandboxd: "-listen: ... address already in use", Close: the signals no longer held
//	          opens the termination message to write it: waits for a reader
//	kubelet:  SIGTERM            before: sandboxd ends by it (143), no message
//	test:     reads the FIFO     after: the message, exit status 1
//
// Real process: this test binary, re-executed as sandboxd.
func TestSIGTERMAfterAFailedStartDoesNotCutTheTerminationMessage(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	hook, err := freeport.Addr()
	require.NoError(t, err)
	msg := filepath.Join(t.TempDir(), "termination-log")
	require.NoError(t, syscall.Mkfifo(msg, 0o600))
	p, stderr := startSandboxd(t, "-listen", busy.Addr().String(), "-hook-listen", hook, "-state-dir", t.TempDir(),
		"-termination-log", msg)
	data := startsigtest.SIGTERMAfterAFailedStart(t, p, msg, "sandboxd: -listen: ", stderr) // said before the message is written
	assert.Contains(t, string(data), "sandboxd: could not start: -listen: ", "the termination message")
}

// startSandboxd starts sandboxd as a real process (this test binary, re-executed, in its
// own process group) with args after "-grace 6s -devices 0", killed at the test's end if
// it still runs.
func startSandboxd(t *testing.T, args ...string) (*kubeletsim.Child, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-grace", "6s", "-devices", "0"}, args...)...)
	cmd.Env = append(os.Environ(), mainEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	child := kubeletsimtest.Start(t, cmd)
	return child, &stderr
}

// Faults (rows 1113, 1114, 1115): when the state directory's file system was full (or
// read-only) at the drain's end, the Report could not be written, and the one an earlier
// shutdown left stayed: read after the drain (drainkit report, a person once the pod and
// its last state are gone), it was taken for this one's. It is removed now, said at ERROR,
// and on a full file system this Report is written in the space it freed (row 1115); when
// it does not fit there either, the termination message, the log and the exit status say
// it was not written. The log said it only in a bare line with no level ("sandboxd:
// writing the report: ..."), with no "sandboxd exiting" line: that line is at ERROR now.
//
//	an earlier drain's Report in a 256 KiB tmpfs: one page
//	sandboxd serving (no sandboxes, or 24 whose pauses will fail), the tmpfs filled up
//	SIGTERM: the drain; the Report's write fails, ENOSPC
//	  no sandboxes: this Report (a page) written where the earlier one was: exit 0
//	  24 lost: this Report, larger than the page freed, does not fit: this drain's account
//	    as it stood there, unfinished (row 1611), no earlier Report, exit 1
//	  before: the earlier Report still there, exit 1
//
// Real process and a real full file system: this test binary, re-executed as sandboxd.
func TestReportThatCannotBeWrittenLeavesNoEarlierOneInItsPlace(t *testing.T) {
	for _, n := range []int{0, 24} {
		t.Run(fmt.Sprintf("%d sandboxes", n), func(t *testing.T) { reportOnAFullFileSystem(t, n) })
	}
}

// reportOnAFullFileSystem drains n sandboxes with the state directory's file system full.
func reportOnAFullFileSystem(t *testing.T, n int) {
	state := lastreporttest.Tmpfs(t, "256k")
	report := filepath.Join(state, server.ReportFile)
	const earlier = "2026-12-05T10:00:00Z"
	require.NoError(t, os.WriteFile(report, []byte(`{"start": "`+earlier+`", "preserve": {"counts": {"preserved": 2}}}`), 0o600))
	addr, err := freeport.Addr()
	require.NoError(t, err)
	hook, err := freeport.Addr()
	require.NoError(t, err)
	msg := filepath.Join(t.TempDir(), "termination-log")
	p, stderr := startSandboxd(t, "-listen", addr, "-hook-listen", hook, "-state-dir", state, "-termination-log", msg)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "sandboxd serving") }, 30*time.Second,
		10*time.Millisecond, "sandboxd did not start: %s", stderr)
	for range n {
		resp, err := http.Post("http://"+addr+"/sandboxes", "application/json", strings.NewReader(`{"timeout_s": 86400}`))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	lastreporttest.FillUp(t, filepath.Join(state, "filler"))

	lastreporttest.DrainOnAFullFileSystem(t, p, stderr, report, msg, earlier, n)
	if n == 0 {
		return
	}
	assert.Contains(t, stderr.String(), "sandboxd: writing the report: ")
	assert.Contains(t, stderr.String(), fmt.Sprintf(`level=ERROR msg="sandboxd exiting" preserved=0 lost=%d`, n), "row 1114")
	assert.Contains(t, stderr.String(), `err="writing the report: `, "row 1114")
}
