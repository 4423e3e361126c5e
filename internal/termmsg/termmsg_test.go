package termmsg_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// report is a drain of n sandboxes of which lost were never started.
func report(n, lost int) *drain.Report {
	t0 := time.Date(2026, 12, 1, 9, 9, 7, 0, time.UTC)
	pr := &pause.Report{Counts: map[pause.Outcome]int{}}
	for i := range n {
		e := pause.Entry{ID: fmt.Sprintf("sb-%012x", i*7919), Outcome: pause.Preserved}
		if i < lost {
			e.Outcome = pause.NotStarted
		}
		if i == 0 && lost > 0 {
			e.Outcome = pause.Failed
		}
		pr.Entries = append(pr.Entries, e)
		pr.Counts[e.Outcome]++
	}
	preserve := drain.Failed // as drain reports it: lost sandboxes fail the phase
	if lost == 0 {
		preserve = drain.OK
	}
	return &drain.Report{
		Budget: deadline.State{Anchor: deadline.AnchorPreStop, Start: t0, SIGTERM: t0.Add(3555 * time.Second),
			Kill: t0.Add(3600 * time.Second), Grace: time.Hour},
		Phases: []drain.PhaseReport{{Name: "drain", Result: drain.TimedOut, Duration: 3555 * time.Second},
			{Name: "preserve", Result: preserve, Duration: 10 * time.Second}},
		Preserve: pr, Headroom: 30 * time.Second,
	}
}

func TestSummaryLeadsWithTheVerdictAndNamesTheLost(t *testing.T) {
	msg := termmsg.Summary(report(200, 3), "full report: /state/last-shutdown.json")
	lines := strings.Split(strings.TrimSuffix(msg, "\n"), "\n")
	require.Len(t, lines, 6)
	assert.Equal(t, "drainkit: 3 of 200 sandboxes LOST; exited 30.000s before SIGKILL", lines[0])
	assert.Equal(t, "sandboxes: 200: preserved 197, failed 1, not_started 2", lines[1])
	assert.Equal(t, "full report: /state/last-shutdown.json", lines[2])
	assert.Equal(t, "T0 2026-12-01T09:09:07Z (preStop), grace 1h0m0s, SIGTERM +3555.000s, SIGKILL due +3600.000s", lines[3])
	assert.Equal(t, "phases: drain timed_out 3555.000s; preserve failed 10.000s", lines[4])
	assert.Equal(t, "lost: 3 (failures first): sb-000000000000(failed) sb-000000001eef(not_started) sb-000000003dde(not_started)", lines[5],
		"failures first")
	assert.Equal(t, "drainkit: all 200 sandboxes preserved; exited 30.000s before SIGKILL\n",
		strings.SplitAfter(termmsg.Summary(report(200, 0)), "\n")[0])
	assert.Equal(t, "drainkit: no drain ran\nthe server exited on its own\n", termmsg.Summary(nil, "the server exited on its own"))
}

// A sandbox the server listed without an ID (a Failed entry with the ID
// "", row 220) is named "(no ID)", where the line read "(failed)" alone.
func TestSummaryNamesASandboxListedWithoutAnID(t *testing.T) {
	rep := report(200, 3)
	for i := range rep.Preserve.Entries {
		if rep.Preserve.Entries[i].Outcome == pause.Failed {
			rep.Preserve.Entries[i].ID = ""
		}
	}
	assert.Contains(t, termmsg.Summary(rep), "lost: 3 (failures first): (no ID)(failed) sb-")
}

// The kubelet reads 4 KiB: a node that lost thousands says how many it
// could not name.
// Fault: a drain whose preserve phase left no pause Report (the Preserver
// abandoned at its hard deadline) after the drain counted 200 sandboxes:
// the pod's last state said nothing of them ("drainkit: exited 30.000s
// before SIGKILL"). It leads with how many are unaccounted for.
func TestSummaryOfAnAbandonedPreserverSaysTheSandboxesAreUnknown(t *testing.T) {
	rep := report(200, 0)
	rep.Preserve, rep.Unaccounted = nil, 200
	rep.Phases[1] = drain.PhaseReport{Name: "preserve", Result: drain.Abandoned, Duration: 10 * time.Second,
		Error: "the Preserver did not return by the hard deadline"}
	lines := strings.Split(termmsg.Summary(rep), "\n")
	assert.Equal(t, "drainkit: 200 sandboxes UNKNOWN (the preserve phase was abandoned); exited 30.000s before SIGKILL", lines[0])
	assert.Equal(t, "sandboxes: 200 counted, none accounted for: the preserve phase abandoned: the Preserver did not return by the hard deadline",
		lines[1])

	rep.Unaccounted = 0 // no count, or a Report from before the field
	lines = strings.Split(termmsg.Summary(rep), "\n")
	assert.Equal(t, "drainkit: sandboxes UNKNOWN (the preserve phase was abandoned); exited 30.000s before SIGKILL", lines[0])
	assert.Equal(t, "sandboxes: unknown: the preserve phase abandoned: the Preserver did not return by the hard deadline", lines[1])
}

