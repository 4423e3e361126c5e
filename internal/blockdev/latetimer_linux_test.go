//go:build linux

package blockdev_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// timerNotFired is a context whose deadline has passed and whose timer
// has not run yet: on a loaded node (2 cores, 7 test runs) the goroutine
// that cancels a context at its deadline waits for a CPU, and ctx.Err()
// stays nil for up to 20 ms past the deadline (measured on this machine,
// 112 processes, a 20 ms scan: it took 20.1-36.8 ms; in the loaded VM a
// 1.15 s scan ended 0.25 s past the last resort's part).
type timerNotFired struct{ context.Context }

func (timerNotFired) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// The holders scan runs with its stage's end as ctx's deadline. At the
// scan's first process the deadline has passed, and the context's timer
// has not said so yet: the scan reads no process and says which it did
// not read, as it does once ctx.Err() says the end came. Before, it read
// every process until the timer ran, past its stage.
func TestScanStopsAtItsDeadlineBeforeTheContextsTimerRuns(t *testing.T) {
	proc := t.TempDir()
	for pid := 100; pid < 140; pid++ {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, strconv.Itoa(pid), "fd"), 0o755))
	}
	read := 0
	_, err := blockdev.ScanWithHook(timerNotFired{context.Background()}, proc,
		[]blockdev.DevNum{{Major: 4000, Minor: 1}}, func(string) { read++ })
	assert.Zero(t, read, "processes read past the scan's deadline")
	var cut *blockdev.CutError
	require.True(t, errors.As(err, &cut), "the scan says what it did not read: %v", err)
	assert.Len(t, cut.Unread, 40)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}
