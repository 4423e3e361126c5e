//go:build linux

package startsigtest

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
)

// Hold, in the server's process, says that its start is held (it writes gate+".held")
// and waits until gate exists. It exits the process with status 1 if it cannot say so.
func Hold(gate string) {
	if err := os.WriteFile(gate+".held", nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "startsigtest:", err)
		os.Exit(1)
	}
	for {
		if _, err := os.Stat(gate); err == nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// SIGTERMWhileHeld waits until p's start is held at gate, sends p SIGTERM, and waits
// until p logs logLine to stderr; it fails the test if p exits instead (the SIGTERM's
// default action). Then it lets the start go on, and returns when it sent the signal and
// when it let the start go on.
func SIGTERMWhileHeld(t *testing.T, p *pid1test.Process, stderr fmt.Stringer, gate, logLine string) (sent, released time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := os.Stat(gate + ".held")
		return err == nil
	}, 30*time.Second, time.Millisecond, "the start was not held: %s", stderr)
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, while the server starts")
	sent = time.Now()
	require.Eventually(t, func() bool { return p.Exited() || strings.Contains(stderr.String(), logLine) },
		30*time.Second, time.Millisecond, "neither logged %q nor exited: %s", logLine, stderr)
	if p.Exited() {
		t.Fatalf("the server ended at the SIGTERM, while it started: %v: %s", p.Wait(t, time.Second, "no exit"), stderr)
	}
	released = time.Now()
	require.NoError(t, os.WriteFile(gate, nil, 0o600), "the start goes on")
	return sent, released
}

// CountedFromSIGTERM checks that the Report in reportFile counts its budget from the
// SIGTERM sent at sent, not from the start's end, released.
func CountedFromSIGTERM(t *testing.T, reportFile string, sent, released time.Time) {
	t.Helper()
	data, err := os.ReadFile(reportFile)
	require.NoError(t, err, "the Report is written")
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	assert.True(t, rep.Budget.Start.Before(released), "the budget counts from the SIGTERM (%v), not from the start's end (%v)",
		rep.Budget.Start, released)
	assert.WithinDuration(t, sent, rep.Budget.Start, 5*time.Second)
}