func TestSummaryFitsTheKubeletsLimit(t *testing.T) {
	msg := termmsg.Summary(report(10000, 5000))
	assert.LessOrEqual(t, len(msg), termmsg.MaxBytes)
	assert.Greater(t, len(msg), termmsg.MaxBytes-64, "the room is used")
	assert.Regexp(t, `\nlost: 5000 \(failures first; \d+ named, each as ID\(outcome\)\): sb-000000000000\(failed\) [^\n]*\(not_started\)\n$`, msg)
	assert.True(t, strings.HasPrefix(msg, "drainkit: 5000 of 10000 sandboxes LOST"))

	long := termmsg.Summary(report(10, 0), strings.Repeat("é", 3000)) // 6000 bytes of two-byte runes
	assert.LessOrEqual(t, len(long), termmsg.MaxBytes)
	assert.True(t, utf8.ValidString(long), "cut on a character boundary")
	assert.True(t, strings.HasSuffix(long, "...\n"))
}

func TestPathComesFromTheFlagThenTheEnvironment(t *testing.T) {
	t.Setenv(termmsg.EnvPath, "")
	p, explicit := termmsg.Path("")
	assert.Equal(t, termmsg.DefaultPath, p)
	assert.False(t, explicit)
	t.Setenv(termmsg.EnvPath, "/tmp/from-env")
	p, explicit = termmsg.Path("")
	assert.Equal(t, "/tmp/from-env", p)
	assert.True(t, explicit)
	p, _ = termmsg.Path("/tmp/from-flag")
	assert.Equal(t, "/tmp/from-flag", p)
}

func TestWriteReplacesTheMountedFileAndCreatesNoDefault(t *testing.T) {
	dir := t.TempDir()
	mounted := filepath.Join(dir, "termination-log")
	require.NoError(t, os.WriteFile(mounted, []byte(strings.Repeat("old ", 2000)), 0o644))
	wrote, err := termmsg.Write(mounted, false, "drainkit: all 3 sandboxes preserved\n")
	require.NoError(t, err)
	assert.True(t, wrote)
	got, err := os.ReadFile(mounted)
	require.NoError(t, err)
	assert.Equal(t, "drainkit: all 3 sandboxes preserved\n", string(got), "truncated, not appended")

	absent := filepath.Join(dir, "not-mounted")
	wrote, err = termmsg.Write(absent, false, "x")
	require.NoError(t, err)
	assert.False(t, wrote, "outside a container the default path is left alone")
	assert.NoFileExists(t, absent)

	wrote, err = termmsg.Write(absent, true, strings.Repeat("y", 5000))
	require.NoError(t, err)
	assert.True(t, wrote, "a path given explicitly is created")
	got, err = os.ReadFile(absent)
	require.NoError(t, err)
	assert.Len(t, got, termmsg.MaxBytes)

	_, err = termmsg.Write(filepath.Join(dir, "no", "dir"), true, "x")
	assert.ErrorContains(t, err, "termination message")
}

