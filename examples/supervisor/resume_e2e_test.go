//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// The resume race behind the supervisor, with real processes: the AgentENV
// double's users resume 8 of its 16 sandboxes right after the preserve
// phase's last listing; AgentENV admits a resume until its own shutdown,
// which the supervisor starts only with the server step's SIGTERM.
//
//	0 s     SIGTERM: 16 pauses of 1.5 s through the API, 16 at a time
//	1.5 s   the Run's last listing finds none running; 8 users resume theirs
//	1.5 s   server step: the final sweep lists the 8 and pauses them at once
//	3 s     SIGTERM to the server: its own shutdown finds nothing to pause
//
// Before the sweep, the server's own shutdown paused the 8 one at a time
// (12 s), the step's deadline SIGKILLed it at 8.5 s with four still
// running, and the Report said 16 preserved, none lost (docs/faults.md
// entry 96).
func TestSandboxesResumedAfterThePreservePhaseArePausedBeforeTheServersSIGTERM(t *testing.T) {
	rep, recs, code, log := drainResumed(t, "10s", "1500ms")
	assert.Zero(t, code, "the supervisor exited 0, with the server's status")
	assert.Equal(t, "exited 0", rep.Server.String())
	require.NotNil(t, rep.Drain)
	require.NotNil(t, rep.Drain.Preserve)
	assert.Zero(t, rep.Drain.Lost())
	assert.Equal(t, 16, rep.Drain.Preserve.Counts[pause.Preserved])
	assert.Equal(t, 8, relisted(rep.Drain.Preserve), "the 8 resumed: paused again, and their entries say so")
	assert.Len(t, recs, 16, "every sandbox has its durable paused record")
	assert.Contains(t, log, "final sweep: sandboxes running again")
}

// The same, with pauses too long for the sweep's share of the server
// step: the 8 resumed sandboxes are still pausing when the step's deadline
// SIGKILLs the server, so they are lost (only paused records persist), and
// the supervisor says so: in the Report (their entries timed out, or not
// started, and relisted), the log and the exit status. Before, the Report
// said 16 preserved, none lost. And drain's own "shutdown finished" line
// counts them as the Report does: it said preserved=16 lost=0, written
// before the supervisor merged the sweep into the Report (docs/faults.md entry
// 100; the DrainFinished Event, which the supervisor does not post, is
// drain's TestStepsSweepIsInTheLogLineTheEventAndTheReport).
//
//	0 s     SIGTERM (grace 6 s: the budget's deadline at 4.5 s): 16 pauses of 2.5 s
//	2.5 s   the last listing; 8 users resume theirs; the sweep pauses them
//	4 s     the sweep gives up on them (three quarters of the step); SIGTERM
//	4.5 s   SIGKILL: the 8 pauses unfinished, lost
func TestSandboxesTheSweepCannotPauseAreLostInTheReportAndTheExitStatus(t *testing.T) {
	rep, recs, code, log := drainResumed(t, "6s", "2500ms")
	assert.NotZero(t, code)
	assert.Equal(t, code, rep.ExitCode)
	require.NotNil(t, rep.Drain)
	require.NotNil(t, rep.Drain.Preserve)
	assert.Equal(t, 8, rep.Drain.Lost())
	assert.Equal(t, 8, rep.Drain.Preserve.Counts[pause.Preserved])
	assert.Equal(t, 8, relisted(rep.Drain.Preserve))
	for _, e := range rep.Drain.Preserve.Entries {
		if e.Relisted > 0 { // timed out, or not started if the sweep's listing came late
			assert.True(t, e.Outcome.Lost(), "%s: %s", e.ID, e.Outcome)
		}
	}
	assert.Len(t, recs, 8, "only the 8 not resumed have a paused record")
	assert.Contains(t, rep.Note, "8 sandbox(es) not preserved")
	assert.Regexp(t, `level=ERROR msg="supervisor: final sweep: sandboxes running again.*found=8 paused=0 lost=8`, log)
	assert.Contains(t, log, `level=ERROR msg="supervisor: 8 sandbox(es) not preserved: `)
	assert.Regexp(t, `level=ERROR msg="drain: shutdown finished" .* report.preserved=8 report.lost=8 report.sandboxes=16 `, log)
	assert.Regexp(t, fmt.Sprintf(`msg="supervisor: report" exit_code=%d .* lost=8 `, code), log)
	require.NotNil(t, rep.Drain.Phase(StepServer))
	assert.Contains(t, rep.Drain.Phase(StepServer).Error, "final sweep: 8 of 8 sandboxes running again after the preserve phase not paused")
}

// drainResumed runs the supervisor in front of the AgentENV double with 16
// running sandboxes whose pauses take pause, 8 of them resumed by their
// users after the preserve phase's last listing, terminates it with
// SIGTERM under a grace period of grace, and returns the Report, the
// paused records left, the exit status and the supervisor's log.
func drainResumed(t *testing.T, grace, pauseTime string) (*Report, []fakeagentenv.Sandbox, int, string) {
	dir := t.TempDir()
	state, report, logFile := filepath.Join(dir, "state"), filepath.Join(dir, "report.json"), filepath.Join(dir, "supervisor.log")
	api, listen := freeAddr(t), freeAddr(t)
	logs, err := os.Create(logFile)
	require.NoError(t, err)
	defer logs.Close()
	argv := append(helperCommand("supervisor", "-api", "agentenv", "-listen", listen, "-hook-listen", freeAddr(t),
		"-server-url", "http://"+api, "-grace", grace, "-concurrency", "16", "-report", report, "--"),
		helperCommand("agentenv", "-listen", api, "-state", state, "-sandboxes", "16",
			"-pause-base", pauseTime, "-pause-per-gib", "0", "-resume-when-none-running", "8")...)
	cmd := helperCmd(argv)
	cmd.Stderr = io.MultiWriter(os.Stderr, logs)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	sup := &supProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(sup.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-sup.done
	})
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 20*time.Second, 20*time.Millisecond,
		"supervisor ready: the server answers its list")
	sup.signal(t, syscall.SIGTERM)
	code := sup.exitCode(t, 30*time.Second)
	rep := readReport(t, report)
	recs, err := fakeagentenv.LoadRecords(state)
	require.NoError(t, err)
	return rep, recs, code, readFile(t, logFile)
}

// relisted counts the entries a later listing found running again.
func relisted(rep *pause.Report) int {
	n := 0
	for _, e := range rep.Entries {
		if e.Relisted > 0 {
			n++
		}
	}
	return n
}
