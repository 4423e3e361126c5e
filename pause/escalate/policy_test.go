package escalate_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/proc"
	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/escalate"
)

// The test binary re-executes itself as a child process when this
// variable names a behaviour.
const helperEnv = "ESCALATE_TEST_HELPER"

// runHelperProcess runs the child behaviours and reports whether this
// process was one:
//
//	trap:   on SIGTERM, write "saved" to $ESCALATE_TEST_STATE and exit 0
//	ignore: ignore SIGTERM and sleep (only SIGKILL ends it)
//	exit:   exit 0 at once
//	leak:   start a grandchild that keeps stdout open, then as trap
//	ignoreleak: start a grandchild that keeps stdout open, then as ignore
func runHelperProcess() bool {
	mode := os.Getenv(helperEnv)
	switch mode {
	case "":
		return false
	case "exit":
		os.Exit(0)
	case "trap":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		fmt.Println("ready")
		<-term
		if err := os.WriteFile(os.Getenv("ESCALATE_TEST_STATE"), []byte("saved"), 0o600); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	case "leak":
		// A grandchild inherits stdout and outlives this process.
		g := exec.Command("sleep", "3600")
		g.Stdout = os.Stdout
		if err := g.Start(); err != nil {
			os.Exit(4)
		}
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		fmt.Printf("ready %d\n", g.Process.Pid)
		<-term
		os.Exit(0)
	case "ignore":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "ignoreleak":
		// As leak, but ignoring SIGTERM: only SIGKILL ends it, and not the
		// grandchild, which keeps stdout.
		signal.Ignore(syscall.SIGTERM)
		g := exec.Command("sleep", "3600")
		g.Stdout = os.Stdout
		if err := g.Start(); err != nil {
			os.Exit(4)
		}
		fmt.Printf("ready %d\n", g.Process.Pid)
		time.Sleep(time.Hour)
	}
	os.Exit(2)
	return true
}

// child starts the test binary as a helper in mode and, unless it exits at
// once, waits until it has installed its signal handling.
func child(t *testing.T, mode string) (*exec.Cmd, string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "ESCALATE_TEST_STATE="+state)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if mode != "exit" {
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
	}
	return cmd, state
}

func TestEscalationChildTrappingSIGTERMSavesStateAndExits(t *testing.T) {
	cmd, state := child(t, "trap")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	exit, err := escalate.Policy{TermWait: 20 * time.Second}.Stop(ctx, escalate.Cmd(cmd))
	require.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit)
	saved, err := os.ReadFile(state)
	require.NoError(t, err)
	assert.Equal(t, "saved", string(saved))
	assert.Equal(t, 0, cmd.ProcessState.ExitCode())
}

func TestEscalationKillsChildIgnoringSIGTERM(t *testing.T) {
	cmd, state := child(t, "ignore")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	exit, err := escalate.Policy{TermWait: 300 * time.Millisecond}.Stop(ctx, escalate.Cmd(cmd))
	require.NoError(t, err)
	assert.Equal(t, escalate.ExitedAfterKill, exit)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the wait after the signal is given in full")
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled())
	assert.Equal(t, syscall.SIGKILL, ws.Signal())
	assert.NoFileExists(t, state)
}

// Cmd's target, pinned with a pidfd, stops a child that saves itself on
// SIGTERM and kills one that ignores it, and reaps it.
func TestEscalationCmdTarget(t *testing.T) {
	for _, tc := range []struct {
		mode string
		wait time.Duration
		want escalate.Exit
	}{{"trap", 20 * time.Second, escalate.Exited}, {"ignore", 300 * time.Millisecond, escalate.ExitedAfterKill}} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd, _ := child(t, tc.mode)
			target := escalate.Cmd(cmd)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			exit, err := escalate.Policy{TermWait: tc.wait}.Stop(ctx, target)
			require.NoError(t, err)
			assert.Equal(t, tc.want, exit)
			require.NotNil(t, cmd.ProcessState, "reaped by the target's Wait")
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if tc.want == escalate.Exited {
				assert.Equal(t, 0, ws.ExitStatus())
			} else {
				assert.Equal(t, syscall.SIGKILL, ws.Signal())
			}
		})
	}
}

// A process that had already exited when the first signal was sent is
// Gone, never Exited: it never got the signal that saves its state. Reaped
// before Cmd, or a zombie (a child that crashed before the drain: Cmd's
// target reaps only from Stop's wait, so until then every child that
// exited is one), which was Exited, and escalate.Sandbox counted it
// preserved; its pidfd says it exited, and Stop reaps it.
func TestEscalationAlreadyExited(t *testing.T) {
	t.Run("reaped", func(t *testing.T) {
		cmd, _ := child(t, "exit")
		require.NoError(t, cmd.Wait())
		exit, err := escalate.Policy{}.Stop(t.Context(), escalate.Cmd(cmd))
		require.NoError(t, err)
		assert.Equal(t, escalate.Gone, exit, "it never got the signal")
	})
	t.Run("zombie", func(t *testing.T) {
		cmd, target := zombie(t)
		exit, err := escalate.Policy{TermWait: time.Minute}.Stop(t.Context(), target)
		require.NoError(t, err)
		assert.Equal(t, escalate.Gone, exit, "it never got the signal")
		assert.Eventually(t, func() bool {
			st, err := procstat.Read(cmd.Process.Pid)
			return err != nil || st.State != 'Z'
		}, 10*time.Second, 10*time.Millisecond, "reaped")
	})
	t.Run("zombie sandbox", func(t *testing.T) {
		_, target := zombie(t)
		sb := &escalate.Sandbox{Name: "crashed", Target: target}
		assert.ErrorIs(t, sb.Preserve(t.Context()), pause.ErrGone, "vanished, not preserved")
	})
}