// Fault: a drain that preserved every sandbox and whose ublk step failed
// (the exit status 1; the device daemon stopped uncleanly, the host's
// risk) left a pod's last state whose verdict read "all 20 sandboxes
// preserved; exited 3.000s before SIGKILL", and whose only trace of the
// failure was "ublk failed 0.100s" in the phases line, without its error.
// The verdict names every step that failed, and a line says why.
func TestSummaryVerdictNamesAFailedStepAndWhy(t *testing.T) {
	rep := report(20, 0)
	rep.Headroom = 3 * time.Second
	rep.Phases[1].Result = drain.OK
	rep.Phases = append(rep.Phases,
		drain.PhaseReport{Name: "ublk", Result: drain.Failed, Duration: 100 * time.Millisecond,
			Error: "ublk: 2 device(s) left live: the daemon did not exit\nsecond line"},
		drain.PhaseReport{Name: "http", Result: drain.TimedOut, Duration: 250 * time.Millisecond,
			Error: "context deadline exceeded"})
	require.Error(t, rep.Err(), "the exit status is 1")
	lines := strings.Split(strings.TrimSuffix(termmsg.Summary(rep), "\n"), "\n")
	assert.Equal(t, "drainkit: all 20 sandboxes preserved; step ublk FAILED; step http TIMED_OUT; exited 3.000s before SIGKILL", lines[0])
	assert.Contains(t, lines, "ublk failed: ublk: 2 device(s) left live: the daemon did not exit")
	assert.Contains(t, lines, "http timed_out: context deadline exceeded")

	// A drain or gate wait that timed out is the plan, not a fault.
	assert.Equal(t, "drainkit: all 20 sandboxes preserved; exited 30.000s before SIGKILL", strings.Split(termmsg.Summary(report(20, 0)), "\n")[0])
}

// Fault: row 411 named a failed step in the verdict but left the preserve
// phase out ("the sandboxes' account"), and the preserve phase can fail
// with every sandbox of its account preserved: a create admitted before
// the gate closed still in flight at the preserve deadline, whose sandbox
// no listing found (drain's TestCreateEndingPastThePreserveDeadline...,
// "another sandbox unaccounted"). The pod's last state then read "all 1
// sandboxes preserved; exited ... before SIGKILL", exit status 1, the
// create's sandbox lost, its only trace "preserve failed" in the phases
// line. The verdict now names the phase, and a line says why.
// docs/faults.md row 424.
func TestSummaryVerdictNamesAFailedPreservePhaseThatLostNoListedSandbox(t *testing.T) {
	rep := report(1, 0)
	rep.Phases[1].Result = drain.Failed
	rep.Phases[1].Error = "gated operations admitted before the gate closed still in flight when the preserve phase ended (its deadline, or force): create: 1: " +
		"a sandbox they start is not preserved (a call that streams for as long as its client keeps it open is a drain.Stream, not a create)"
	require.Error(t, rep.Err(), "the exit status is 1")
	lines := strings.Split(strings.TrimSuffix(termmsg.Summary(rep), "\n"), "\n")
	assert.Equal(t, "drainkit: all 1 listed sandboxes preserved; phase preserve FAILED; exited 30.000s before SIGKILL", lines[0])
	assert.Contains(t, lines, "preserve failed: gated operations admitted before the gate closed still in flight when the preserve phase ended (its deadline, or force): create: 1: "+
		"a sandbox they start is not preserved (a call that streams for as long as its client keeps it open is a drain.Stream, not a create)")

	// Sandboxes lost: the verdict says so, as before, and no more.
	assert.Equal(t, "drainkit: 3 of 20 sandboxes LOST; exited 30.000s before SIGKILL", strings.Split(termmsg.Summary(report(20, 3)), "\n")[0])
}

// An account whose listings all failed after their first page says so on
// its sandboxes line, where it read as a complete one.
func TestSummaryOfAnIncompleteListingSaysSo(t *testing.T) {
	rep := report(20, 0)
	rep.Preserve.Incomplete, rep.Preserve.ListErr = true, "page 2: 503 Service Unavailable"
	rep.Phases[1].Result, rep.Phases[1].Error = drain.Failed, rep.Preserve.Err().Error() // as drain reports it
	assert.Contains(t, strings.Split(termmsg.Summary(rep), "\n"),
		"sandboxes: 20: preserved 20, INCOMPLETE: no listing was complete: page 2: 503 Service Unavailable")
}

