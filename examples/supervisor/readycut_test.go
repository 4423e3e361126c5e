//go:build linux

package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pipenet"
)

// Fault: when /readyz's own limit on the server's listing (readyTimeout, 2 s) cut it,
// the 503's body and the Warn said only "no answer before its context ended: ...
// context deadline exceeded": the operator reading why the pod is not Ready could not
// tell that limit from the server's, a proxy's or the probe's. The limit is now the
// cut's cause, named where the error says what ended the request (httpsource's
// endedBy). In virtual time, AgentENV's double over HTTP, its listing taking 5 s:
//
//	before: 503 at 2 s, "its context ended", no word of /readyz's limit
//	now:    503 at 2 s, naming /readyz's 2s limit, in the body and the Warn
func TestReadinessNamesItsLimitWhenItCutsTheListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sup, logs, slow := behindSlowListings(t, 1, 5*time.Second)

		start := time.Now()
		rec := httptest.NewRecorder()
		sup.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))

		assert.Equal(t, readyTimeout, time.Since(start))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		body := rec.Body.String()
		assert.Contains(t, body, "/readyz's 2s limit", "the limit that cut the listing")
		assert.NotContains(t, body, "its context ended:", "said without what ended it")
		warns := linesAt(logs.String(), "WARN")
		require.Len(t, warns, 1, logs.String())
		assert.Contains(t, warns[0], "/readyz's 2s limit")
		// The server ends the listing it was answering.
		require.NoError(t, slow.Shutdown(context.Background()))
	})
}

// behindSlowListings returns a supervisor (-api agentenv) in front of
// AgentENV's double with n sandboxes, over HTTP in memory, whose every
// listing page answers after listing (a disk busy with snapshots), with
// the buffer of its log; and that server, for the test to shut down once
// the listings it answers are over.
func behindSlowListings(t *testing.T, n int, listing time.Duration) (*supervisor, *logbuf.Buffer, *http.Server) {
	t.Helper()
	srv, _ := agentenvDouble(t, n, fakeagentenv.Config{})
	api := srv.Handler()
	slow := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			time.Sleep(listing)
		}
		api.ServeHTTP(w, r)
	})}
	ln := pipenet.Listen("agentenv.test")
	go func() { _ = slow.Serve(ln) }()
	cfg, err := parseArgs([]string{"-api", "agentenv", "-server-url", "http://agentenv.test", "--", "server"}, io.Discard)
	require.NoError(t, err)
	cfg.apiKey, cfg.client = "k", &http.Client{Transport: &http.Transport{DialContext: ln.Dial}}
	logs := new(logbuf.Buffer)
	sup, err := newSupervisor(cfg, logs)
	require.NoError(t, err)
	t.Cleanup(func() { sup.learned.Close() })
	return sup, logs, slow
}
