package draingrpc

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// Fault (the gate review, rows 1010–1012): the work the gate refused during
// a drain was counted in the metric drainkit.drain.gate.rejections alone.
// An operator reading the drain's Report, its termination message or its
// log after a node drain could not tell whether users had been turned away,
// how many, by which way in (an HTTP create, a stream, a gRPC call), nor
// when: the gate phase's Detail was empty and the log line said nothing of
// it. The gate phase's Detail now counts them by way and class, with the
// first and the last refusal and the phase each came in, and the Report's
// log line says the same.
// Before: no detail, no "refused" in the log line; after: 3 refused, as
// the clients saw them.
func TestTheReportCountsTheWorkTheGateRefused(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	mux := http.NewServeMux()
	mux.Handle("POST /sandboxes", g.Admit(drain.Create, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "created")
	})))
	mux.Handle("GET /sandboxes/sb-1/logs", g.Admit(drain.Stream, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})))
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	defer web.Client().CloseIdleConnections()
	httpCode := func(method, path string) int {
		req, err := http.NewRequest(method, web.URL+path, strings.NewReader(`{"image":"base"}`))
		require.NoError(t, err)
		resp, err := web.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, httpCode("POST", "/sandboxes"), "admitted before the drain: not a refusal")

	var grpcErr error
	var streamCode int
	probe := drain.NewStep(deadline.Phase{Name: "probe", Reserve: deadline.Fixed(time.Second)}, func(ctx context.Context) (any, error) {
		_, grpcErr = s.worker.EmptyCall(ctx, &testgrpc.Empty{}) // a create over gRPC
		streamCode = httpCode("GET", "/sandboxes/sb-1/logs")    // a follow, after the preserve phase
		return nil, nil
	})
	budget, err := deadline.New(60*time.Second, deadline.Config{})
	require.NoError(t, err)
	var logs logbuf.Buffer
	d, err := drain.New(drain.Config{Budget: budget, Gate: g, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []drain.Step{probe, Step("grpc", s.srv, g, 5*time.Second)}})
	require.NoError(t, err)

	hook := httptest.NewRecorder()
	d.PreStop().ServeHTTP(hook, httptest.NewRequest("GET", "/drain?wait=0s", nil))
	require.Equal(t, http.StatusOK, hook.Code, hook.Body.String())
	require.Equal(t, http.StatusServiceUnavailable, httpCode("POST", "/sandboxes"), "a create in the drain phase")
	rep := d.Shutdown(context.Background())
	require.NoError(t, rep.Err())
	assert.Equal(t, codes.Unavailable, status.Code(grpcErr), "%v", grpcErr)
	assert.Equal(t, http.StatusServiceUnavailable, streamCode)

	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	var got struct {
		Phases []struct {
			Name   string
			Start  time.Time
			Detail struct {
				Refused    int                       `json:"refused"`
				By         map[string]map[string]int `json:"by"`
				First      time.Time                 `json:"first"`
				FirstPhase string                    `json:"first_phase"`
				Last       time.Time                 `json:"last"`
				LastPhase  string                    `json:"last_phase"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, drain.PhaseDrain, got.Phases[0].Name)
	require.Equal(t, drain.PhaseGate, got.Phases[1].Name)
	gate := got.Phases[1].Detail
	assert.Equal(t, 3, gate.Refused, "%s", raw)
	assert.Equal(t, map[string]map[string]int{"http": {"create": 1, "stream": 1}, "grpc": {"create": 1}}, gate.By)
	assert.Equal(t, drain.PhaseDrain, gate.FirstPhase, "the HTTP create came after the preStop call, before SIGTERM")
	assert.Equal(t, "probe", gate.LastPhase)
	assert.False(t, gate.First.Before(got.Phases[0].Start))
	assert.True(t, gate.Last.After(gate.First))
	assert.True(t, gate.First.Before(got.Phases[1].Start), "the first came before SIGTERM")

	line := finishedLine(t, logs.String())
	assert.Contains(t, line, "report.refused=3 ")
	assert.Contains(t, line, `report.refused_by="grpc create 1, http create 1, http stream 1"`)
	assert.Contains(t, line, "(drain)")
	assert.Contains(t, line, "(probe)")
}

// finishedLine is the drain's last log line, its Report, from logs.
func finishedLine(t *testing.T, logs string) string {
	t.Helper()
	for l := range strings.Lines(logs) {
		if strings.Contains(l, "drain: shutdown finished") {
			return l
		}
	}
	t.Fatalf("no 'shutdown finished' line in:\n%s", logs)
	return ""
}
