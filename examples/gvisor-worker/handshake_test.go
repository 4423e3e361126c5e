//go:build linux

package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// A client connection still in its HTTP/2 handshake at shutdown (a client that connected
// and sent nothing, a probe that only connects, a peer frozen mid-preface) holds grpc's
// Stop, and its Serve, until grpc's connection timeout, 120 s: the grpc step leaves that
// Stop running at its deadline (draingrpc.Stop), but the worker's close called Stop again
// and then waited for Serve's result, so the worker, its Report written, did not exit
// (nor release the state directory's lock for the next worker) until the kubelet's
// SIGKILL. The process's exit ends such a connection: the worker exits after its Report.
// And the grpc step waited for it to its deadline, then left Stop running (docs/faults.md
// row 293): the worker's server now ends a handshake before that deadline.
func TestAConnectionInItsHandshakeDoesNotHoldTheExit(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "worker.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr logbuf.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- Main(ctx, []string{"-state-dir", dir, "-runtime", "fake", "-pause-latency", "10ms", "-grace", "4s"}, &stderr)
	}()
	waitSocket(t, sock, &stderr)
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	// The server's SETTINGS frame: it has accepted the connection and now waits for the
	// client's preface, which never comes.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	var h [9]byte
	_, err = io.ReadFull(c, h[:])
	require.NoError(t, err, "%s", &stderr)
	require.Equal(t, byte(4), h[3], "a SETTINGS frame")

	cancel() // as SIGTERM would
	select {
	case code := <-exit:
		assert.Equal(t, 0, code, "nothing was lost: %s", &stderr)
	case <-time.After(30 * time.Second): // the grace is 4 s; grpc's connection timeout 120 s
		t.Fatalf("the worker had not returned 30 s after its SIGTERM, a 4 s grace: %s", &stderr)
	}
	data, err := os.ReadFile(filepath.Join(dir, "last-shutdown.json"))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	step := rep.Phase("grpc")
	require.NotNil(t, step, "%s", data)
	// The worker's gRPC server times a handshake out before the grpc step's deadline
	// (grpc.ConnectionTimeout, as draingrpc.Stop advises): GracefulStop returns by itself,
	// and nothing is left running for the exit to end.
	assert.Equal(t, drain.OK, step.Result, "%s", data)
	assert.Nil(t, step.Detail, "grpc's Stop was left running: %s", data)
	assert.True(t, step.End.Before(step.Deadline), "the step took its whole reserve: %s", data)
	assert.NotContains(t, stderr.String(), "grpc's Stop had not returned")
}
