package draingrpc

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// Fault: a learning of grpc's key that failed was said only in the detail
// of each Step whose grpc Stop was held, in the Report, after the drain:
// the logs never said it, not when it failed (the process's first RPC)
// nor once, so an operator did not learn that a held Stop would tell its
// RPCs apart by the socket tables, nor why, nor what to do.
//
//	every server           a stats handler whose context keeps grpc's in a field of no context type
//	a (tcp)                two RPCs: the first starts learning the key, which fails
//	the log                one WARN, as the learning ends: why, and what to do
//
// It runs in a process of its own: the key is learned once per process,
// and the option and the default logger are the process's.
func TestALearningThatFailedIsSaidOnceInTheLog(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	logs := logToDefault(t)
	withGlobalServerOptions(t, grpc.StatsHandler(hidingStats{}))
	a := serve(t, &drain.Gate{}, "tcp")

	for range 2 {
		_, err := a.worker.EmptyCall(t.Context(), &testgrpc.Empty{})
		require.NoError(t, err)
	}
	awaitLearningEnd(t)
	require.Nil(t, serverKey(), "the stats handler's context hid grpc's key")

	warned := linesWith(logs.String(), "level=WARN")
	require.Len(t, warned, 1, "said once, as the learning ended:\n%s", logs.String())
	assert.Contains(t, warned[0], "socket tables")
	assert.Contains(t, warned[0], "grpc.ConnectionTimeout")
	assert.Contains(t, warned[0], "a field of no context type")
	assert.Contains(t, warned[0], "this binary's: v", "the grpc-go this binary runs")
}

// logToDefault makes slog's default logger, the one draingrpc says the learning's end
// in, write text into the Buffer it returns until the test ends.
func logToDefault(t *testing.T) *logbuf.Buffer {
	t.Helper()
	var logs logbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &logs
}

// linesWith returns the lines of logs that hold s.
func linesWith(logs, s string) []string {
	var lines []string
	for l := range strings.Lines(logs) {
		if strings.Contains(l, s) {
			lines = append(lines, l)
		}
	}
	return lines
}

// hidingStats is a stats handler whose TagRPC gives each RPC a hidingRPC.
type hidingStats struct{ ignoreStats }

func (hidingStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return hidingRPC{parent: ctx}
}

// hidingRPC is a context that keeps its parent in a field of no context
// type, which the learner's walk does not follow (row 3160).
type hidingRPC struct{ parent any }

func (c hidingRPC) ctx() context.Context        { return c.parent.(context.Context) }
func (c hidingRPC) Deadline() (time.Time, bool) { return c.ctx().Deadline() }
func (c hidingRPC) Done() <-chan struct{}       { return c.ctx().Done() }
func (c hidingRPC) Err() error                  { return c.ctx().Err() }
func (c hidingRPC) Value(k any) any             { return c.ctx().Value(k) }