// zombie starts a child that exits at once and returns it, not reaped, with
// Cmd's target over it once its pidfd says it has exited.
func zombie(t *testing.T) (*exec.Cmd, escalate.Target) {
	t.Helper()
	cmd, _ := child(t, "exit")
	waitZombie(t, cmd.Process.Pid)
	target := escalate.Cmd(cmd)
	// The leader is a zombie; its other threads may take a moment more.
	require.Eventually(t, func() bool {
		exited, err := target.Exited(t.Context())
		return err == nil && exited
	}, 10*time.Second, 10*time.Millisecond, "a zombie has exited")
	return cmd, target
}

// waitZombie waits (at most 10 s) until pid has exited and not been reaped.
func waitZombie(t *testing.T, pid int) {
	t.Helper()
	for range 1000 {
		st, err := procstat.Read(pid)
		require.NoError(t, err)
		if st.State == 'Z' {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d did not exit", pid)
}

// stolenWait returns a wait that fails as one whose child another reaper
// collected first: the kernel's own ECHILD, from waiting for a child this
// test already reaped (a `runsc wait` taken by a PID-1 reaper).
func stolenWait(t *testing.T) func(context.Context) error {
	cmd, _ := child(t, "exit")
	pid := cmd.Process.Pid
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(pid, &ws, 0, nil) // the other reaper
	require.NoError(t, err)
	return func(context.Context) error {
		_, err := syscall.Wait4(pid, nil, 0, nil)
		require.ErrorIs(t, err, syscall.ECHILD)
		return err
	}
}

// exitedProbe answers from a pidfd of the process, as a runtime's state
// would: readable once it exited.
func exitedProbe(t *testing.T, p *os.Process) func(context.Context) (bool, error) {
	pinned, err := proc.Open(p.Pid)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pinned.Close() })
	return func(context.Context) (bool, error) { return pinned.Exited(), nil }
}

// A stolen wait (ECHILD) is not an exit: the runtime is asked, and a target
// that ignores SIGTERM is SIGKILLed when its TermWait ends. Before, ECHILD
// counted as "exited" and SIGKILL was never sent: the ateom review's bug.
func TestEscalationStolenWaitAsksTheRuntimeAndKills(t *testing.T) {
	cmd, _ := child(t, "ignore")
	target := escalate.Funcs{
		SignalFunc: func(_ context.Context, sig syscall.Signal) error { return cmd.Process.Signal(sig) },
		WaitFunc:   stolenWait(t), ExitedFunc: exitedProbe(t, cmd.Process)}
	start := time.Now()
	exit, err := escalate.Policy{TermWait: 300 * time.Millisecond}.Stop(t.Context(), target)
	require.NoError(t, err)
	assert.Equal(t, escalate.ExitedAfterKill, exit)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the wait after the signal is given in full")
	_ = cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "killed by SIGKILL: %v", ws)
}

// The runtime saying the target exited settles a stolen wait.
func TestEscalationStolenWaitOfAnExitedTargetIsAnExit(t *testing.T) {
	cmd, state := child(t, "trap")
	target := escalate.Funcs{
		SignalFunc: func(_ context.Context, sig syscall.Signal) error { return cmd.Process.Signal(sig) },
		WaitFunc:   stolenWait(t), ExitedFunc: exitedProbe(t, cmd.Process)}
	exit, err := escalate.Policy{TermWait: 20 * time.Second}.Stop(t.Context(), target)
	require.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit)
	assert.FileExists(t, state, "it saved its state on SIGTERM")
}

// Without a way to ask, a stolen wait leaves the exit unknown: the target
// is SIGKILLed when the wait after the signal ends, and the result says it is unknown.
func TestEscalationStolenWaitWithoutProberEscalates(t *testing.T) {
	cmd, _ := child(t, "ignore")
	target := escalate.Funcs{
		SignalFunc: func(_ context.Context, sig syscall.Signal) error { return cmd.Process.Signal(sig) },
		WaitFunc:   stolenWait(t)}
	exit, err := escalate.Policy{TermWait: 300 * time.Millisecond, KillWait: 300 * time.Millisecond}.Stop(t.Context(), target)
	assert.Equal(t, escalate.ExitUnknown, exit)
	require.ErrorIs(t, err, syscall.ECHILD)
	assert.ErrorContains(t, err, "cannot say whether it exited")
	_ = cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "killed by SIGKILL: %v", ws)
}

