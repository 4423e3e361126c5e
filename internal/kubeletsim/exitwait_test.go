//go:build linux

package kubeletsim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The binary PIDNamespace's probe re-executes is the caller's, built with
// -race in every test of drainkit's: the probe ends once the namespace's
// /proc is mounted, not after the race detector's wait at a successful
// exit (GORACE's atexit_sleep_ms, 1 s where unset, as in the probe's own
// environment), which every first Start of a process waited for.
func TestThePIDNamespaceProbeEndsWithoutTheRaceDetectorsWaitAtExit(t *testing.T) {
	needsPIDNamespace(t)
	if !raceEnabled {
		t.Skip("the race detector's wait at exit is a -race binary's")
	}
	const atExit = time.Minute
	probe := probeCommand()
	probe.Env = append(probe.Env, fmt.Sprintf("GORACE=atexit_sleep_ms=%d", atExit.Milliseconds()))
	require.NoError(t, probe.Start())
	exited := make(chan error, 1)
	go func() { exited <- probe.Wait() }()
	select {
	case err := <-exited:
		assert.NoError(t, err)
	case <-time.After(atExit / 2):
		_ = probe.Process.Kill()
		<-exited
		t.Fatalf("the probe still running %v on, half the race detector's wait at exit", atExit/2)
	}
}
