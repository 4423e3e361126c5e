//go:build linux

package startsigtest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/kubeletsim"
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

// SIGTERMAtFIFO sends proc SIGTERM while it waits to write fifo, a FIFO nobody reads yet
// (its termination message, or a file its exit is held at), waits until the signal is
// delivered, then reads fifo and returns what proc wrote there by the time exited (closed
// once proc has exited) is closed. A SIGTERM with its default action ends proc there,
// before it writes anything; a SIGTERM it keeps caught leaves it writing and exiting as
// it would have. It fails the test if proc does not exit within 30 s.
func SIGTERMAtFIFO(t *testing.T, proc *os.Process, fifo string, exited <-chan struct{}, stderr fmt.Stringer) []byte {
	t.Helper()
	require.NoError(t, proc.Signal(syscall.SIGTERM), "the kubelet's again, as the process writes")
	require.Eventually(t, func() bool { return !sigtermPending(proc.Pid) }, 10*time.Second, time.Millisecond,
		"the SIGTERM delivered")
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0) // never waits for a writer that is gone
	require.NoError(t, err)
	defer r.Close()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the process did not exit: %s", stderr)
	}
	data, err := io.ReadAll(r)
	require.NoError(t, err)
	return data
}

// SIGTERMAfterAFailedStart waits until stderr has the line failed (a start that failed,
// said before the server writes its termination message to fifo, a FIFO nobody reads
// yet), sends p SIGTERM there (SIGTERMAtFIFO), and checks that the signal did not end p
// and that p exited 1, the status of a start the machine refused (docs/faults.md rows
// 1112, 1116). It returns the termination message p wrote.
func SIGTERMAfterAFailedStart(t *testing.T, p *kubeletsim.Child, fifo, failed string, stderr fmt.Stringer) []byte {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), failed) }, 30*time.Second, 10*time.Millisecond,
		"the start did not fail with %q: %s", failed, stderr)
	data := SIGTERMAtFIFO(t, p.Cmd.Process, fifo, p.Exited(), stderr)
	var exit *exec.ExitError
	require.ErrorAs(t, p.Err(), &exit)
	require.False(t, exit.Sys().(syscall.WaitStatus).Signaled(), "ended by the SIGTERM: no message\n%s", stderr)
	assert.Equal(t, 1, exit.ExitCode(), "%s", stderr)
	return data
}

// sigtermPending reports whether a SIGTERM sent to process pid waits to be delivered (its
// bit in /proc/PID/status's ShdPnd); a process gone has none.
func sigtermPending(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "ShdPnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(syscall.SIGTERM-1)) != 0
		}
	}
	return false
}
