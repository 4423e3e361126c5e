package pause_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// errAsksWhenToRetry is the error of a Preserve that failed: its RetryAt
// ends its goroutine when exit is set (t.FailNow in a test's error type).
type errAsksWhenToRetry struct{ exit bool }

func (errAsksWhenToRetry) Error() string { return "server busy" }

func (e errAsksWhenToRetry) RetryAt() time.Time {
	if e.exit {
		runtime.Goexit()
	}
	return time.Time{}
}

// failsOnce is a sandbox whose Preserve fails after a second with err.
type failsOnce struct{ err error }

func (failsOnce) ID() string { return "fails" }

func (s failsOnce) Preserve(context.Context) error {
	time.Sleep(time.Second)
	return s.err
}

// Code of the user's that a worker calls as it preserves a sandbox, after
// its Preserve returned, and that ends the worker's goroutine
// (runtime.Goexit) fails that sandbox as a Preserve that ends it does: its
// entry says why, with the stack, and its slot goes to the next sandbox.
// The worker died with that code, unsettled: the sandbox after it waited
// for the slot to the phase deadline, and the Run for the hard deadline.
//
//	Limit 1; a, fails, c of 1 s each; a minute's phase, 70 s hard
//	before: a preserved at 1 s; fails' Preserve returns at 2 s, and
//	        Config.Permanent or its error's RetryAt ends the worker;
//	        c not started at 60 s; fails timed out at 70 s, Run back at 70.02 s
//	now:    fails failed at 2 s (its stack names the call); c preserved by 3 s
func TestUserCodeAWorkerCallsAfterAPreserveThatEndsItsGoroutineFailsItsSandbox(t *testing.T) {
	for _, tc := range []struct {
		name, frame string
		err         error
		permanent   func(error) bool
	}{
		{"Config.Permanent", "pause_test.TestUserCode", errors.New("refused"), func(err error) bool {
			if err.Error() == "refused" {
				runtime.Goexit()
			}
			return false
		}},
		{"an error's RetryAt", "errAsksWhenToRetry.RetryAt", errAsksWhenToRetry{exit: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &fakesandbox.Sandbox{Name: "a", Latency: time.Second}
				c := &fakesandbox.Sandbox{Name: "c", Latency: time.Second}
				var logs logbuf.Buffer
				p, err := pause.New(listOnce(a, failsOnce{tc.err}, c), pause.Config{Limit: 1, Permanent: tc.permanent, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				require.NoError(t, err)
				rep, took := runFor(t, p, time.Minute, 70*time.Second)
				assert.Equal(t, 3*time.Second, took)
				e := entry(t, rep, "fails")
				assert.Equal(t, pause.Failed, e.Outcome)
				assert.Equal(t, 2*time.Second, e.End.Sub(rep.Start))
				assert.Contains(t, e.Error, "runtime.Goexit")
				assert.Contains(t, e.Error, tc.name)
				assert.Contains(t, e.Stack, tc.frame)
				assert.Equal(t, 2, rep.Counts[pause.Preserved], "a, and c in the slot fails' worker left")
				assert.Equal(t, 1, strings.Count(logs.String(), "sandbox=fails"), "one line: %s", logs.String())
			})
		})
	}
}

// A sandbox whose error's RetryAt ends the worker's goroutine as its
// first retry is waited for has failed, and is no longer retrying: the
// progress line said it was, for the rest of the Run, once its first
// attempt had failed (its retry began before the wait) and its attempts
// (one) said no retry had.
//
//	0 s    fails' Preserve fails (1 s); its retry's wait asks RetryAt,
//	       which ends the worker: fails failed
//	1 min  before: "preserved 0/2, 1 failed, 1 retrying after a failure, ..."
//	       now:    "preserved 0/2, 1 failed, 2m0s to the preserve deadline"
func TestASandboxFailedAsItsRetryWasWaitedForIsNotRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		long := &fakesandbox.Sandbox{Name: "long", Latency: 3 * time.Minute} // keeps the Run, and its lines, past a minute
		p, err := pause.New(listOnce(failsOnce{errAsksWhenToRetry{exit: true}}, long), pause.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), ProgressInterval: time.Minute})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 3*time.Minute, 4*time.Minute)
		assert.Equal(t, pause.Failed, entry(t, rep, "fails").Outcome)
		var progress []string
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, "pause: progress") {
				progress = append(progress, line)
			}
		}
		require.NotEmpty(t, progress)
		assert.Contains(t, progress[0], `msg="pause: progress: preserved 0/2, 1 failed, 2m0s to the preserve deadline"`)
		assert.NotContains(t, progress[0], "retrying")
	})
}

// priorityExits is a sandbox whose Priority ends its goroutine
// (t.FailNow in a test's Sandbox): Run's own, which admits it.
type priorityExits struct{}

func (priorityExits) ID() string                     { return "exits" }
func (priorityExits) Priority() int                  { runtime.Goexit(); return 0 }
func (priorityExits) Preserve(context.Context) error { return nil }

// A Sandbox's method that Run calls on its own goroutine (ID, Priority,
// EstimatedPreserve, Size) and that ends it (runtime.Goexit) ends the Run
// with it: Run cannot return to a caller whose goroutine is ending. It
// leaves the Preserver as no Run in progress, and says so at Error: a
// Tighten after it moves nothing, and the next Run is the one a Tighten
// moves. The Run stayed the Preserver's Run in progress, so a Tighten
// meanwhile went to a Run that would never end, and said it moved it.
//
//	0 s   Run 1 admits exits, whose Priority ends Run 1's goroutine
//	      Tighten: before true (Run 1 "moved"), now false, and a line at Error
//	      Run 2: a preserved at 1 s, and a Tighten during it moves it
func TestARunWhoseGoroutineASandboxEndsLeavesNoRunInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &fakesandbox.Sandbox{Name: "a", Latency: time.Second}
		var logs logbuf.Buffer
		second := false
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			if second {
				return []pause.Sandbox{a}, nil
			}
			return []pause.Sandbox{priorityExits{}}, nil
		}), pause.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			p.Run(t.Context(), time.Now().Add(time.Minute))
			t.Error("Run returned to a goroutine that was ending")
		}()
		<-ended
		synctest.Wait()
		assert.False(t, p.Tighten(time.Now().Add(30*time.Second)), "no Run is in progress")
		assert.Contains(t, logs.String(), `level=ERROR msg="pause: Run's goroutine ended before its Report`)

		second = true
		moved := make(chan bool)
		go func() {
			time.Sleep(500 * time.Millisecond)
			moved <- p.Tighten(time.Now().Add(30 * time.Second))
		}()
		rep := p.Run(t.Context(), time.Now().Add(time.Minute))
		assert.True(t, <-moved, "Run 2 is the one in progress")
		assert.Equal(t, 1, rep.Counts[pause.Preserved])
		assert.False(t, rep.Hard.IsZero(), "Run 2's Report says the Tighten")
	})
}
