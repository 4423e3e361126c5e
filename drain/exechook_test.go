package drain

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExecHookPollsUntilTheServerSaysDone(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		assert.Equal(t, "900ms", r.URL.Query().Get("wait"), "asks for an answer within 90% of its timeout")
		assert.NotEmpty(t, r.URL.Query().Get("start"))
		_ = json.NewEncoder(w).Encode(PreStopSummary{Done: n == 3, Reason: ReasonDrained,
			DrainDeadline: time.Now().Add(time.Hour)})
	}))
	defer srv.Close()
	sum, err := ExecHook{URL: srv.URL, RequestTimeout: time.Second, Start: time.Now()}.Run(context.Background())
	require.NoError(t, err)
	assert.True(t, sum.Done)
	assert.Equal(t, int32(3), calls.Load())
}

func TestExecHookGivesUpAfterConsecutiveFailures(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	sum, err := ExecHook{URL: srv.URL, MaxFailures: 3, RetryInterval: time.Millisecond}.Run(context.Background())
	require.ErrorContains(t, err, "3 consecutive failures")
	assert.Nil(t, sum)
	assert.Equal(t, int32(3), calls.Load())
}

func TestExecHookNeverOutlivesTheDrainDeadline(t *testing.T) {
	dl := time.Now().Add(300 * time.Millisecond)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if time.Now().After(dl) {
			<-r.Context().Done() // a server that hangs after the deadline
			return
		}
		_ = json.NewEncoder(w).Encode(PreStopSummary{Reason: ReasonWaiting, DrainDeadline: dl})
	}))
	defer srv.Close()
	sum, err := ExecHook{URL: srv.URL, RequestTimeout: time.Minute, MaxFailures: 100}.Run(context.Background())
	require.ErrorContains(t, err, "drain deadline")
	require.NotNil(t, sum)
	assert.False(t, time.Now().Before(dl))
	assert.Less(t, time.Since(dl), 30*time.Second, "it stopped at the reported deadline, not after its minute-long request timeout")
}

// The exec hook against the real handler: it sends its start as T0.
func TestExecHookStartAnchorsTheBudget(t *testing.T) {
	f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 0, latency: time.Second})
	srv := httptest.NewServer(f.d.PreStop())
	defer srv.Close()
	start := time.Now().Add(-1500 * time.Millisecond) // the hook process started 1.5 s ago
	sum, err := ExecHook{URL: srv.URL, Start: start}.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, ReasonDrained, sum.Reason)
	assert.True(t, f.budget.Start().Equal(start.Round(0)), "T0 = the hook's start, not the request's arrival")
	f.d.Shutdown(context.Background())
}
