//go:build linux

package main

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause/httpsource"
)

// Fault: in front of AgentENV the supervisor's listing (notPaused: the final sweep's
// passes, stillRunning's check, /readyz, the preStop wait's count) is two requests,
// the unfiltered listing and then state=paused. When a page of the unfiltered one
// after the first was answered 429, or 503 with a Retry-After (a proxy in front of
// AgentENV, which sends neither itself), the state=paused request went out at once,
// to a server that had just said when to ask again; the supervisor promises that a
// listing answered so is made again at the time it names, not sooner. The second
// request is now not sent: the listing gives what the first listed running, its
// error the answer's RetryAt. In virtual time, page 2 of the unfiltered listing answers
// 503 "Retry-After: 2":
//
//	before: 1 state=paused request, sent milliseconds after the 503
//	now:    none before the time the 503 named
func TestAgentENVListingSendsNoPausedListingBeforeTheRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var retryAt time.Time
		var pausedAsked []time.Time
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			q := r.URL.Query()
			switch {
			case q.Get("state") == "paused":
				pausedAsked = append(pausedAsked, time.Now())
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `[]`)
			case q.Has("nextToken"):
				retryAt = time.Now().Add(2 * time.Second)
				w.Header().Set("Retry-After", "2")
				http.Error(w, `{"message":"upstream busy"}`, http.StatusServiceUnavailable)
			default:
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("x-next-token", "page-2")
				_, _ = io.WriteString(w, `[{"sandboxID":"sb-running","state":"running","memoryMB":1024},`+
					`{"sandboxID":"sb-shown-paused","state":"paused","memoryMB":1024}]`)
			}
		})
		cfg := httpsource.AgentENV()
		cfg.Client = &http.Client{Transport: handlerTransport{h}}
		src, err := httpsource.New("http://agentenv.test", cfg)
		require.NoError(t, err)
		np, err := newNotPaused(src, "http://agentenv.test", cfg)
		require.NoError(t, err)
		defer np.closeIdleConnections()

		sbs, err := np.List(t.Context())

		mu.Lock()
		defer mu.Unlock()
		require.False(t, retryAt.IsZero(), "page 2 was asked for")
		var tooSoon []time.Time
		for _, at := range pausedAsked {
			if at.Before(retryAt) {
				tooSoon = append(tooSoon, at)
			}
		}
		assert.Empty(t, tooSoon, "state=paused requests before the Retry-After's time %s", retryAt)
		require.Error(t, err)
		var ra interface{ RetryAt() time.Time }
		require.ErrorAs(t, err, &ra, "the listing's error says when to list again")
		assert.Equal(t, retryAt, ra.RetryAt(), "the time the 503 named")
		assert.Contains(t, err.Error(), "503")
		assert.Contains(t, err.Error(), "listing the paused sandboxes: not sent")
		assert.Equal(t, []string{"sb-running"}, sandboxIDs(sbs), "the one shown running; the one shown paused is not known in transition")
	})
}
