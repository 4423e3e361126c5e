//go:build linux

package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/pipenet"
)

// Fault: a readiness probe whose timeout (the kubelet's timeoutSeconds, 1 s
// unless set) ends before the server's listing answers closes its
// connection, which cut the listing: the supervisor logged nothing (it
// skips a failure whose request ended), so a pod that never turned Ready
// had its reason in no line of its log, and the cut listing, past its
// first page, was recorded as the last listing, INCOMPLETE, its error
// "its context ended: context canceled": the note a server exiting on its
// own then gets. The probe's end is now the cut's cause, said at WARN once
// until a probe gets its answer, and such a listing is not recorded. In
// virtual time, AgentENV's double over HTTP with 150 sandboxes, pages of
// 100 taking 600 ms, the kubelet probing /readyz every 10 s with a 1 s
// timeout over HTTP:
//
//	0 s      the supervisor's listing has its first page (the last listing)
//	10 s     probe: page 1 at 10.6 s; at 11 s the probe gives up, page 2 cut
//	20, 30 s the same
//	before:  no line; the last listing INCOMPLETE, "context canceled"
//	now:     one WARN naming the probe; the last listing as it was, complete
func TestAReadinessProbeThatGivesUpIsSaidAndNotAFailedListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sup, logs, slow := behindSlowListings(t, 150, 600*time.Millisecond)
		_, err := sup.counted.RunningIDs(t.Context())
		require.NoError(t, err)
		listed, incomplete := sup.counted.lastListed()
		require.Len(t, listed, 150)
		require.Empty(t, incomplete)

		web := &http.Server{Handler: sup.routes()}
		webLn := pipenet.Listen("supervisor.test")
		go func() { _ = web.Serve(webLn) }()
		kubelet := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: webLn.Dial}}
		for range 3 {
			time.Sleep(10 * time.Second)
			_, err := kubelet.Get("http://supervisor.test/readyz")
			require.ErrorContains(t, err, "deadline exceeded", "the probe gave up")
			time.Sleep(2 * time.Second) // the cut listing returns
		}

		warns := linesAt(logs.String(), "WARN")
		if assert.Len(t, warns, 1, logs.String()) {
			assert.Contains(t, warns[0], "readiness probe gave up")
			assert.Contains(t, warns[0], "timeoutSeconds")
			assert.Contains(t, warns[0], "its context ended (the readiness probe gave up: its connection closed", "the cut's cause, in the error")
		}
		assert.NotContains(t, logs.String(), "listing failed", "no failure of the server's")
		listed, incomplete = sup.counted.lastListed()
		assert.Len(t, listed, 150)
		assert.Empty(t, incomplete, "a listing the probe cut says nothing of the server")
		assert.False(t, strings.Contains(logs.String(), "level=ERROR"), logs.String())
		require.NoError(t, web.Shutdown(context.Background()))
		require.NoError(t, slow.Shutdown(context.Background()))
	})
}
