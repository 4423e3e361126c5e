package drain

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
		_ = json.NewEncoder(w).Encode(PreStopSummary{Done: n == 3, Reason: reasonDrained,
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

// A server that reports its drain deadline, then hangs on the next request
// and ignores ?wait=: the hook's request ends at that deadline, not after its
// minute-long request timeout. In virtual time, so the stop is exact.
func TestExecHookNeverOutlivesTheDrainDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dl := time.Now().Add(30 * time.Second)
		var calls atomic.Int32
		hang := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) > 1 {
				<-r.Context().Done()
				return
			}
			_ = json.NewEncoder(w).Encode(PreStopSummary{Reason: reasonWaiting, DrainDeadline: dl})
		})
		sum, err := ExecHook{URL: "http://server.test/drain", RequestTimeout: time.Minute, MaxFailures: 100,
			Client: &http.Client{Transport: handlerTransport{hang}}}.Run(context.Background())
		require.ErrorContains(t, err, "drain deadline")
		require.NotNil(t, sum)
		assert.Equal(t, reasonWaiting, sum.Reason, "the last summary the server sent")
		assert.WithinDuration(t, dl, time.Now(), 0, "it stopped at the reported deadline")
		assert.Equal(t, int32(2), calls.Load())
	})
}

// handlerTransport serves each request with h in the caller's goroutine,
// without a network, so that a test under synctest can use an http.Client.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil { // a server never hands its handler a nil Body
		r = r.Clone(r.Context()) // a RoundTripper does not modify the request
		r.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

// The exec hook against the real handler: it sends its start as T0.
func TestExecHookStartAnchorsTheBudget(t *testing.T) {
	f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 0, latency: time.Second})
	srv := httptest.NewServer(f.d.PreStop())
	defer srv.Close()
	start := time.Now().Add(-1500 * time.Millisecond) // the hook process started 1.5 s ago
	sum, err := ExecHook{URL: srv.URL, Start: start}.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, reasonDrained, sum.Reason)
	assert.True(t, f.budget.Start().Equal(start.Round(0)), "T0 = the hook's start, not the request's arrival")
	f.d.Shutdown(context.Background())
}

// A refusal (403 from a HookGuard, 404 for a wrong path) is answered the
// same however often it is asked: the hook gives up at the first one, so
// the kubelet goes on to SIGTERM with the grace left. Before, it asked five
// times a second apart: at a 4 s grace the kubelet gave up on the hook and
// left SIGTERM its 2 s floor, while the server, which never saw a preStop
// call, planned for 4 s and was SIGKILLed mid-preserve (scratch e2b drill,
// real processes). A 408 or 429 is still retried, as a 5xx is.
func TestExecHookGivesUpAtOnceWhenRefused(t *testing.T) {
	for _, c := range []struct {
		status int
		calls  int32
	}{{http.StatusForbidden, 1}, {http.StatusNotFound, 1}, {http.StatusTooManyRequests, 3}, {http.StatusRequestTimeout, 3}} {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			http.Error(w, "no", c.status)
		}))
		_, err := ExecHook{URL: srv.URL, MaxFailures: 3, RetryInterval: time.Millisecond}.Run(context.Background())
		srv.Close()
		require.Error(t, err)
		assert.Equal(t, c.calls, calls.Load(), "%d", c.status)
		if c.calls == 1 {
			assert.ErrorContains(t, err, "refused")
			assert.ErrorContains(t, err, http.StatusText(c.status))
		}
	}
}

