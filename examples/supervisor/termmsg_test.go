//go:build linux

package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// Fault: the supervisor wrote its additions to the verdict (the sandboxes lost with a server
// that exited on its own, what the final sweep could not list) into termmsg's message after
// it was laid out to fit the kubelet's 4096 bytes: a drain that lost 3127 of 4000 made 4221
// bytes, which Write cut back to 4096, so the lost line lost its "... and 2997 more" and ended
// inside an entry, "...", whatever the pod's containers; with row 1960's layout, 4211 bytes
// whose line said "this message is 4076 bytes". The additions are now made before the
// layout: 4076 bytes, as its line says, not cut, its lost line ending with a whole entry.
func TestTerminationMessageWithTheSupervisorsVerdictFitsTheKubeletsRead(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 9, 7, 0, time.UTC)
	pr := &pause.Report{Counts: map[pause.Outcome]int{}}
	for i := range 4000 {
		e := pause.Entry{ID: fmt.Sprintf("sb-%012x", i*7919), Outcome: pause.Preserved}
		if i < 3127 {
			e.Outcome = pause.NotStarted
		}
		pr.Entries = append(pr.Entries, e)
		pr.Counts[e.Outcome]++
	}
	rep := &Report{
		Drain: &drain.Report{Budget: deadline.State{Anchor: deadline.AnchorPreStop, Start: t0, Kill: t0.Add(time.Hour), Grace: time.Hour},
			Phases: []drain.PhaseReport{{Name: "preserve", Result: drain.Failed}}, Preserve: pr, Headroom: time.Second},
		LostWithServer: []string{"gone-1", "gone-2"}, ExitCode: 1,
	}
	msg := summary(rep, false, "final sweep INCOMPLETE: sandboxes resumed since not known",
		[]string{"server exited 1; supervisor exit code 1", termmsg.ReportLine("/state/report.json", nil)})
	written := filepath.Join(t.TempDir(), "termination-log")
	_, err := termmsg.Write(written, true, msg)
	require.NoError(t, err)
	file, err := os.ReadFile(written)
	require.NoError(t, err)

	assert.Equal(t, msg, string(file), "Write had nothing to cut")
	lines := strings.Split(strings.TrimSuffix(msg, "\n"), "\n")
	assert.Equal(t, "drainkit: 2 sandboxes LOST with the server, which exited on its own during the drain; 3127 of 4000 sandboxes LOST; "+
		"final sweep INCOMPLETE: sandboxes resumed since not known; exited 1.000s before SIGKILL", lines[0])
	assert.Equal(t, "sandboxes: 4000: preserved 873, not_started 3127", lines[1])
	assert.Equal(t, fmt.Sprintf("this message is %d bytes: a pod's status keeps 12288 / its containers (init and debug ones too) of them, so it may end early", len(msg)), lines[2])
	lost := lines[len(lines)-1]
	assert.True(t, strings.HasPrefix(lost, "lost: 3127 (failures first; "), lost)
	assert.True(t, strings.HasSuffix(lost, "(not_started)"), "the last entry whole: %s", lost[len(lost)-40:])
}

// Fault: the supervisor's daemon step after a server that exited on its own
// ran outside any drain, and its account, Report.Ublk, was only in -report's
// JSON: the termination message said "no drain ran", the server's status and
// the note, and the supervisor's report line nothing of the devices, so an
// operator reading the pod's last state after a crash learnt nothing of a
// device left live on a kernel not known fixed. Both now say the teardown's
// verdict, its devices and its Note, the termination message as a drain's
// ublk step is said.
func TestAServerThatExitedOnItsOwnHasItsUblkTeardownSaid(t *testing.T) {
	const note = "the daemon did not exit: left running, its device live (the kernel is not known fixed)"
	termLog := filepath.Join(t.TempDir(), "termination-log")
	var logs bytes.Buffer
	s := &supervisor{cfg: config{termLog: termLog}, log: slog.New(slog.NewTextHandler(&logs, nil))}
	s.exitedBefore.Store(true)
	rep := &Report{Server: ChildState{Exited: true, Code: 0}, ExitCode: 1,
		Note: "the server exited on its own before termination; daemon step timed_out: ublk: 1 device(s) still live",
		Ublk: &ublk.Report{Verdict: ublk.VerdictLeftLive, Note: note, Devices: []ublk.DeviceReport{{ID: 0, Verdict: ublk.VerdictLeftLive}}}}
	s.finish(rep)

	lines := strings.Split(readFile(t, termLog), "\n")
	assert.Equal(t, "drainkit: no drain ran", lines[0])
	assert.Contains(t, lines, "ublk teardown: left_live, 1 device: "+note)
	assert.Contains(t, logs.String(), `msg="supervisor: report"`)
	assert.Contains(t, logs.String(), "ublk_verdict=left_live ublk_devices=1 ublk_note=")
}