// Fault: when the lines before it left less room than "lost: ... and N more"
// takes (a long extra line: a serving error, a Report path's error), Summary
// added that line anyway and went past MaxBytes, against its doc, and the cut
// that Write then made ended the message inside the count: "lost: ... and 31..."
// for 3127 lost. A lost line that does not fit is left out; the verdict says
// how many were lost. (The lost line now says its count first, and comes after
// the other lines, the extra ones too, row 1960.)
func TestSummaryLeavesOutALostLineThatDoesNotFit(t *testing.T) {
	rep := report(4000, 3127)
	head := termmsg.Summary(rep)
	head = head[:strings.Index(head, "lost: ")]
	for _, room := range []int{0, 1, 5, 10, 20} {
		extra := strings.Repeat("x", termmsg.MaxBytes-len(head)-room-1) // its line and newline
		msg := termmsg.Summary(rep, extra)
		assert.LessOrEqual(t, len(msg), termmsg.MaxBytes, "room %d", room)
		written := filepath.Join(t.TempDir(), "termination-log")
		_, err := termmsg.Write(written, true, msg)
		require.NoError(t, err)
		got, err := os.ReadFile(written)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(string(got), "drainkit: 3127 of 4000 sandboxes LOST"))
		assert.Contains(t, string(got), "\n"+extra+"\n", "room %d: the extra line whole", room)
		assert.True(t, strings.HasSuffix(string(got), "\nphases: drain timed_out 3555.000s; preserve failed 10.000s\n"),
			"room %d: no lost line, the message not cut", room)
	}
	// Room for the count alone, to the byte: it is said.
	const count = "lost: 3127 (failures first; none named: no room)\n"
	msg := termmsg.Summary(rep, strings.Repeat("x", termmsg.MaxBytes-len(head)-len(count)-1))
	assert.Len(t, msg, termmsg.MaxBytes)
	assert.True(t, strings.HasSuffix(msg, "\n"+count))
}

// A server that could not start says so, and why, on one line: a multi-line error (a
// joined one) is one line, and a long one is cut to the kubelet's limit.
func TestStartFailedSaysNoDrainRanAndWhyOnOneLine(t *testing.T) {
	msg := termmsg.StartFailed("sandboxd", fmt.Errorf("-hook-listen: %w", errors.Join(errors.New("a"), errors.New("b"))))
	assert.Equal(t, "drainkit: no drain ran\nsandboxd: could not start: -hook-listen: a; b\n", msg)
	long := termmsg.StartFailed("gvisor-worker", errors.New(strings.Repeat("x", 5000)))
	assert.Len(t, long, termmsg.MaxBytes)
	assert.True(t, strings.HasPrefix(long, "drainkit: no drain ran\nthis message is 4096 bytes: a pod's status keeps 12288 / its containers "+
		"(init and debug ones too) of them, so it may end early\ngvisor-worker: could not start: xxx"), "a message longer than 1024 bytes says the pod's status may cut it")
}

// Fault: a drain whose Preserver listed no sandbox (a node with none running, the
// common case of a drain) left the line "sandboxes: 0: ", nothing after its colon, and
// the verdict "all 0 sandboxes preserved". Both now say none was listed; an incomplete
// listing still says so.
func TestSummaryOfADrainWithNoSandboxesSaysNoneWasListed(t *testing.T) {
	lines := strings.Split(termmsg.Summary(report(0, 0)), "\n")
	assert.Equal(t, "drainkit: no sandboxes listed; exited 30.000s before SIGKILL", lines[0])
	assert.Equal(t, "sandboxes: 0: none listed", lines[1])

	rep := report(0, 0)
	rep.Preserve.Incomplete, rep.Preserve.ListErr = true, "page 2: 503 Service Unavailable"
	rep.Phases[1].Result, rep.Phases[1].Error = drain.Failed, rep.Preserve.Err().Error() // as drain reports it
	lines = strings.Split(termmsg.Summary(rep), "\n")
	assert.Equal(t, "drainkit: no sandboxes listed; phase preserve FAILED; exited 30.000s before SIGKILL", lines[0])
	assert.Contains(t, lines, "sandboxes: 0: INCOMPLETE: no listing was complete: page 2: 503 Service Unavailable")
}

