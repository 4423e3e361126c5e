//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: a -report whose lock could not be taken for a reason other than
// another supervisor (its lock file FILE.lock a directory, a disk full as
// the holder is written) failed the start with statedir's wording, "-report
// R: state directory D: open R.lock: is a directory": the user gave no
// state directory, and the message named one. The error now names the flag,
// the file and its lock file. A real supervisor, R.lock a directory:
//
//	before: "-report R: state directory D: open R.lock: is a directory"
//	now:    "-report R: its lock file R.lock: open R.lock: is a directory"
func TestAReportLockErrorNamesTheFlagAndTheFile(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	require.NoError(t, os.Mkdir(report+".lock", 0o755))
	termLog := filepath.Join(dir, "termination-log")
	api := freeAddr(t)
	sup := startSupervisor(t, []string{"-listen", freeAddr(t), "-server-url", "http://" + api, "-grace", "20s", "-report", report, "-termination-log", termLog},
		helperCommand("stubserver", "-listen", api))
	assert.Equal(t, 2, sup.exitCode(t, 10*time.Second), "bad usage, as a -report naming a directory is")
	msg := readFile(t, termLog)
	assert.Contains(t, msg, "drainkit: no drain ran")
	assert.Contains(t, msg, "-report "+report+": its lock file "+report+".lock: ")
	assert.NotContains(t, msg, "state directory", "the user gave -report, not a state directory")
}
