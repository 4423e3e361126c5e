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
				listed := false
				var logs logbuf.Buffer
				p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
					if listed {
						return nil, nil
					}
					listed = true
					return []pause.Sandbox{a, failsOnce{tc.err}, c}, nil
				}), pause.Config{Limit: 1, Permanent: tc.permanent, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
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