// Fault (a helper's review): the drain deadline the server reports moves
// later as its running sandboxes end (the preserve reserve shrinks), but
// the hook bounded its next request by the deadline of the last answer and
// stopped there: a request open across that deadline was cut, and the hook
// ended "the drain deadline passed" while the server's wait went on to the
// new one; the kubelet then sent SIGTERM, cutting the drain wait short,
// and sandboxes that would have ended by themselves were preserved. The
// hook now asks the server (?wait=) to answer before the deadline it knows,
// so it learns the new one. The double answers as PreStop does: after
// ?wait=, with the deadline as it is then, or Done 300 ms before it.
func TestExecHookFollowsADrainDeadlineThatMovedLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		moved := make(chan struct{})
		moveAt := time.AfterFunc(28*time.Second, func() { close(moved) })
		defer moveAt.Stop()
		deadlineNow := func() time.Time {
			select {
			case <-moved:
				return start.Add(60 * time.Second)
			default:
				return start.Add(30 * time.Second)
			}
		}
		server := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
			require.NoError(t, err)
			bound := time.NewTimer(wait)
			defer bound.Stop()
			for {
				dl := deadlineNow()
				end := time.NewTimer(time.Until(dl) - sigtermLag)
				movedC := moved
				if !dl.Equal(start.Add(30 * time.Second)) {
					movedC = nil
				}
				select {
				case <-bound.C:
					end.Stop()
					_ = json.NewEncoder(w).Encode(PreStopSummary{Reason: reasonWaiting, DrainDeadline: dl})
					return
				case <-end.C:
					_ = json.NewEncoder(w).Encode(PreStopSummary{Done: true, Reason: reasonDeadline, DrainDeadline: dl})
					return
				case <-movedC:
					end.Stop()
				case <-r.Context().Done():
					end.Stop()
					return
				}
			}
		})
		sum, err := ExecHook{URL: "http://server.test/drain", RequestTimeout: 10 * time.Second,
			Client: &http.Client{Transport: handlerTransport{server}}}.Run(context.Background())
		require.NoError(t, err)
		require.NotNil(t, sum)
		assert.True(t, sum.Done)
		assert.Equal(t, start.Add(60*time.Second-sigtermLag), time.Now(), "the hook ran until the server's wait ended")
	})
}

// A refusal's body goes into the hook's log line: on one line, bounded,
// and a control character (a proxy's page, a terminal escape) quoted.
func TestAnswerTextIsOneBoundedLine(t *testing.T) {
	assert.Equal(t, "forbidden: wrong X-Drain-Secret", answerText(strings.NewReader("forbidden: wrong X-Drain-Secret\n")))
	assert.Equal(t, "<html> <body>denied</body> </html>", answerText(strings.NewReader("<html>\n  <body>denied</body>\r\n</html>\n")))
	assert.Equal(t, `"\x1b[2Jgone"`, answerText(strings.NewReader("\x1b[2Jgone")))
	assert.Len(t, answerText(strings.NewReader(strings.Repeat("x", 5000))), maxAnswerText)
	assert.Empty(t, answerText(strings.NewReader("")))
}

// Fault: the pause after a failed request ran its whole RetryInterval
// whatever time was left before the drain deadline the server reported,
// then asked again with that deadline passed: a server that answered
// once and then hung (default -timeout 10 s, -retry 1 s) left the hook
// running until 0.5 s past a drain deadline 10.5 s out, and the kubelet's
// SIGTERM came as late, out of the preserve phase's reserve, with one
// request more in the hook's log that no server could answer. The pause
// now ends at the drain deadline, and the hook with it.
func TestExecHookRetryPauseEndsAtTheDrainDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dl := time.Now().Add(10*time.Second + 500*time.Millisecond)
		var calls atomic.Int32
		hang := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) > 1 {
				<-r.Context().Done() // hung: the request times out
				return
			}
			_ = json.NewEncoder(w).Encode(PreStopSummary{Reason: reasonWaiting, DrainDeadline: dl})
		})
		start := time.Now()
		sum, err := ExecHook{URL: "http://server.test/drain",
			Client: &http.Client{Transport: handlerTransport{hang}}}.Run(context.Background())
		require.ErrorContains(t, err, "drain deadline")
		require.NotNil(t, sum)
		assert.Equal(t, 10*time.Second+500*time.Millisecond, time.Since(start), "the hook ended at the drain deadline")
		assert.Equal(t, int32(2), calls.Load(), "no request made past the deadline")
	})
}
