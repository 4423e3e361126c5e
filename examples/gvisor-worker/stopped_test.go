//go:build linux

package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
)

// A SIGTERM during the worker's start with nothing to checkpoint: the drain's grpc step
// can stop gRPC (GracefulStop) before the serving goroutine has called Serve, which then
// returns grpc.ErrServerStopped. The worker took that for serving that stopped on its own:
// an ERROR line, "serving gRPC stopped: draining now; the worker will exit 1", and exit 1
// after a clean drain. It is the drain's own stop.
func TestADrainThatStopsGRPCBeforeServeBeganIsClean(t *testing.T) {
	var logs logbuf.Buffer
	w, err := newWorker(fakeConfig(t), slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	serveHook = func(w *Worker) { <-w.drainer.Done() } // Serve begins once the drain is over
	t.Cleanup(func() { serveHook = func(*Worker) {} })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // as a SIGTERM that came while the worker started
	rep, err := w.serve(ctx)
	require.NoError(t, err, "%s", &logs)
	require.NoError(t, rep.Err())
	assert.NotContains(t, logs.String(), "level=ERROR")
}