// A signalling command whose status was stolen may have delivered the
// signal: the target keeps its TermWait and is not killed at once.
func TestEscalationStolenSignalStatusKeepsTheTermWait(t *testing.T) {
	cmd, state := child(t, "trap")
	target := escalate.Funcs{
		SignalFunc: func(_ context.Context, sig syscall.Signal) error {
			if err := cmd.Process.Signal(sig); err != nil {
				return err
			}
			return fmt.Errorf("runsc kill: waitid: %w", syscall.ECHILD)
		},
		WaitFunc: stolenWait(t), ExitedFunc: exitedProbe(t, cmd.Process)}
	exit, err := escalate.Policy{TermWait: 20 * time.Second}.Stop(t.Context(), target)
	assert.Equal(t, escalate.Exited, exit)
	assert.NoError(t, err, "the error is nil unless the exit is ExitUnknown")
	assert.FileExists(t, state)
}

// fakeTarget exits exitAfter[sig] after receiving sig; its wait fails with
// waitErr while failWaits > 0.
type fakeTarget struct {
	exitAfter map[syscall.Signal]time.Duration
	waitErr   error
	gone      bool

	mu      sync.Mutex
	signals []string
	exited  chan struct{}
	once    sync.Once
	waits   int
}

func newFake(exitAfter map[syscall.Signal]time.Duration) *fakeTarget {
	return &fakeTarget{exitAfter: exitAfter, exited: make(chan struct{})}
}

func (f *fakeTarget) Signal(_ context.Context, sig syscall.Signal) error {
	if f.gone {
		return os.ErrProcessDone
	}
	f.mu.Lock()
	f.signals = append(f.signals, fmt.Sprintf("%v@%v", sig, time.Now().Format("05.000")))
	f.mu.Unlock()
	if d, ok := f.exitAfter[sig]; ok {
		time.AfterFunc(d, func() { f.once.Do(func() { close(f.exited) }) })
	}
	return nil
}

func (f *fakeTarget) Wait(ctx context.Context) error {
	f.mu.Lock()
	f.waits++
	f.mu.Unlock()
	if f.waitErr != nil {
		return f.waitErr
	}
	select {
	case <-f.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited is not asked of the fake: it cannot tell.
func (f *fakeTarget) Exited(context.Context) (bool, error) { return false, errors.ErrUnsupported }

func (f *fakeTarget) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.signals...)
}

// PR #764's bug: a failed `runsc wait` looked like a clean exit, so SIGKILL
// was never sent. Here the failed wait is retried through the wait after the signal, then
// SIGKILL goes out, and the end is reported unknown with the wait's error.
func TestEscalationFailedWaitEscalates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(nil)
		f.waitErr = errors.New("runsc wait: exit status 128")
		start := time.Now()
		exit, err := escalate.Policy{TermWait: 2 * time.Second, KillWait: time.Second}.Stop(t.Context(), f)
		assert.Equal(t, escalate.ExitUnknown, exit)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "runsc wait: exit status 128")
		assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@02.000"}, f.sent())
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Greater(t, f.waits, 2, "the wait is retried")
	})
}

func TestEscalationTimeline(t *testing.T) {
	for _, tc := range []struct {
		name      string
		exitAfter map[syscall.Signal]time.Duration
		want      escalate.Exit
		sent      []string
		took      time.Duration
	}{
		{"exits on SIGTERM", map[syscall.Signal]time.Duration{syscall.SIGTERM: 1500 * time.Millisecond},
			escalate.Exited, []string{"terminated@00.000", "continued@00.000"}, 1500 * time.Millisecond},
		{"needs SIGKILL", map[syscall.Signal]time.Duration{syscall.SIGKILL: 100 * time.Millisecond},
			escalate.ExitedAfterKill, []string{"terminated@00.000", "continued@00.000", "killed@05.000"}, 5100 * time.Millisecond},
		{"never exits", nil,
			escalate.ExitUnknown, []string{"terminated@00.000", "continued@00.000", "killed@05.000"}, 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(tc.exitAfter)
				start := time.Now()
				exit, err := escalate.Policy{TermWait: 5 * time.Second, KillWait: 2 * time.Second}.Stop(t.Context(), f)
				assert.Equal(t, tc.want, exit)
				assert.Equal(t, tc.sent, f.sent())
				assert.Equal(t, tc.took, time.Since(start))
				// Fault: every signal delivered and both waits over left no
				// failure, and the unknown end came with a nil error, which a
				// caller checking only the error read as success.
				if exit == escalate.ExitUnknown {
					assert.EqualError(t, err, "escalate: target not seen to exit (2s after SIGKILL)")
					assert.ErrorIs(t, err, escalate.ErrExitUnknown)
				} else {
					assert.NoError(t, err)
				}
			})
		})
	}
}

