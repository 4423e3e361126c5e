package httpsource

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// acceptingServer is a generic-shape server whose pause answers 202
// Accepted, "accepted for processing, not completed" (RFC 9110, section
// 15.3.3), and pauses the sandbox afterwards: at the listing pausedAt
// after the 202 (counting from 1), never when pausedAt is 0.
type acceptingServer struct {
	mu       sync.Mutex
	state    string
	accepted bool
	lists    int // listings since the 202
	pausedAt int
}

func (a *acceptingServer) start(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.accepted {
			a.lists++
			if a.lists == a.pausedAt {
				a.state = "paused"
			}
		}
		_ = json.NewEncoder(w).Encode([]map[string]string{{"id": "sb-1", "state": a.state}})
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.accepted = true
		w.WriteHeader(http.StatusAccepted)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (a *acceptingServer) State() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// A 202 to a pause is the server's word that it has begun, not that the
// sandbox is paused: it is preserved once the listing no longer shows it
// running, and Failed if it still does when its time ends. It was taken
// for preserved at the 202: the Report counted a sandbox preserved that
// the server still ran, and that its SIGTERM then ended.
func TestPauseAcceptedButNotDoneIsPreservedOnlyOnceNotListedRunning(t *testing.T) {
	t.Run("paused later", func(t *testing.T) {
		a := &acceptingServer{state: "running", pausedAt: 3}
		src, err := New(a.start(t), Config{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		require.NoError(t, src.Sandbox("sb-1").Preserve(ctx))
		assert.Equal(t, "paused", a.State(), "Preserve returned nil only once the server listed it paused")
	})
	t.Run("never paused", func(t *testing.T) {
		a := &acceptingServer{state: "running"}
		src, err := New(a.start(t), Config{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		err = src.Sandbox("sb-1").Preserve(ctx)
		require.Error(t, err, "still listed running when its time ended: not preserved")
		assert.Contains(t, err.Error(), "202 Accepted")
		assert.Contains(t, err.Error(), "still listed running")
	})
}
