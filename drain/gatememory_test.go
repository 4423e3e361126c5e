package drain

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/gaterefusals"
	"github.com/drainkit/drainkit/pause"
)

// perSandbox is a classify that makes a class of each path, as
// TestTheAccountOfRefusalsIsBounded has it: "resume" of each sandbox its
// own class.
func perSandbox(r *http.Request) Class { return Class("resume " + r.URL.Path) }

// resumeEach sends a resume of n sandboxes, each its own path, to srv on
// one keep-alive connection, and returns the status codes it got, by code.
func resumeEach(t *testing.T, srv *httptest.Server, n int) map[int]int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	codes := map[int]int{}
	for i := range n {
		resp, err := client.Post(fmt.Sprintf("%s/sandboxes/sb-%05d/resume", srv.URL, i), "application/json", nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	return codes
}

// Fault (a review of the gate): the gate kept an entry for every class it
// had ever admitted, its count at zero once the operation left: with a
// classify that makes a class of each path (a resume of each sandbox, by
// its ID), the map grew with every sandbox the node ever served, for the
// process's life, and Shutdown's waits walked all of it under the gate's
// lock. Measured with 100000 resumes of distinct sandboxes through Enter:
// the heap kept 5.6 MiB after them (100000 entries) before, nothing after.
// On loopback, through the middleware: every resume admitted and answered,
// then no class left in the gate.
func TestTheGateForgetsTheClassOfAnOperationThatLeft(t *testing.T) {
	g := &Gate{}
	srv := httptest.NewServer(g.Middleware(perSandbox)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "resumed")
	})))
	defer srv.Close()

	assert.Equal(t, map[int]int{http.StatusOK: 500}, resumeEach(t, srv, 500))

	g.mu.Lock()
	kept := len(g.inflight)
	g.mu.Unlock()
	assert.Zero(t, kept, "classes kept for operations that all left")
	assert.Zero(t, g.InFlight(perSandbox(httptest.NewRequest("POST", "/sandboxes/sb-00001/resume", nil))))
	require.NoError(t, g.Wait(context.Background()))
}

// Fault (a review of the gate): the metric of the gate's refusals,
// drainkit.drain.gate.rejections, took each refusal's class as it came,
// where the Report's account keeps 32 kinds and counts the rest under
// "other" (row 1015) for a classify that makes a class of each path: a
// client retrying resumes of its sandboxes during the drain made a series
// of each sandbox, counted from then until the process ends and exported
// at every scrape. On loopback, through the middleware, 200 resumes of
// distinct sandboxes refused: 200 series before (5000 refusals: 2000, the
// OpenTelemetry SDK's cap, its overflow series with them), 33 after (the
// account's 32 classes and "other"), the counts adding up to the 200
// refusals as before.
func TestTheMetricOfRefusalsKeepsTheAccountsClasses(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	g := &Gate{}
	budget, err := deadline.New(30*time.Second, deadline.Config{})
	require.NoError(t, err)
	_, err = New(Config{Budget: budget, Gate: g, MeterProvider: mp,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })})
	require.NoError(t, err)
	srv := httptest.NewServer(g.Middleware(perSandbox)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a resume admitted while the node drains")
	})))
	defer srv.Close()

	g.Close() // the preStop call
	const n = 200
	assert.Equal(t, map[int]int{http.StatusServiceUnavailable: n}, resumeEach(t, srv, n))

	sum, ok := collect(t, reader)[metricRejections].Data.(metricdata.Sum[int64])
	require.True(t, ok)
	byClass := map[string]int64{}
	var total int64
	for _, dp := range sum.DataPoints {
		c, _ := dp.Attributes.Value(attrClass)
		byClass[c.AsString()] += dp.Value
		total += dp.Value
	}
	assert.Equal(t, gaterefusals.MaxKinds+1, len(byClass), "one series of each class the account keeps, and other")
	assert.Equal(t, int64(n-gaterefusals.MaxKinds), byClass[string(refusedOther)])
	assert.Equal(t, int64(n), total, "every refusal counted")
	r := g.refusals()
	assert.Equal(t, n, r.n)
	for c, v := range r.by[string(byHTTP)] {
		assert.Equal(t, int64(v), byClass[c], "the metric says what the Report's account says of %s", c)
	}
}
