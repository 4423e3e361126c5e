//go:build linux

package main

import (
	"io"
	"net/http"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
)

// Fault: drainkit's server in drainsim is sandboxd's (server.Main), run as a pod's
// container runs it, PID 1 of its PID namespace (kubeletsim), but without what sandboxd's
// main puts in front of it, its built-in init (pid1.Init): `runsc checkpoint` leaves
// gVisor's processes re-parented to PID 1, and server.Main, which waits only for the
// runsc commands it started, reaped none of them. A real gVisor sandbox, paused:
//
//	before: 4 zombies (runsc's "exe") in the server's namespace, there until it exits
//	now:    none: the init reaps them, as sandboxd's does
func TestDrainkitsServerReapsWhatRunscLeavesToPID1(t *testing.T) {
	if err := kubeletsim.PIDNamespace(); err != nil {
		realpart.Missing(t, err.Error())
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		realpart.Missing(t, "runsc not found in PATH (apt-get install runsc)")
	}
	opts, err := parseFlags([]string{"-runtime", "runsc", "-n", "1"}, io.Discard)
	require.NoError(t, err)
	nd, err := startNode(t.Context(), opts, modeDrainkit, "", opts.N, io.Discard)
	require.NoError(t, err)
	t.Cleanup(nd.close)
	require.True(t, nd.child.PID1(), "the server is its namespace's PID 1")
	for id := range nd.created {
		resp, err := http.Post(nd.base+"/sandboxes/"+id+"/pause", "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "paused: a real runsc checkpoint")
	}
	pid1test.NoZombies(t, nd.child.Cmd.Process.Pid)
}
