//go:build linux

package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// Fault: /readyz answered 503 with the listing's error in its body for every failure
// of the server's listing, but logged only a refused key (401, 403: row 230). The
// kubelet keeps no body of a failed HTTP probe ("HTTP probe failed with statuscode:
// 503"), so an AgentENV whose listing failed (a 500 with its error body: its RocksDB
// unreadable), a -server-url on the wrong port (connection refused) or an API shape
// the server does not speak showed as a pod that never turned Ready, with no word in
// any log or Event of why. A listing that fails is now logged at Warn once per failure
// until one succeeds, then its return at Info. On loopback, AgentENV's double whose
// listing answers 500, probed three times, then healed:
//
//	before: 503 three times, no log line
//	now:    503 three times, one Warn naming the 500 and its body; 200, one Info
func TestReadinessSaysWhyTheListingFails(t *testing.T) {
	srv, _ := agentenvDouble(t, 1, fakeagentenv.Config{})
	var broken atomic.Bool
	broken.Store(true)
	api := agentenvFailing(t, srv, func(r *http.Request) bool { return broken.Load() && r.Method == http.MethodGet },
		"state store: IO error: No space left on device")
	var logs logbuf.Buffer
	readyz := readinessOf(t, []string{"-api", "agentenv", "-server-url", api.URL}, "k", &logs)

	for range 3 { // the kubelet's probes
		code, body := readyz()
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Contains(t, body, "500 Internal Server Error")
	}
	warns := linesAt(logs.String(), "WARN")
	require.Len(t, warns, 1, "one Warn for three probes failed alike:\n%s", logs.String())
	assert.Contains(t, warns[0], "not ready")
	assert.Contains(t, warns[0], "500 Internal Server Error")
	assert.Contains(t, warns[0], "No space left on device", "the server's own words")

	broken.Store(false)
	for range 2 {
		code, body := readyz()
		assert.Equal(t, http.StatusOK, code, body)
	}
	out := logs.String()
	assert.Len(t, linesAt(out, "INFO"), 1, "its return, once:\n%s", out)
	assert.Contains(t, linesAt(out, "INFO")[0], "failures=3")
	assert.Len(t, linesAt(out, "WARN"), 1, "nothing more at Warn:\n%s", out)
}

// agentenvFailing serves srv, AgentENV's double, on loopback, but answers
// every request fails picks 500 with AgentENV's error body, its message
// msg, as AgentENV answers an error of its own.
func agentenvFailing(t *testing.T, srv *fakeagentenv.Server, fails func(*http.Request) bool, msg string) *httptest.Server {
	t.Helper()
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fails(r) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"code":500,"message":%q}`, msg)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// readinessOf makes the supervisor of the flags args (with the API key key
// when they give none), logging to logs, and returns a probe of its
// /readyz: the status and the body.
func readinessOf(t *testing.T, args []string, key string, logs io.Writer) func() (int, string) {
	t.Helper()
	cfg, err := parseArgs(append(args, "--", "server"), io.Discard)
	require.NoError(t, err)
	cfg.apiKey = key
	sup, err := newSupervisor(cfg, logs)
	require.NoError(t, err)
	t.Cleanup(sup.learned.Close)
	return func() (int, string) {
		rec := httptest.NewRecorder()
		sup.routes().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
}

// linesAt returns the log lines of out at level.
func linesAt(out, level string) []string {
	var lines []string
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "time=") && strings.Contains(line, " level="+level+" ") {
			lines = append(lines, line)
		}
	}
	return lines
}