// Fault: the work the gate refused during a drain (row 1015: creates turned away with a
// 503, streams refused, gRPC calls answered Unavailable) was in the Report's gate phase
// Detail and the drain's log line, not in the termination message, the one account that
// outlives the pod's log: its last state said nothing of users refused work. A line now
// counts them, by way in and class, with the phases of the first and the last. A real
// drain (draintest's node, a step that asks the closed gate for two creates); the same
// line from the Report read back from its JSON.
func TestSummaryCountsTheWorkTheGateRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := draintest.NewNode()
		node.AddN("sb", 2, time.Second)
		budget, err := deadline.New(time.Minute, deadline.Config{})
		require.NoError(t, err)
		g := &drain.Gate{}
		refuse := drain.NewStep(deadline.Phase{Name: "late", Reserve: deadline.Fixed(time.Second)}, func(context.Context) (any, error) {
			for range 2 {
				if _, err := g.Enter(drain.Create); err == nil {
					return nil, errors.New("a create admitted in a step")
				}
			}
			return nil, nil
		})
		d, err := drain.New(drain.Config{Budget: budget, Sandboxes: node, Gate: g, Steps: []drain.Step{refuse}})
		require.NoError(t, err)
		done := make(chan *drain.Report)
		go func() { done <- d.Shutdown(context.Background()) }()
		synctest.Wait() // the preserve phase runs: the gate is closed
		_, err = g.Enter(drain.Fork)
		require.ErrorIs(t, err, drain.ErrDraining)
		rep := <-done
		require.NoError(t, rep.Err())

		const want = "gate refused 3 (first during preserve, last during late): enter create 2, enter fork 1"
		assert.Contains(t, strings.Split(termmsg.Summary(rep), "\n"), want)
		var line logbuf.Buffer // the drain's last log line says the kinds in the same words: one source
		slog.New(slog.NewTextHandler(&line, nil)).Info("drain: shutdown finished", "report", rep)
		assert.Contains(t, line.String(), `report.refused_by="enter create 2, enter fork 1"`)
		b, err := json.Marshal(rep)
		require.NoError(t, err)
		var back drain.Report
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Contains(t, strings.Split(termmsg.Summary(&back), "\n"), want, "the Report read back from its file")
		assert.NotContains(t, strings.Split(termmsg.Summary(&back), "\n")[0], "refused", "the plan, not a fault: the verdict leaves it out")
	})
}

// A drain that refused nothing has no such line; one that refused many kinds names whole
// kinds only, as many as fit, then how many more, never a count cut short.
func TestSummaryOfRefusalsIsOneBoundedLine(t *testing.T) {
	rep := report(3, 0)
	rep.Phases = append(rep.Phases, drain.PhaseReport{Name: "gate", Result: drain.OK, Detail: map[string]any{"refused": 0}})
	assert.NotContains(t, termmsg.Summary(rep), "gate refused")

	by := map[string]int{}
	for i := range 33 {
		by[fmt.Sprintf("create-%02d", i)] = 1000 + i
	}
	rep.Phases[2].Detail = map[string]any{"refused": 34000, "by": map[string]any{"http": by}, "first_phase": "drain", "last_phase": "preserve"}
	var line string
	for _, l := range strings.Split(termmsg.Summary(rep), "\n") {
		if strings.HasPrefix(l, "gate refused ") {
			line = l
		}
	}
	assert.LessOrEqual(t, len(line), 300)
	assert.True(t, strings.HasPrefix(line, "gate refused 34000 (first during drain, last during preserve): http create-00 1000, http create-01 1001, "), line)
	assert.True(t, strings.HasSuffix(line, ", http create-09 1009, ... and 23 more"), "10 whole kinds, then the 23 left: %s", line)
}

// Fault: a refusal by a gate the server's own code closed before the drain began came in
// no phase, and the line dropped both phases, the last's too: "gate refused 2: ...". It
// now names it "before the drain", from the Report and from its JSON.
func TestSummaryNamesARefusalBeforeTheDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := draintest.NewNode()
		node.AddN("sb", 1, 2*time.Second)
		budget, err := deadline.New(time.Minute, deadline.Config{})
		require.NoError(t, err)
		g := &drain.Gate{}
		d, err := drain.New(drain.Config{Budget: budget, Sandboxes: node, Gate: g})
		require.NoError(t, err)
		g.Close() // the server stops taking work at its own signal
		_, err = g.Enter(drain.Create)
		require.ErrorIs(t, err, drain.ErrDraining)
		time.Sleep(time.Second) // then SIGTERM
		done := make(chan *drain.Report)
		go func() { done <- d.Shutdown(context.Background()) }()
		time.Sleep(time.Second) // in the preserve phase: the pause takes 2 s
		_, err = g.Enter(drain.Fork)
		require.ErrorIs(t, err, drain.ErrDraining)
		rep := <-done
		require.NoError(t, rep.Err())

		const want = "gate refused 2 (first before the drain, last during preserve): enter create 1, enter fork 1"
		assert.Contains(t, strings.Split(termmsg.Summary(rep), "\n"), want)
		b, err := json.Marshal(rep)
		require.NoError(t, err)
		var back drain.Report
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Contains(t, strings.Split(termmsg.Summary(&back), "\n"), want, "the Report read back from its file")
	})
}

