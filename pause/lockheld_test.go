package pause_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
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
type exitsOnLine struct {
	slog.Handler
	msg    string
	exited atomic.Bool
}

func (h *exitsOnLine) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == h.msg && h.exited.CompareAndSwap(false, true) {
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
	})
}