// The wait after the signal ends KillWait before the context's deadline, whatever TermWait
// says, so the kill wait still fits.
func TestEscalationTermWaitFitsTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(nil)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		exit, _ := escalate.Policy{TermWait: time.Hour, KillWait: 2 * time.Second}.Stop(ctx, f)
		assert.Equal(t, escalate.ExitUnknown, exit)
		assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@08.000"}, f.sent())
		assert.Equal(t, 10*time.Second, time.Since(start))
	})
}

func TestEscalationTargetAlreadyGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(nil)
		f.gone = true
		exit, err := escalate.Policy{}.Stop(t.Context(), f)
		require.NoError(t, err)
		assert.Equal(t, escalate.Gone, exit)
		assert.Zero(t, f.waits)
	})
}

// Sandbox plugs an escalation into the Preserver: an actor that
// saves itself on SIGTERM is Preserved; one that needed SIGKILL, or whose
// end is unknown, Failed without retry.
func TestSignalSandboxesInAPreserver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		esc := escalate.Policy{TermWait: 5 * time.Second, KillWait: 2 * time.Second}
		gone := newFake(nil)
		gone.gone = true // exited before the drain signalled it: a crash, a kill of its own
		sbs := []pause.Sandbox{
			&escalate.Sandbox{Name: "saves", Policy: esc,
				Target: newFake(map[syscall.Signal]time.Duration{syscall.SIGTERM: time.Second})},
			&escalate.Sandbox{Name: "killed", Policy: esc,
				Target: newFake(map[syscall.Signal]time.Duration{syscall.SIGKILL: 0})},
			&escalate.Sandbox{Name: "unknown", Policy: esc, Target: newFake(nil)},
			&escalate.Sandbox{Name: "gone", Policy: esc, Target: gone},
		}
		p, err := pause.New(listOnce(sbs...), pause.Config{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		rep := p.Run(ctx, time.Time{})
		took := time.Since(start)
		entry := func(t *testing.T, rep *pause.Report, id string) pause.Entry {
			for _, e := range rep.Entries {
				if e.ID == id {
					return e
				}
			}
			t.Fatalf("no entry for %s", id)
			return pause.Entry{}
		}
		assert.Equal(t, pause.Preserved, entry(t, rep, "saves").Outcome)
		killed, unknown := entry(t, rep, "killed"), entry(t, rep, "unknown")
		assert.Equal(t, pause.Failed, killed.Outcome)
		assert.Contains(t, killed.Error, "needed SIGKILL")
		assert.Equal(t, pause.Failed, unknown.Outcome)
		assert.Contains(t, unknown.Error, "not seen to exit")
		assert.Equal(t, 1, unknown.Attempts)
		// Before: Preserved, as if it had saved its state on the signal it never got.
		assert.Equal(t, pause.Vanished, entry(t, rep, "gone").Outcome)
		assert.Equal(t, 7*time.Second, took, "the three escalations run in parallel")
	})
}

// A window shorter than twice KillWait is shared: the wait after SIGTERM
// gets half of it, so a target that saves itself on the signal within that
// half is not SIGKILLed at once (the zero Policy in a drain step's 1.5 s).
//
//	0 s SIGTERM   0.5 s the target saved itself and exited   (SIGKILL would have been due at 0.75 s)
func TestShortWindowIsSharedBetweenTheTwoWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[syscall.Signal]time.Duration{syscall.SIGTERM: 500 * time.Millisecond})
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		defer cancel()
		exit, err := escalate.Policy{}.Stop(ctx, f)
		require.NoError(t, err)
		assert.Equal(t, escalate.Exited, exit, "SIGTERM was enough: %v", f.signals)
	})
}

// lineWriter is a child's stdout that is not a file (exec.Cmd copies it
// in a goroutine, which Cmd.WaitDelay bounds), and hands over its first
// line.
type lineWriter struct {
	mu    sync.Mutex
	buf   strings.Builder
	first chan string
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.buf.String(), "\n")
	w.buf.Write(b)
	if line, _, ok := strings.Cut(w.buf.String(), "\n"); ok && !had {
		w.first <- line
	}
	return len(b), nil
}

// A child that exits on SIGTERM has exited even when its stdout outlives
// it (a grandchild inherited it): Cmd.Wait then returns exec.ErrWaitDelay
// after WaitDelay, with the child reaped. The target's Wait took that for
// a failed wait, so Stop waited out the whole wait after the signal for a
// target that had exited at once.
func TestCmdTargetSeesTheExitWhenAGrandchildHoldsStdout(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	out := &lineWriter{first: make(chan string, 1)}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=leak")
	cmd.Stdout, cmd.WaitDelay = out, 50*time.Millisecond
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var grandchild int
	_, err = fmt.Sscanf(<-out.first, "ready %d", &grandchild)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })

	target := escalate.Cmd(cmd)
	require.NoError(t, target.Signal(t.Context(), syscall.SIGTERM))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, target.Wait(ctx), "the child exited (0) and was reaped")
	require.NotNil(t, cmd.ProcessState)
	assert.Equal(t, 0, cmd.ProcessState.ExitCode())
	exit, err := escalate.Policy{}.Stop(ctx, target)
	require.NoError(t, err)
	assert.Equal(t, escalate.Gone, exit, "reaped before Stop's signal")
}

