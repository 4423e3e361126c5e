//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
)

// Fault (a review of row 3221): the worker held its state directory until the checkpoints
// the drain abandoned ended, with no bound: a runsc checkpoint that never ends (a stuck
// gofer, a hung images volume) kept it for ever outside a pod (systemd, `go run`), and in
// a pod until the kubelet's SIGKILL: exit status 137, the termination message the drain's
// alone, the last log line the WARN that it waits. It now waits until just before the
// budget's SIGKILL (abandonedExitLead), then ends by itself, its error (exit status 1) and
// its termination message naming the checkpoints still running.
//
//	0          the drain begins; the one checkpoint is held, never to end
//	+6.5 s     the hard deadline: the checkpoint abandoned; the Report written
//	           the worker holds the directory for the checkpoint
//	+8 s       SIGKILL due (no one sends it here)
//	           before: still waiting 10 s later; after: ended just before it, naming the checkpoint
func TestWorkerHeldByACheckpointThatNeverEndsEndsBeforeSIGKILLNamingIt(t *testing.T) {
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace
	cfg.Concurrency = 1
	cfg.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	w, _, id, ended := drainHeldCheckpoint(t, cfg)
	kill := w.drainer.Budget().Kill()

	var report *drain.Report
	select {
	case report = <-ended:
	case <-time.After(time.Until(kill.Add(10 * time.Second))):
		t.Fatalf("the worker still holds its state directory 10 s past SIGKILL, for checkpoint %s", id)
	}
	returned := time.Now()
	t.Logf("ended %v before SIGKILL", kill.Sub(returned).Round(time.Millisecond))
	assert.True(t, returned.Before(kill), "the worker waited to SIGKILL, which ends it with 137")
	assert.Contains(t, w.stops.inFlight(), id, "the checkpoint no longer ran: nothing was left")
	msg, err := os.ReadFile(cfg.TerminationLog)
	require.NoError(t, err)
	t.Logf("termination message:\n%s", msg)
	assert.Contains(t, string(msg), "checkpoints the drain abandoned still running", "the termination message does not say the worker left a checkpoint running")
	assert.Contains(t, string(msg), id, "the termination message does not name the checkpoint")
	assertFirstLineSaysTheWorkerExitsAfterTheDrain(t, string(msg), report)
}

// assertFirstLineSaysTheWorkerExitsAfterTheDrain checks the verdict of a worker that
// waited past its drain's end (docs/faults.md row 3360): it says when the drain ended,
// as the Report has it, and that the worker exits within abandonedExitLead of SIGKILL,
// where it said "exited" at the drain's end, more than a second before the real exit.
func assertFirstLineSaysTheWorkerExitsAfterTheDrain(t *testing.T, msg string, rep *drain.Report) {
	t.Helper()
	first, _, _ := strings.Cut(msg, "\n")
	drained := fmt.Sprintf("drain ended %.3fs before SIGKILL", rep.Headroom.Seconds())
	assert.Contains(t, first, drained, "the first line does not say when the drain ended")
	m := regexp.MustCompile(`worker exiting (\d+\.\d{3})s before SIGKILL`).FindStringSubmatch(first)
	require.NotNil(t, m, "the first line does not say when the worker exits: %q", first)
	exiting, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.LessOrEqual(t, exiting, abandonedExitLead.Seconds(), "the worker exits %.3fs before SIGKILL: it waited for the checkpoints to %v before it", exiting, abandonedExitLead)
}
