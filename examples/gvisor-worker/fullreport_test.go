//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Faults (rows 1118, 1119): when the state directory's file system was full (or
// read-only) at the drain's end, the worker's Report could not be written, and the one an
// earlier shutdown left stayed: read after the drain (drainkit report, a person once the
// pod and its last state are gone: the state directory is a hostPath that outlives them),
// it was taken for this one's. It is removed now, said at ERROR, and on a full file
// system this Report is written in the space it freed (row 1119); when it does not fit
// there either, the termination message, the log and the exit status say it was not
// written, and the exit's last line says so at ERROR, counting the sandboxes (row 1139).
//
//	an earlier shutdown's Report in a 256 KiB tmpfs, the state directory: one page
//	the worker serving (no sandboxes, or 24 whose checkpoints will fail), the tmpfs filled up
//	SIGTERM: the drain; the Report's write fails, ENOSPC
//	  no sandboxes: this Report (a page) written where the earlier one was: exit 0
//	  24 lost: this Report, larger than the page freed, does not fit: this drain's account
//	    as it stood there, unfinished (row 1611), no earlier Report, exit 1
//	  before: the earlier Report still there, exit 1
//
// Real process and a real full file system: this test binary, re-executed as the worker.
func TestWorkersReportThatCannotBeWrittenLeavesNoEarlierOneInItsPlace(t *testing.T) {
	for _, n := range []int{0, 24} {
		t.Run(fmt.Sprintf("%d sandboxes", n), func(t *testing.T) { workerReportOnAFullFileSystem(t, n) })
	}
}

// workerReportOnAFullFileSystem drains n sandboxes with the state directory's file system full.
func workerReportOnAFullFileSystem(t *testing.T, n int) {
	state := lastreporttest.Tmpfs(t, "256k")
	report := filepath.Join(state, reportFile)
	const earlier = "2026-12-05T10:00:00Z"
	require.NoError(t, os.WriteFile(report, []byte(`{"start": "`+earlier+`", "preserve": {"counts": {"preserved": 4}}}`), 0o600))
	sock := filepath.Join(state, "w.sock")
	msg := filepath.Join(t.TempDir(), "termination-log")
	p, stderr := startWorkerMain(t, "-state-dir", state, "-socket", sock, "-termination-log", msg)
	waitSocket(t, sock, stderr)
	c := dial(t, sock)
	for range n {
		_, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err)
	}
	lastreporttest.FillUp(t, filepath.Join(state, "filler"))

	data := lastreporttest.DrainOnAFullFileSystem(t, p, stderr, report, msg, earlier, n)
	if n == 0 {
		assert.Contains(t, stderr.String(), `level=INFO msg="gvisor-worker exiting" preserved=0 lost=0 `)
		return
	}
	assert.Contains(t, stderr.String(), "the Report could not be written: the file holds this drain's account as last written, unfinished")
	assert.True(t, strings.Contains(data, fmt.Sprintf("%d of %d", n, n)), "every sandbox lost: %s", data)
	// The exit's reasons at ERROR, the sandboxes counted, where the Report's error was a
	// bare line with no level (row 1139).
	assert.Regexp(t, fmt.Sprintf(`level=ERROR msg="gvisor-worker exiting" preserved=0 lost=%d headroom=\S+ err=".*no space left on device`, n), stderr.String())
}
