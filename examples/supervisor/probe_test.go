//go:build linux

package main

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
)

// Fault: every manifest's readiness probe kept Kubernetes' timeout of 1 s
// (timeoutSeconds unset), while /readyz lists the server's sandboxes for up
// to readyTimeout (2 s) before it answers 503 with the listing's error. A
// listing between the two (a server paging through many sandboxes, a disk
// busy with snapshots; with -api agentenv two listings, the unfiltered one
// and state=paused) was a probe failure the supervisor never saw: the
// kubelet cut the request at 1 s, and at failureThreshold 1 (the
// manifests') the pod went NotReady while /readyz, a moment later, said
// 200 to a closed connection, no line in its log. The probes now wait
// longer than /readyz does, so what the kubelet records is /readyz's own
// answer. In virtual time, a generic server whose listing takes 1.5 s,
// probed as the kubelet does with each manifest's timeout:
//
//	before: the probe cut at 1 s, no answer (5 manifests)
//	now:    200 at 1.5 s
func TestReadinessProbesWaitForTheListingReadyzWaitsFor(t *testing.T) {
	for where, spec := range userManifests(t) {
		t.Run(where, func(t *testing.T) {
			c := supervisorContainer(t, spec.Containers)
			require.NotNil(t, c.ReadinessProbe)
			timeout := probeTimeout(c.ReadinessProbe)
			assert.Greater(t, timeout, readyTimeout, "the readiness probe's timeoutSeconds is more than /readyz's listing may take")
			synctest.Test(t, func(t *testing.T) {
				code, err := probeReadyz(t, timeout, 1500*time.Millisecond)
				require.NoError(t, err, "the probe (timeout %v) got /readyz's answer", timeout)
				assert.Equal(t, http.StatusOK, code)
			})
		})
	}
}

// probeTimeout is the timeout the kubelet gives probe: its timeoutSeconds,
// 1 s when unset.
func probeTimeout(probe *corev1.Probe) time.Duration {
	return time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second
}

// probeReadyz asks the supervisor's /readyz, in front of a generic server
// whose listing takes listing, as the kubelet's probe does with timeout,
// and returns the status it got.
func probeReadyz(t *testing.T, timeout, listing time.Duration) (int, error) {
	t.Helper()
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(listing)
		_, _ = io.WriteString(w, `[{"id":"s1","state":"running"}]`)
	})
	cfg, err := parseArgs([]string{"-server-url", "http://server.test", "--", "server"}, io.Discard)
	require.NoError(t, err)
	cfg.client = &http.Client{Transport: handlerTransport{slow}}
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	defer sup.learned.Close()
	probe := &http.Client{Timeout: timeout, Transport: handlerTransport{sup.routes()}}
	resp, err := probe.Get("http://supervisor.test/readyz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// Fault: with -api agentenv, /readyz (and the preStop wait's and the plan's count,
// through the same listing) listed the server's sandboxes three times, one after the
// other, within readyTimeout: the unfiltered listing, state=paused, and the unfiltered
// listing again for the ones AgentENV shows paused (being paused, snapshotted or
// forked), whose only use there is a pause's handling of a sandbox in transition, or a
// listing of the paused ones that failed; a count sends no pause. An AgentENV whose
// listing takes 0.7 s (many sandboxes, a disk busy with snapshots) answers each well
// within the 2 s /readyz promises, and /readyz answered 503 all the same, at 2 s, the
// pod NotReady at the overlay's failureThreshold 1. The count now lists the ones shown
// paused only when the listing of the paused ones failed. In virtual time, AgentENV's
// double, every listing 0.7 s:
//
//	before: 3 listings, 503 at 2 s (the third cut)
//	now:    2 listings, 200 at 1.4 s
func TestReadinessInFrontOfAgentENVListsTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := agentenvDouble(t, 3, fakeagentenv.Config{})
		var lists atomic.Int32
		sup := slowAgentENV(t, srv.Handler(), func(*http.Request) { lists.Add(1) })
		probe := &http.Client{Timeout: 3 * time.Second, Transport: handlerTransport{sup.routes()}}
		start := time.Now()
		resp, err := probe.Get("http://supervisor.test/readyz")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		assert.Equal(t, int32(2), lists.Load(), "every sandbox, then the paused ones")
		assert.Equal(t, 1400*time.Millisecond, time.Since(start))
		ids, _ := sup.counted.lastListed()
		assert.Len(t, ids, 3, "the listing kept for a server that exits on its own")
	})
}

// Fault: in front of AgentENV the final sweep's listing (notPaused.List, each pass of
// the sweep's Run) fetched the unfiltered listing twice: once for every sandbox, and
// again, after state=paused, for the ones AgentENV shows paused (being paused,
// snapshotted or forked), which only mark the sandboxes in transition. The second
// carries nothing the first did not: the state of each element. The sweep now reads
// it from the first (internal/listedstate, without an exported name in httpsource).
// In virtual time, AgentENV's double, 3 sandboxes (one paused, one snapshotting),
// every listing 0.7 s:
//
//	before: 3 listings, 2.1 s of the server step's time per sweep listing
//	now:    2 listings, 1.4 s; the same sandboxes, the snapshotting one in transition
func TestSweepInFrontOfAgentENVListsTheUnfilteredListingOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids := agentenvDouble(t, 3, fakeagentenv.Config{})
		running, paused, snapshotting := ids[0], ids[1], ids[2]
		h := srv.Handler()
		pauseReq, err := http.NewRequest(http.MethodPost, "http://agentenv.test/sandboxes/"+paused+"/pause", nil)
		require.NoError(t, err)
		pauseReq.Header.Set("X-API-Key", "k")
		resp, err := (&http.Client{Transport: handlerTransport{h}}).Do(pauseReq)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		done, err := srv.Snapshot(snapshotting)
		require.NoError(t, err)
		defer done()

		var lists []string
		sup := slowAgentENV(t, h, func(r *http.Request) { lists = append(lists, r.URL.RequestURI()) })
		start := time.Now()
		sbs, err := sup.sweepList.List(t.Context())
		require.NoError(t, err)
		assert.Equal(t, 1400*time.Millisecond, time.Since(start))
		assert.Equal(t, []string{"/v2/sandboxes", "/v2/sandboxes?state=paused"}, lists, "every sandbox, then the paused ones")
		transition := map[string]bool{}
		for _, sb := range sbs {
			if s, ok := sb.(*sizedSandbox); ok {
				sb = s.Sandbox
			}
			_, transition[sb.ID()] = sb.(inTransition)
		}
		assert.Equal(t, map[string]bool{running: false, snapshotting: true}, transition)
	})
}

// slowAgentENV returns a supervisor (-api agentenv, no daemon) in front of
// h, AgentENV's double, whose every listing (a GET) is passed to seen and
// takes 0.7 s of virtual time.
func slowAgentENV(t *testing.T, h http.Handler, seen func(*http.Request)) *supervisor {
	t.Helper()
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			seen(r)
			time.Sleep(700 * time.Millisecond)
		}
		h.ServeHTTP(w, r)
	})
	cfg, err := parseArgs([]string{"-api", "agentenv", "-server-url", "http://agentenv.test", "--", "server"}, io.Discard)
	require.NoError(t, err)
	cfg.apiKey, cfg.client = "k", &http.Client{Transport: handlerTransport{slow}}
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	t.Cleanup(func() { sup.learned.Close() })
	return sup
}
