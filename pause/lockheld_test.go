package pause_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// exitsOnLine is a slog.Handler that ends the goroutine that writes its
// first line with the message msg (runtime.Goexit: t.FailNow in a test's
// handler), and writes the others.
// panics instead when panics is set.
type exitsOnLine struct {
	slog.Handler
	msg    string
	panics bool
	exited atomic.Bool
}

func (h *exitsOnLine) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == h.msg && h.exited.CompareAndSwap(false, true) {
		if h.panics {
			panic("log sink closed")
		}
		runtime.Goexit()
	}
	return h.Handler.Handle(ctx, rec)
}

// A log handler that ends the goroutine writing the adaptive limit's
// "concurrency changed" line leaves no lock held: the line was written
// under the run's lock, which the worker's goroutine took with it, and
// every other worker, taking its next task, and the Run's end waited for
// it with no bound.
//
//	40 sandboxes of 16 MiB on a 64 MiB/s disk (10 s); a minute's phase, 2 min hard
//	the first limit change's line ends the worker that writes it
//	before: the Run never returned (every worker blocked on the lock)
//	now:    the Run returns by its hard deadline
func TestALogHandlerThatEndsAWorkerAtALimitChangeLeavesNoLockHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		disk := &fakesandbox.Disk{Bandwidth: 64 * mib, PerWriter: 16 * mib}
		h := &exitsOnLine{Handler: slog.NewTextHandler(new(bytes.Buffer), nil), msg: "pause: concurrency changed"}
		p, err := pause.New(diskNode(disk, 40, 16), pause.Config{Estimator: deadline.NewEstimator(time.Second), Logger: slog.New(h)})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Minute, 2*time.Minute)
		t.Logf("Run back after %v, %v", took, rep.Counts)
		require.True(t, h.exited.Load(), "the limit changed, and its line ended a worker")
		assert.LessOrEqual(t, took, 2*time.Minute+time.Second)
		assert.Len(t, rep.Entries, 40)
		assert.Equal(t, 40, rep.Counts[pause.Preserved], "the next sandbox of the worker the line ended too (row 3821)")
	})
}

// A log handler that panics or ends the worker's goroutine
// (runtime.Goexit) on the line of a sandbox preserved holds no Run: the
// line is the Preserver's telemetry, written after the sandbox settled,
// and the worker's next sandbox, its slot and the pass's count of settled
// sandboxes do not wait on it. The Run says so once, at Error, with the
// stack.
//
//	Limit 1; a, b, c of 1 s each; a minute's phase, 70 s hard
//	a preserved at 1 s; its line ends the worker (Goexit) or panics
//	before: Goexit: b not started at 60 s, c never taken, Run back at 70 s;
//	        panic: the process ended
//	now:    b preserved at 2 s, c at 3 s, Run back at 3 s; one line at Error
func TestALogHandlerThatEndsAWorkerAsASandboxSettlesHoldsNoRun(t *testing.T) {
	for _, panics := range []bool{false, true} {
		name := map[bool]string{false: "Goexit", true: "panic"}[panics]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs bytes.Buffer
				h := &exitsOnLine{Handler: slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}), msg: "pause: sandbox preserved", panics: panics}
				a := &fakesandbox.Sandbox{Name: "a", Latency: time.Second}
				b := &fakesandbox.Sandbox{Name: "b", Latency: time.Second}
				c := &fakesandbox.Sandbox{Name: "c", Latency: time.Second}
				p, err := pause.New(listOnce(a, b, c), pause.Config{Limit: 1, Logger: slog.New(h)})
				require.NoError(t, err)
				rep, took := runFor(t, p, time.Minute, 70*time.Second)
				t.Logf("Run back after %v, %v", took, rep.Counts)
				require.True(t, h.exited.Load(), "a's line ended its worker")
				assert.Equal(t, 3*time.Second, took)
				assert.Equal(t, 3, rep.Counts[pause.Preserved])
				errs := strings.Count(logs.String(), "level=ERROR")
				assert.Equal(t, 1, errs, "%s", logs.String())
				assert.Contains(t, logs.String(), "sandbox=a")
				assert.Contains(t, logs.String(), "lockheld_test.go", "the stack")
			})
		})
	}
}