// Check leaves the file it checks as it found it: an existing message is not truncated
// (a server restarted in place keeps the last one until it writes its own), and a file
// it created to check is removed.
func TestCheckLeavesThePathAsItFoundIt(t *testing.T) {
	t.Setenv(termmsg.EnvPath, "")
	dir := t.TempDir()
	kept := filepath.Join(dir, "kept")
	require.NoError(t, os.WriteFile(kept, []byte("the last message\n"), 0o644))
	require.NoError(t, termmsg.Check(kept))
	b, err := os.ReadFile(kept)
	require.NoError(t, err)
	assert.Equal(t, "the last message\n", string(b))

	created := filepath.Join(dir, "created")
	require.NoError(t, termmsg.Check(created))
	assert.NoFileExists(t, created)

	assert.NoError(t, termmsg.Check(""), "the default path is written only where it is mounted: not checked")
	var errno syscall.Errno
	err = termmsg.Check(filepath.Join(dir, "missing", "log"))
	assert.ErrorAs(t, err, &errno, "what the machine refused carries the kernel's error")
	err = termmsg.Check(dir + "/")
	assert.ErrorContains(t, err, "-termination-log "+dir+"/ is a directory")
	assert.False(t, errors.As(err, &errno), "a directory is bad usage, whatever the machine")
}

// Check does not open a FIFO, which would wait for a reader that comes at exit alone.
func TestCheckDoesNotWaitForAFIFOsReader(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "termination-log")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	assert.NoError(t, termmsg.Check(fifo))
}

// Fault (row 1801): a POD_NAME or POD_UID that is not the pod's
// (drain.Report.PodMismatch) fails Report.Err, so sandboxd and the gVisor
// worker exit 1, and the supervisor too (row 733); the pod's last state read
// "all 20 sandboxes preserved; exited 30.000s before SIGKILL", with no word
// of it. The verdict names it and a line says the read's error, which says
// which name is wrong.
func TestSummaryVerdictNamesAMisnamedPod(t *testing.T) {
	rep := report(20, 0)
	rep.PodMismatch = `kube: pod sandboxd/sandboxd-0: another pod under the name (uid "uid-1", want "uid-typo")` + "\nsecond line"
	require.Error(t, rep.Err(), "the exit status is 1")
	lines := strings.Split(strings.TrimSuffix(termmsg.Summary(rep), "\n"), "\n")
	assert.Equal(t, "drainkit: all 20 sandboxes preserved; POD MISNAMED; exited 30.000s before SIGKILL", lines[0])
	assert.Contains(t, lines, `pod misnamed: POD_NAME or POD_UID is not this pod's, so no deletion of it could be read: kube: pod sandboxd/sandboxd-0: another pod under the name (uid "uid-1", want "uid-typo")`)
}

// What the kubelet v1.34.4 does with the file, as functions (k8s.io/kubernetes@v1.34.4):
//
//	file ── kubeletRead: ≤ 4096 bytes, the TAIL ──> container status Message
//	     ── podStatusCut: ≤ 12288/containers bytes, the HEAD ──> the pod's status in the API
//
// kubeletRead is pkg/kubelet/kuberuntime/kuberuntime_container.go getTerminationMessage's
// tail.ReadAtMost(path, MaxContainerTerminationMessageLength = 4096) (pkg/util/tail/tail.go):
// it seeks to 4096 bytes before the end, so a longer file loses its HEAD.
func kubeletRead(file []byte) string {
	const maxContainerTerminationMessageLength = 1024 * 4
	if len(file) > maxContainerTerminationMessageLength {
		return string(file[len(file)-maxContainerTerminationMessageLength:])
	}
	return string(file)
}

// podStatusCut is pkg/kubelet/status/status_manager.go normalizeStatus: each terminated
// container's Message is cut to MaxPodTerminationMessageLogLength (12288) divided by
// len(Containers) + len(InitContainers) + len(EphemeralContainers), keeping its head.
func podStatusCut(msg string, containers int) string {
	const maxPodTerminationMessageLogLength = 1024 * 12
	if per := maxPodTerminationMessageLogLength / containers; len(msg) > per {
		return msg[:per]
	}
	return msg
}

