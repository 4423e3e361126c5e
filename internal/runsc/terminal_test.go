//go:build linux

package runsc

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// terminalEnv makes the test binary run terminalMain: a caller of runsc that holds
// SIGINT, as the gvisor-worker does (a Ctrl-C drains it), in a terminal's session.
const terminalEnv = "DRAINKIT_RUNSC_TERMINAL"

// terminalMain holds SIGINT, touches dir/interrupted when one comes, and reports on its
// stdout the error of a runsc kill (a fake runsc in mode "gate:DIR": it touches
// DIR/ready, then waits for DIR/open).
func terminalMain(dir string) int {
	if err := os.Unsetenv(terminalEnv); err != nil { // its runsc is the fake alone
		return 1
	}
	ints := make(chan os.Signal, 1)
	signal.Notify(ints, os.Interrupt)
	go func() {
		<-ints
		_ = os.WriteFile(filepath.Join(dir, "interrupted"), nil, 0o600)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var res autoReapResult
	if err := (&Runtime{Binary: os.Args[0], Root: dir}).Kill(ctx, "sb", syscall.SIGTERM, false); err != nil {
		res.Err = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// fakeGate is the fake runsc of mode "gate:DIR": it says it runs (DIR/ready) and exits 0
// once DIR/open exists.
func fakeGate(dir string) int {
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600); err != nil {
		return 1
	}
	for !exists(filepath.Join(dir, "open")) {
		time.Sleep(5 * time.Millisecond)
	}
	return 0
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Fault (row 1310): runsc ran in its caller's process group, so a terminal's Ctrl-C
// (SIGINT to the foreground group: the README's `sudo go run` of the gvisor-worker)
// killed every runsc command in flight along with the worker it asked to drain: a
// runsc restore interrupted so ended with no container (measured with real runsc, at
// 50, 150, 300 and 600 ms), its Restore failed. Here a caller holding SIGINT runs a
// runsc kill in a session of its own, which gets SIGINT as a terminal sends it (kill
// -INT -PGID): the command runs to its end and succeeds.
func TestTerminalInterruptReachesTheCallerNotRunsc(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), terminalEnv+"="+dir, fakeEnv+"=gate:"+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // a terminal's session, its group the foreground one
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill() //nolint:errcheck // gone once it reported
	require.Eventually(t, func() bool { return exists(filepath.Join(dir, "ready")) }, time.Minute, 5*time.Millisecond,
		"runsc never started")

	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT), "Ctrl-C")
	require.Eventually(t, func() bool { return exists(filepath.Join(dir, "interrupted")) }, time.Minute, 5*time.Millisecond,
		"the caller never got the SIGINT")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "open"), nil, 0o600))
	require.NoError(t, cmd.Wait())

	var res autoReapResult
	require.NoError(t, json.Unmarshal([]byte(out.String()), &res), "%s", out.String())
	assert.Empty(t, res.Err, "runsc got the terminal's SIGINT")
}
