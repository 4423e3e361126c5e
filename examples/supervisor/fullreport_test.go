//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault (row 1138): when -report's file system was full at exit, the Report could not be
// written and the one an earlier shutdown left stayed: read after the drain (drainkit
// report, a person once the pod and its last state are gone), it was taken for this
// one's. The supervisor now writes by sandboxd's and the gVisor worker's rule
// (lastreport): the earlier Report is removed, and on a full file system this one is
// written in the space it freed.
//
//	an earlier shutdown's Report, 8 KiB, in a 256 KiB tmpfs, -report's directory
//	the supervisor in front of a stub server, the tmpfs filled up
//	SIGTERM: the drain; the Report's write fails, ENOSPC
//	  now: this Report written where the earlier one was, exit 0
//	  before: the earlier Report still there, exit 1
//
// Real processes and a real full file system.
func TestReportOnAFullFileSystemReplacesTheEarlierShutdowns(t *testing.T) {
	dir := t.TempDir()
	reports := lastreporttest.Tmpfs(t, "256k")
	report, termLog := filepath.Join(reports, "report.json"), filepath.Join(dir, "termination-log")
	const earlier = "an earlier shutdown's"
	// Two pages: as large as this drain's Report or larger, as a Report of more sandboxes is.
	pad := strings.Repeat(" ", 8000)
	require.NoError(t, os.WriteFile(report, []byte(`{"exit_code": 0, "note": "`+earlier+`"`+pad+`}`), 0o644))
	var log bytes.Buffer
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisorLogging(t, &log,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "5s", "-report", report, "-termination-log", termLog},
		helperCommand("stubserver", "-listen", api, "-exit", "0"))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/healthz") == 200 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return get(ctx, "http://"+api+"/healthz") != 0 }, 10*time.Second, 20*time.Millisecond)
	lastreporttest.FillUp(t, filepath.Join(reports, "filler"))

	sup.signal(t, syscall.SIGTERM)
	code := sup.exitCode(t, 15*time.Second)
	rep := readReport(t, report)
	assert.NotEqual(t, earlier, rep.Note, "the earlier shutdown's Report, taken for this one's")
	assert.Equal(t, 0, code, "this Report written: a clean exit\n%s", &log)
	assert.Equal(t, code, rep.ExitCode)
	// The earlier Report's space taken by this drain's account at its start, or by the
	// Report when the drain ended before the account was written (row 1612).
	assert.Regexp(t, `(this drain's account|the Report) written in the space of an earlier shutdown's`, log.String())
	msg := readFile(t, termLog)
	assert.Contains(t, msg, "full report: "+report)
}
