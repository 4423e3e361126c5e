package httpsource

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// Fault: a pause the server answered 202 Accepted, which no listing showed
// done before its context ended, was forgotten: the Source cleared the
// sandbox's failed pauses at the 202, so a gone answer to its next pause
// (the final sweep's) was taken for a deletion, the sandbox Vanished. But
// the server had that pause and went on with it, and a server that
// removes a sandbox whose pause failed (AgentENV does; a 202 server may)
// has lost it: as after a pause that got no answer, that gone answer is
// counted lost. In virtual time, over a real HTTP/1.1 exchange in memory:
//
//	0 s    pause a: 202, and a listed running at every poll
//	2 s    its context ends: "answered 202 Accepted, still listed running"
//	3 s    the server's pause of a fails; it removes a
//	4 s    the sweep's pause of a: 404
//	       before: gone (Vanished); now lost, naming the 202
func TestGoneAfterAnAcceptedPauseNeverConfirmedIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		listed := true
		mux := http.NewServeMux()
		mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			out := []map[string]string{}
			if listed {
				out = append(out, map[string]string{"id": "a", "state": "running"})
			}
			_ = json.NewEncoder(w).Encode(out)
		})
		mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if !listed {
				http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
				return
			}
			w.WriteHeader(http.StatusAccepted)
		})
		src := sourceInMemory(t, &http.Server{Handler: mux}, &http.Transport{}, Config{})

		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := src.Sandbox("a").Preserve(ctx)
		cancel()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "still listed running", "accepted, never shown done")

		time.Sleep(time.Second)
		mu.Lock()
		listed = false // its pause failed: the server removed it
		mu.Unlock()
		time.Sleep(time.Second)
		err = src.Sandbox("a").Preserve(ctxWithDeadline(t, time.Minute))
		require.Error(t, err)
		assert.NotErrorIs(t, err, pause.ErrGone, "the server had a pause of it, which may have failed")
		assert.True(t, isPermanent(err), "lost")
		assert.Contains(t, err.Error(), "202 Accepted")
	})
}