// Fault: a Sandbox without a Target (the zero Sandbox) panicked with a nil
// dereference in Preserve, and so did Policy.Stop with a nil Target (or a
// nil pointer in one). Stop now returns ExitUnknown and an error saying
// the Target is nil, and Preserve a permanent error naming
// Sandbox.Target: no retry can make one. docs/faults.md row 242.
func TestNoTargetIsAnErrorNotAPanic(t *testing.T) {
	for name, target := range map[string]escalate.Target{"nil": nil, "nil pointer": (*nilTarget)(nil)} {
		exit, err := escalate.Policy{}.Stop(t.Context(), target)
		assert.Equal(t, escalate.ExitUnknown, exit, name)
		require.ErrorContains(t, err, "escalate: the Target is nil", name)
	}
	err := (&escalate.Sandbox{Name: "sb-1"}).Preserve(t.Context())
	require.ErrorContains(t, err, `escalate: sandbox "sb-1": Sandbox.Target is nil`)
	var perm *backoff.PermanentError
	assert.ErrorAs(t, err, &perm)
}

// nilTarget is a Target whose methods dereference their receiver.
type nilTarget struct{ exited bool }

func (n *nilTarget) Signal(context.Context, syscall.Signal) error { n.exited = true; return nil }
func (n *nilTarget) Wait(context.Context) error                   { n.exited = true; return nil }
func (n *nilTarget) Exited(context.Context) (bool, error)         { return n.exited, nil }

// failingSends is f behind a runtime whose first n sends of sig fail for
// a passing reason: its `runsc kill` could not fork (EAGAIN).
func failingSends(f *fakeTarget, sig syscall.Signal, n int) escalate.Target {
	failed := 0
	return escalate.Funcs{
		SignalFunc: func(ctx context.Context, s syscall.Signal) error {
			if s == sig && failed < n {
				failed++
				return fmt.Errorf("runsc kill %v: fork/exec /usr/bin/runsc: %w", s, syscall.EAGAIN)
			}
			return f.Signal(ctx, s)
		},
		WaitFunc: f.Wait,
	}
}

// A first signal that failed to go out for a passing reason (the runtime's
// `runsc kill` could not fork under load) is sent again until the wait
// after the signal ends: the target then saves itself on it. Before, the
// failed send ended that wait at once, and SIGKILL went out at +0 to a
// target with 20 s to save its state.
func TestEscalationFailedFirstSignalIsSentAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[syscall.Signal]time.Duration{syscall.SIGTERM: 500 * time.Millisecond})
		target := failingSends(f, syscall.SIGTERM, 2)
		start := time.Now()
		exit, err := escalate.Policy{TermWait: 20 * time.Second}.Stop(t.Context(), target)
		require.NoError(t, err)
		assert.Equal(t, escalate.Exited, exit)
		assert.Equal(t, []string{"terminated@00.200", "continued@00.200"}, f.sent(), "sent again every 100 ms, never SIGKILL")
		assert.Equal(t, 700*time.Millisecond, time.Since(start))
	})
}

// A first signal that cannot go out (EPERM: not this process's to signal;
// a Funcs without SignalFunc) is not sent again: the escalation goes on at
// once, and the end is unknown, with the reason.
func TestEscalationFirstSignalRefusedIsNotSentAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sends := 0
		target := escalate.Funcs{
			SignalFunc: func(context.Context, syscall.Signal) error { sends++; return syscall.EPERM },
			WaitFunc:   func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		}
		start := time.Now()
		exit, err := escalate.Policy{TermWait: 20 * time.Second, KillWait: time.Second}.Stop(t.Context(), target)
		assert.Equal(t, escalate.ExitUnknown, exit)
		assert.ErrorIs(t, err, syscall.EPERM)
		assert.Equal(t, 2, sends, "SIGTERM once, SIGKILL once")
		assert.Equal(t, time.Second, time.Since(start), "only the kill wait")
	})
}