// bigLoss is a drain that lost 3127 of 4000 sandboxes and failed three steps, its gate
// refusing work, behind a server whose serving stopped: a message near the kubelet's 4 KiB.
func bigLoss() (*drain.Report, []string) {
	rep := report(4000, 3127)
	rep.Phases = append(rep.Phases,
		drain.PhaseReport{Name: "gate", Result: drain.OK, Detail: map[string]any{"refused": 34,
			"by": map[string]any{"http": map[string]int{"create": 30, "fork": 4}}, "first_phase": "drain", "last_phase": "preserve"}},
		drain.PhaseReport{Name: "ublk", Result: drain.Failed, Duration: 100 * time.Millisecond,
			Error: "ublk: 2 device(s) left live: /dev/ublkb3 held open by pid 4242 (qemu-system-x86), /dev/ublkb7 held open by pid 4250 (qemu-system-x86): " +
				"the daemon was not stopped: killing it with live devices can hang the host's kernel"},
		drain.PhaseReport{Name: "http", Result: drain.TimedOut, Duration: 250 * time.Millisecond,
			Error: "http: 3 connections still open at the step's deadline: context deadline exceeded"},
		drain.PhaseReport{Name: "grpc", Result: drain.Failed, Duration: 250 * time.Millisecond,
			Error: "grpc: GracefulStop did not return by its deadline: 2 streams open; Stop called"})
	stopped := errors.New("serving the API stopped: accept tcp [::]:8080: accept4: too many open files")
	return rep, termmsg.ServerLines("sandboxd", stopped, "/state/last-shutdown.json", nil)
}

// entryRE is a lost entry as the lost line writes it: an ID, then its outcome in
// parentheses, which a cut removes first.
var entryRE = regexp.MustCompile(`^\S*\((failed|timed_out|not_started)\)$`)

// Fault: with 4 or more containers in the pod (init containers and `kubectl debug`
// ephemeral ones count), the kubelet keeps 12288/containers bytes of the message (3072,
// 1536, 1024 for 4, 8, 12), its head, and the message was laid out for the 4096-byte read
// alone: the lost IDs' "... and 2997 more" at the end of the last line was gone from every
// such head, the line said nowhere how many it named, the line saying where the full Report
// is came after the step errors (cut at 1024), and nothing said the message may be cut. Now
// the counts come first (the verdict, then the sandboxes by outcome), then a line saying how
// long the message is and that the pod's status may cut it, then the server's lines, and
// the lost line says how many were lost and how many it names before its first ID, each ID
// ending with its outcome, so a cut ID reads as cut. Every head of at least 1024 bytes is
// checked, the kubelet's own among them.
func TestSummaryUnderThePodsCutSaysTheCountsFirstAndThatItMayBeCut(t *testing.T) {
	rep, extra := bigLoss()
	written := filepath.Join(t.TempDir(), "termination-log")
	_, err := termmsg.Write(written, true, termmsg.Summary(rep, extra...))
	require.NoError(t, err)
	file, err := os.ReadFile(written)
	require.NoError(t, err)
	msg := kubeletRead(file)
	require.Equal(t, string(file), msg, "the file fits the kubelet's read: its head is not lost")
	require.Greater(t, len(msg), 3072, "every pod of 4 or more containers cuts it")

	lines := strings.Split(strings.TrimSuffix(msg, "\n"), "\n")
	assert.Equal(t, "drainkit: 3127 of 4000 sandboxes LOST; step ublk FAILED; step http TIMED_OUT; step grpc FAILED; exited 30.000s before SIGKILL", lines[0])
	assert.Equal(t, "sandboxes: 4000: preserved 873, failed 1, not_started 3126", lines[1])
	note := fmt.Sprintf("this message is %d bytes: a pod's status keeps 12288 / its containers (init and debug ones too) of them, so it may end early", len(msg))
	assert.Equal(t, note, lines[2])
	assert.Equal(t, extra, lines[3:5], "the server's lines: why it exits 1, where the full Report is")
	lost := lines[len(lines)-1]
	var ids []string
	for _, f := range strings.Fields(lost) {
		if entryRE.MatchString(f) {
			ids = append(ids, f)
		}
	}
	require.NotEmpty(t, ids)
	assert.True(t, strings.HasPrefix(lost, fmt.Sprintf("lost: 3127 (failures first; %d named, each as ID(outcome)): sb-000000000000(failed) sb-", len(ids))), lost)

	whole := map[string]bool{}
	for _, id := range ids {
		whole[id] = true
	}
	for k := 1024; k <= len(msg); k++ {
		head := msg[:k]
		for _, want := range []string{lines[0], lines[1], note, extra[0], extra[1]} {
			require.Contains(t, head, want+"\n", "a head of %d bytes", k)
		}
		at := strings.Index(head, "\nlost: ")
		if at < 0 {
			continue
		}
		shown := head[at+1:]
		if len(shown) > len("lost: 3127 (") {
			require.True(t, strings.HasPrefix(shown, "lost: 3127 ("), "a head of %d bytes: the count before the IDs: %q", k, shown)
		}
		for _, f := range strings.Fields(shown) {
			require.False(t, entryRE.MatchString(f) && !whole[f], "a head of %d bytes: %q reads as a whole entry and is none", k, f)
		}
	}
	for _, containers := range []int{4, 8, 12} {
		head := podStatusCut(msg, containers)
		assert.Len(t, head, 12288/containers)
		assert.Contains(t, head, note, "%d containers: the message says it may be cut", containers)
	}
	assert.Equal(t, msg, podStatusCut(msg, 3), "3 containers keep 4096 bytes: the whole message")
}

