package lastreporttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FillUp writes the new file path until its file system has no space left; any other
// error fails the test.
func FillUp(t testing.TB, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s up: %v", path, err)
			}
			return
		}
	}
}

// A Server is a server process under test (a kubeletsim.Child).
type Server interface {
	Signal(os.Signal) error
	Exited() <-chan struct{}
	Err() error
}

// DrainOnAFullFileSystem sends s SIGTERM, as the kubelet does, waits for its exit and
// checks what a server that writes its Report with internal/lastreport promises when the
// Report's file system is full (docs/faults.md rows 1115, 1119): with no sandbox lost,
// this drain's Report is written where the earlier one (its Start at earlier) was and the
// server exits 0; with lost sandboxes, this larger Report does not fit, the file holds
// this drain's account as it stood, unfinished (lastreport.Progress.Finish, row 1611),
// not the earlier Report, the termination message msg says why, exit 1. It returns the
// termination message, for what each server says beside.
func DrainOnAFullFileSystem(t testing.TB, s Server, stderr fmt.Stringer, report, msg, earlier string, lost int) string {
	t.Helper()
	require.NoError(t, s.Signal(syscall.SIGTERM))
	select {
	case <-s.Exited():
	case <-time.After(30 * time.Second):
		t.Fatalf("the server did not exit: %s", stderr)
	}
	data, err := os.ReadFile(msg)
	require.NoError(t, err)
	if lost == 0 {
		require.NoError(t, s.Err(), "%s", stderr)
		var rep struct{ Start time.Time }
		written, err := os.ReadFile(report)
		require.NoError(t, err, "this drain's Report, where the earlier one was")
		require.NoError(t, json.Unmarshal(written, &rep))
		assert.NotEqual(t, earlier, rep.Start.Format(time.RFC3339), "this drain's, not the earlier one")
		assert.Contains(t, string(data), "full report: "+report)
		// The earlier Report's space taken by this drain's account at its start, or by the
		// Report when the drain ended before the account was written (row 1612).
		assert.Regexp(t, `(this drain's account|the Report) written in the space of an earlier shutdown's`, stderr.String())
		return string(data)
	}
	var exit *exec.ExitError
	require.ErrorAs(t, s.Err(), &exit, "%s", stderr)
	assert.Equal(t, 1, exit.ExitCode(), "%s", stderr)
	written, err := os.ReadFile(report)
	require.NoError(t, err, "this drain's account as it stood, removed")
	var acc struct{ Start time.Time }
	require.NoError(t, json.Unmarshal(written, &acc))
	assert.NotEqual(t, earlier, acc.Start.Format(time.RFC3339), "an earlier shutdown's Report, taken for this one's")
	assert.False(t, Finished(report), "this drain's account, unfinished: %s", written)
	assert.Contains(t, string(data), "the full report could not be written: ")
	assert.Contains(t, string(data), "no space left on device")
	return string(data)
}

// Finished reports whether path holds a finished drain's Report: a file with no
// "unfinished" member, at its top or in its "drain" (the supervisor's), which the
// account of a drain still running has (lastreport.Progress). A test that waited for
// the file to exist, as the sign that the drain had ended, waits for this.
func Finished(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	type account struct {
		Unfinished json.RawMessage `json:"unfinished"`
	}
	var acc struct {
		account
		Drain *account `json:"drain"`
	}
	return json.Unmarshal(data, &acc) == nil && acc.Unfinished == nil && (acc.Drain == nil || acc.Drain.Unfinished == nil)
}

// An Account is what the account of a drain cut short says of itself: its start and
// its "unfinished" member (lastreport.Unfinished, in part: lastreport's own tests import
// this package).
type Account struct {
	Start      time.Time
	Unfinished *struct {
		At      time.Time
		Phase   string // the phase running when it was last written
		Counted int    // the sandboxes the drain's count saw running then
	}
}

// ThisDrains reads the account that a SIGKILL mid-drain left at path, in its member
// ("" for the file's top; the supervisor's is "drain"), checks that it is this drain's,
// begun no earlier than a second before sigterm (an earlier drain's Report is not), and
// unfinished, and returns it.
func ThisDrains(t testing.TB, path, member string, sigterm time.Time) Account {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err, "this drain's account")
	var acc Account
	if member == "" {
		require.NoError(t, json.Unmarshal(data, &acc), "%s", data)
	} else {
		var in map[string]*Account
		require.NoError(t, json.Unmarshal(data, &in), "%s", data)
		require.NotNil(t, in[member], "this drain's account, in %q: %s", member, data)
		acc = *in[member]
	}
	assert.False(t, acc.Start.Before(sigterm.Add(-time.Second)), "this drain's start, not an earlier drain's Report: %s", data)
	require.NotNil(t, acc.Unfinished, "the account says the drain did not finish: %s", data)
	return acc
}

// KilledMidPreserve sends s SIGTERM, as the kubelet does, waits until preserved reports
// that some sandboxes were preserved (the server's records), then SIGKILLs it, as the
// kubelet's orphan cleanup or the OOM killer would, and checks the account it left at
// report (rows 1510, 1512): this drain's (ThisDrains), not the earlier drain's Report
// (its Start at earlier), unfinished in the preserve phase with counted sandboxes seen.
func KilledMidPreserve(t testing.TB, s Server, stderr fmt.Stringer, report, earlier string, counted int, preserved func() bool) {
	t.Helper()
	sigterm := time.Now()
	require.NoError(t, s.Signal(syscall.SIGTERM))
	require.Eventually(t, preserved, 20*time.Second, 5*time.Millisecond, "no sandbox preserved: %s", stderr)
	require.NoError(t, s.Signal(syscall.SIGKILL))
	<-s.Exited()

	acc := ThisDrains(t, report, "", sigterm)
	assert.NotEqual(t, earlier, acc.Start.Format(time.RFC3339), "the earlier drain's Report, taken for this one's")
	assert.Equal(t, "preserve", acc.Unfinished.Phase)
	assert.Equal(t, counted, acc.Unfinished.Counted)
}