// A target whose first signal never went out is never Exited, even when it
// is then seen to have exited: it never got the signal that saves its
// state. Here `runsc kill` fails (EAGAIN: it could not fork) at every try
// of the wait after the signal, and the sandbox crashes on its own 1 s in.
// The wait at the end of the wait after the signal, or the SIGKILL that
// finds it gone, sees the exit: Stop said Exited, and escalate.Sandbox's
// Preserve nil, so the Report counted preserved a sandbox whose state was
// never saved. It is Gone (Vanished in the Report), as a target that had
// exited before the signal.
//
//	+0      SIGTERM: EAGAIN, sent again every 100 ms: EAGAIN
//	+1 s    the sandbox crashes
//	+3 s    the wait after the signal ends: the exit is seen   -> Gone
func TestEscalationTargetThatNeverGotTheSignalIsNotExited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		crashed := make(chan struct{})
		time.AfterFunc(time.Second, func() { close(crashed) })
		sends := 0
		target := escalate.Funcs{
			SignalFunc: func(_ context.Context, sig syscall.Signal) error {
				sends++
				select {
				case <-crashed:
					if sig == syscall.SIGKILL {
						return syscall.ESRCH
					}
				default:
				}
				return fmt.Errorf("runsc kill: fork/exec /usr/bin/runsc: %w", syscall.EAGAIN)
			},
			WaitFunc: func(ctx context.Context) error {
				select {
				case <-crashed:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			},
		}
		policy := escalate.Policy{TermWait: 3 * time.Second, KillWait: time.Second}
		exit, err := policy.Stop(t.Context(), target)
		require.NoError(t, err)
		assert.Equal(t, escalate.Gone, exit, "it never got the signal")
		assert.Greater(t, sends, 2, "the signal was sent again")

		sb := &escalate.Sandbox{Name: "crashed", Target: target, Policy: policy}
		assert.ErrorIs(t, sb.Preserve(t.Context()), pause.ErrGone, "vanished, not preserved")
	})
}

// In a window shorter than twice KillWait the two waits share it, halves
// each, whatever TermWait: SIGKILL goes out halfway, not KillWait before
// the deadline. The docs (Policy.TermWait, the package's guarantees) said
// the wait after the signal always ends KillWait before the deadline, so
// that SIGKILL and its wait fit: here that would have been SIGKILL at 1 s,
// with 5 s for the kill wait; each wait gets 3 s.
//
//	0 s SIGTERM   3 s SIGKILL   6 s the deadline: exit unknown
func TestAWindowShorterThanTwoKillWaitsIsSharedWhateverTermWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(nil)
		ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
		defer cancel()
		start := time.Now()
		exit, _ := escalate.Policy{TermWait: 10 * time.Second, KillWait: 5 * time.Second}.Stop(ctx, f)
		assert.Equal(t, escalate.ExitUnknown, exit)
		assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@03.000"}, f.sent(), "each wait gets half")
		assert.Equal(t, 6*time.Second, time.Since(start))
	})
}

// Fault: a first signal the target was never sent (a Policy.Signal no
// kernel knows, refused EINVAL; a runtime that refused EPERM) ended in
// SIGKILL, and when SIGKILL worked Stop returned ExitedAfterKill with a
// nil error: the refusal was dropped, and the Sandbox's error, the Report's
// and the log's, said only "needed SIGKILL", the account of a sandbox too
// slow to save itself, whose fix is a longer wait, not the one that is
// wrong. The error now says what failed on the way. docs/faults.md row 474.
func TestKillAfterARefusedFirstSignalSaysWhy(t *testing.T) {
	cmd, state := child(t, "trap")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sb := &escalate.Sandbox{Name: "actor", Target: escalate.Cmd(cmd),
		Policy: escalate.Policy{Signal: syscall.Signal(99), TermWait: 20 * time.Second}} // no such signal
	err := sb.Preserve(ctx)
	require.ErrorIs(t, err, escalate.ErrKilled)
	assert.ErrorIs(t, err, syscall.EINVAL, "why it needed SIGKILL")
	assert.Contains(t, err.Error(), "escalate: Policy.Signal 99 is no signal (1-64; zero means SIGTERM)")
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.Equal(t, syscall.SIGKILL, ws.Signal())
	assert.NoFileExists(t, state)
}

// Fault: a Policy whose first signal is SIGKILL (the signal that "stops"
// a process, set by someone who took Signal for that) reported a target
// that died on it Exited, which a Sandbox's Preserve turns into nil: the
// Report said preserved, and the drain exited 0, of an actor killed with
// its state unsaved. It is now ExitedAfterKill, its error naming the
// field. docs/faults.md row 475.
func TestFirstSignalSIGKILLIsAKillNotAPreserve(t *testing.T) {
	cmd, state := child(t, "trap")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sb := &escalate.Sandbox{Name: "actor", Target: escalate.Cmd(cmd),
		Policy: escalate.Policy{Signal: syscall.SIGKILL, TermWait: 20 * time.Second}}
	err := sb.Preserve(ctx)
	require.Error(t, err, "a sandbox killed with its state unsaved was preserved")
	assert.ErrorIs(t, err, escalate.ErrKilled)
	assert.Contains(t, err.Error(), "Policy.Signal is SIGKILL")
	assert.NoFileExists(t, state)
}