// The ublk teardown's verdict and Note reach the pod's last state, where an
// operator reads why the device step ended as it did, from the Report the
// server made and from that Report read back from its file, under the
// step's name when it is not "ublk" (the supervisor's "daemon"); and they
// come before the lost IDs, inside the head a pod of 12 containers keeps.
// Before, the message said "ublk ok 0.145s" in the phases line alone: no
// verdict, and not that the ublk_drv module was not loaded.
func TestSummarySaysTheUblkVerdictAndNote(t *testing.T) {
	const note = "no ublk devices (no class/ublk-char in sysfs: the ublk_drv module is not loaded) and no daemon"
	made := &ublk.Report{Verdict: ublk.VerdictNothingToDo, Note: note, Devices: []ublk.DeviceReport{}}
	b, err := json.Marshal(made)
	require.NoError(t, err)
	var file any // a Report read back from its JSON holds a map in Detail
	require.NoError(t, json.Unmarshal(b, &file))
	for name, detail := range map[string]any{"made": made, "from its file": file} {
		t.Run(name, func(t *testing.T) {
			rep := report(20, 0)
			rep.Phases = append(rep.Phases, drain.PhaseReport{Name: "ublk", Result: drain.OK, Duration: time.Millisecond, Detail: detail},
				drain.PhaseReport{Name: "daemon", Result: drain.OK, Duration: time.Millisecond, Detail: detail})
			lines := strings.Split(termmsg.Summary(rep), "\n")
			assert.Contains(t, lines, "ublk teardown: nothing_to_do, no device: "+note)
			assert.Contains(t, lines, "ublk teardown (step daemon): nothing_to_do, no device: "+note)
		})
	}

	rep := report(4000, 3127)
	left := &ublk.Report{Verdict: ublk.VerdictLeftLive, Devices: make([]ublk.DeviceReport, 2),
		Note: "the daemon was left running: whether it still serves a disk the step does not have could not be read at its last look"}
	rep.Phases = append(rep.Phases, drain.PhaseReport{Name: "ublk", Result: drain.Failed, Duration: time.Second, Detail: left,
		Error: "ublk: 2 device(s) left live"})
	msg := termmsg.Summary(rep)
	require.LessOrEqual(t, len(msg), termmsg.MaxBytes)
	line := "ublk teardown: left_live, 2 devices: " + left.Note
	at := strings.Index(msg, line)
	require.GreaterOrEqual(t, at, 0, msg)
	assert.LessOrEqual(t, at+len(line), termmsg.KeptBytes, "in the head every pod keeps")
	assert.Less(t, at, strings.Index(msg, "\nlost: "), "the lost IDs last")
}

// A ublk teardown run outside any drain (a supervisor's, once its server
// exited on its own) has the line a drain's ublk step gets, for the
// message that says no drain ran, bounded as that one is, inside the head
// every pod keeps; nil has none.
func TestUblkLineSaysATeardownOutsideADrain(t *testing.T) {
	long := strings.Repeat("the daemon did not exit; ", 40)
	rep := &ublk.Report{Verdict: ublk.VerdictLeftLive, Note: long, Devices: make([]ublk.DeviceReport, 1)}
	line := termmsg.UblkLine(rep)
	assert.True(t, strings.HasPrefix(line, "ublk teardown: left_live, 1 device: the daemon did not exit; "), line)
	assert.LessOrEqual(t, len(line), 300+len("…"), "bounded as a step's line")
	assert.True(t, strings.HasSuffix(line, "…"), "the cut marked")
	assert.Empty(t, termmsg.UblkLine(nil))

	msg := termmsg.Summary(nil, "server exited 0; supervisor exit code 1", line, "note: "+long)
	at := strings.Index(msg, line)
	require.Positive(t, at, msg)
	assert.LessOrEqual(t, at+len(line), termmsg.KeptBytes, "in the head every pod keeps")
}