// Fault: row 475 made an exit on a first signal of SIGKILL a kill only
// when the wait after the signal saw it. A wait that could not see it (a
// `runsc wait` that fails, the bug Stop's doc names) ran to the end of
// the wait after the signal, and the escalation's own SIGKILL then found
// the target gone: Stop returned Exited, as for a target that exited on
// its own between the wait and the kill, and the Sandbox's Preserve nil,
// preserved, of an actor SIGKILLed with its state unsaved.
//
//	0 s    SIGKILL (Policy.Signal): the actor dies; every wait fails
//	5 s    the wait after the signal is over: SIGKILL again, "no such process"
//	       -> ExitedAfterKill, naming the field, never Exited
func TestFirstSignalSIGKILLIsAKillWhenOnlyTheSecondSeesItGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var signals []syscall.Signal
		target := escalate.Funcs{
			SignalFunc: func(_ context.Context, sig syscall.Signal) error {
				signals = append(signals, sig)
				if len(signals) > 1 {
					return os.ErrProcessDone // killed by the first
				}
				return nil
			},
			WaitFunc: func(context.Context) error { return errors.New("runsc wait: exit status 128") },
		}
		policy := escalate.Policy{Signal: syscall.SIGKILL, TermWait: 5 * time.Second, KillWait: time.Second}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		exit, err := policy.Stop(ctx, target)
		assert.Equal(t, []syscall.Signal{syscall.SIGKILL, syscall.SIGKILL}, signals)
		assert.Equal(t, escalate.ExitedAfterKill, exit, "killed by Policy.Signal, never Exited")
		assert.ErrorContains(t, err, "Policy.Signal is SIGKILL")

		signals = nil
		err = (&escalate.Sandbox{Name: "actor", Target: target, Policy: policy}).Preserve(ctx)
		require.Error(t, err, "a sandbox killed with its state unsaved was preserved")
		assert.ErrorIs(t, err, escalate.ErrKilled)
	})
}

// Fault: row 474 gave ExitedAfterKill the error of a first signal that
// failed to go out, to say why the target had no chance to save itself,
// but took for one every error of the send, ECHILD included: a send whose
// status was stolen (a `runsc kill` a PID-1 reaper collected), which Stop
// takes as delivered and whose TermWait it keeps. A target that got the
// signal and only did not exit in time was then said never to have got
// it: "target needed SIGKILL ...: escalate: sending SIGTERM: ... no child
// processes", the account of a send that failed, whose fix is not the one
// needed (a longer wait).
//
//	0 s   SIGTERM delivered, its status stolen (ECHILD); the target ignores it
//	5 s   TermWait over: SIGKILL, the target exits
//	      -> ExitedAfterKill with a nil error, as for any target too slow
func TestKillAfterAStolenFirstSignalStatusDoesNotSayItWasNotSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exited := make(chan struct{})
		target := escalate.Funcs{
			SignalFunc: func(_ context.Context, sig syscall.Signal) error {
				if sig == syscall.SIGKILL {
					close(exited)
					return nil
				}
				return fmt.Errorf("runsc kill: waitid: %w", syscall.ECHILD) // delivered
			},
			WaitFunc: func(ctx context.Context) error {
				select {
				case <-exited:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			},
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		exit, err := escalate.Policy{TermWait: 5 * time.Second, KillWait: time.Second}.Stop(ctx, target)
		assert.Equal(t, escalate.ExitedAfterKill, exit)
		assert.Equal(t, 5*time.Second, time.Since(start), "the TermWait kept: the signal may have been delivered")
		assert.NoError(t, err, "it only did not exit in time")
	})
}

// Fault: SIGKILL was sent once. A `runsc kill --all SIGKILL` that failed
// for a passing reason (it could not fork on a loaded node: EAGAIN) left
// the target running: the kill wait ran out and Stop said ExitUnknown, a
// sandbox that may still run, where the first signal is sent again every
// 100 ms (row 372) and a second try would have killed it. SIGKILL is now
// sent again the same way, within the kill wait.
//
//	0 s      SIGTERM: ignored
//	5 s      SIGKILL: EAGAIN; 5.1 s: EAGAIN; 5.2 s: delivered
//	5.3 s    the target exits                 -> ExitedAfterKill, nil
func TestEscalationFailedSIGKILLIsSentAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[syscall.Signal]time.Duration{syscall.SIGKILL: 100 * time.Millisecond})
		target := failingSends(f, syscall.SIGKILL, 2)
		start := time.Now()
		exit, err := escalate.Policy{TermWait: 5 * time.Second, KillWait: 2 * time.Second}.Stop(t.Context(), target)
		assert.Equal(t, escalate.ExitedAfterKill, exit, "a SIGKILL that failed once was never sent again: %v", err)
		assert.NoError(t, err, "SIGKILL went out, and the target only did not exit on the signal")
		assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@05.200"}, f.sent(), "sent again every 100 ms")
		assert.Equal(t, 5300*time.Millisecond, time.Since(start))
	})
}

// A target that a resent SIGKILL finds gone needed SIGKILL: the send that
// failed may have reached it (`runsc kill --all` that killed some of the
// container's processes and then failed). Never Exited, which a Sandbox
// reports preserved.
func TestEscalationTargetGoneAtAResentSIGKILLIsAKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kills := 0
		target := escalate.Funcs{
			SignalFunc: func(_ context.Context, sig syscall.Signal) error {
				if sig != syscall.SIGKILL {
					return nil
				}
				if kills++; kills == 1 {
					return fmt.Errorf("runsc kill --all: %w", syscall.EAGAIN)
				}
				return os.ErrProcessDone
			},
			WaitFunc: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		}
		exit, err := escalate.Policy{TermWait: time.Second, KillWait: time.Second}.Stop(t.Context(), target)
		assert.Equal(t, escalate.ExitedAfterKill, exit)
		assert.NoError(t, err)
		assert.Equal(t, 2, kills)
	})
}

// A SIGKILL that keeps failing is sent again until the kill wait ends, and
// the error says how often; the end is unknown.
func TestEscalationSIGKILLThatKeepsFailingEndsTheKillWaitUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kills := 0
		target := escalate.Funcs{
			SignalFunc: func(_ context.Context, sig syscall.Signal) error {
				if sig == syscall.SIGKILL {
					kills++
					return fmt.Errorf("runsc kill --all: %w", syscall.EAGAIN)
				}
				return nil
			},
			WaitFunc: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		}
		start := time.Now()
		exit, err := escalate.Policy{TermWait: time.Second, KillWait: time.Second}.Stop(t.Context(), target)
		assert.Equal(t, escalate.ExitUnknown, exit)
		assert.ErrorIs(t, err, escalate.ErrExitUnknown)
		assert.ErrorIs(t, err, syscall.EAGAIN)
		assert.ErrorContains(t, err, fmt.Sprintf("escalate: sending SIGKILL (%d times): ", kills))
		assert.Equal(t, 10, kills, "every 100 ms of the kill wait")
		assert.Equal(t, 2*time.Second, time.Since(start), "Stop still ends with the kill wait")
	})
}

// The same with a real child that ignores SIGTERM, reached through a
// runtime whose first SIGKILL fails (EAGAIN): before, the child was left
// running and Stop said ExitUnknown; it is killed, and reaped.
func TestEscalationKillsAChildWhoseFirstSIGKILLFailed(t *testing.T) {
	cmd, state := child(t, "ignore")
	real := escalate.Cmd(cmd)
	failed := false
	target := escalate.Funcs{
		SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
			if sig == syscall.SIGKILL && !failed {
				failed = true
				return fmt.Errorf("runsc kill --all: fork/exec /usr/bin/runsc: %w", syscall.EAGAIN)
			}
			return real.Signal(ctx, sig)
		},
		WaitFunc:   real.Wait,
		ExitedFunc: real.Exited,
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	exit, err := escalate.Policy{TermWait: 200 * time.Millisecond, KillWait: 10 * time.Second}.Stop(ctx, target)
	require.NoError(t, err)
	assert.Equal(t, escalate.ExitedAfterKill, exit)
	require.NotNil(t, cmd.ProcessState, "the child was reaped")
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%v", ws)
	assert.NoFileExists(t, state)
}

// Fault: a child that exits on SIGTERM while a grandchild keeps its stdout
// pipe open, and whose Cmd sets no WaitDelay (os/exec's default), was not
// seen to exit: Cmd's Wait waited for c.Wait, which reaps the child at once
// but returns only once the pipe closes, never while the grandchild lives.
// Stop held the child (and a Preserver's slot, a drain step's window) to
// the end of the wait after the signal, and took it then for one that
// exited between the wait and SIGKILL.
//
//	SIGTERM -> child saves, exits 0; grandchild keeps stdout -> Stop: Exited, at once
func TestCmdTargetSeesTheExitWhileAGrandchildHoldsStdoutWithoutWaitDelay(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	out := &lineWriter{first: make(chan string, 1)}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=leak")
	cmd.Stdout = out // copied by a goroutine of os/exec; no WaitDelay
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var grandchild int
	_, err = fmt.Sscanf(<-out.first, "ready %d", &grandchild)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })

	const termWait = 20 * time.Second
	start := time.Now()
	exit, err := escalate.Policy{TermWait: termWait, KillWait: time.Second}.Stop(t.Context(), escalate.Cmd(cmd))
	took := time.Since(start)
	require.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit)
	assert.Less(t, took, termWait/2, "seen at its exit, not at the end of the wait after the signal")
	assert.NoError(t, syscall.Kill(grandchild, 0), "the grandchild is not the target: it runs on")
}

// The same child ignoring SIGTERM: SIGKILL ends it, its grandchild keeps
// its stdout, and c.Wait never returns. Its end was not seen within the
// kill wait: ExitUnknown, "not seen to exit", for a child SIGKILL had ended
// at once (row 1820).
//
//	SIGTERM (ignored) -> 2 s: SIGKILL, exits; grandchild keeps stdout -> ExitedAfterKill
func TestCmdTargetSeesTheKillWhileAGrandchildHoldsStdoutWithoutWaitDelay(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	out := &lineWriter{first: make(chan string, 1)}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=ignoreleak")
	cmd.Stdout = out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var grandchild int
	_, err = fmt.Sscanf(<-out.first, "ready %d", &grandchild)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })

	exit, err := escalate.Policy{TermWait: 2 * time.Second, KillWait: 5 * time.Second}.Stop(t.Context(), escalate.Cmd(cmd))
	require.NoError(t, err)
	assert.Equal(t, escalate.ExitedAfterKill, exit)
}
