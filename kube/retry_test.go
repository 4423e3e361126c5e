package kube_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/kube"
)

// shed answers a request as API Priority and Fairness does when the API
// server's queues are full (a mass deletion, a rollout: every pod reads
// itself at once): 429 with a Retry-After.
func shed(retryAfter string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			"Too many requests, please try again later.")
	}
}

// inOrder answers the n-th request with the n-th handler, the last one from
// then on, and counts them.
type inOrder struct {
	mu       sync.Mutex
	handlers []http.HandlerFunc
	n        int
}

func (o *inOrder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	h := o.handlers[min(o.n, len(o.handlers)-1)]
	o.n++
	o.mu.Unlock()
	h(w, r)
}

func (o *inOrder) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// inMemory is the Config of a Client whose transport answers with h in
// memory, with no server: in a synctest bubble, the waits between attempts
// run in virtual time.
func inMemory(t *testing.T, h http.Handler) kube.Config {
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("token-1"), 0o600))
	return kube.Config{Host: "https://10.96.0.1", Namespace: testNamespace, TokenFile: token,
		Client: &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			res := rec.Result()
			res.Request = req
			return res, nil
		})}}
}

// The read at the preStop call is the one that learns a grace cut below the
// manifest's; an API server that shed it (429, Retry-After: 1) failed it at
// once, though the read's 2 s had room for the retry the server asked for:
// the drain planned with the manifest's hour and the kubelet's SIGKILL came
// at the deletion's 30 s.
func TestReadShedByTheAPIServerIsRetriedAfterRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kill := time.Now().Add(30 * time.Second).Truncate(time.Second)
		o := &inOrder{handlers: []http.HandlerFunc{shed("1"), podJSON(t, deleted(kill, 30))}}
		cfg := inMemory(t, o)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		d, err := newPod(t, cfg, testPod).Deletion(ctx)
		require.NoError(t, err)
		assert.True(t, kill.Equal(d.Timestamp), "got %v", d.Timestamp)
		assert.Equal(t, time.Second, time.Since(start), "retried after the Retry-After")
		assert.Equal(t, 2, o.count())
	})
}

// A 429 without Retry-After is retried after 1 s, as client-go does; a
// Retry-After past the context's deadline is not waited for: the 429 is
// returned at once. A 503 to a GET is retried only with a Retry-After, and
// no call sends more than 4 requests.
func TestRetryOnlyWhatTheServerAsksAndTheDeadlineAllows(t *testing.T) {
	tests := []struct {
		name     string
		first    http.HandlerFunc
		timeout  time.Duration
		wantErr  int // the APIError's status, 0 for success
		wantTime time.Duration
		wantReqs int
	}{
		{"429 without Retry-After", shed(""), 2 * time.Second, 0, time.Second, 2},
		{"429, Retry-After past the deadline", shed("5"), 2 * time.Second, 429, 0, 1},
		{"429, Retry-After 0", shed("0"), 2 * time.Second, 0, time.Millisecond, 2},
		{"503 with Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "apiserver is shutting down", http.StatusServiceUnavailable)
		}, 2 * time.Second, 0, time.Second, 2},
		{"503 without Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "upstream connect error", http.StatusServiceUnavailable)
		}, 2 * time.Second, 503, 0, 1},
		{"always 429, no deadline", nil, 0, 429, 3 * time.Second, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := &inOrder{handlers: []http.HandlerFunc{shed("1")}}
				if tc.first != nil {
					o.handlers = []http.HandlerFunc{tc.first, podJSON(t, deleted(time.Now().Add(time.Minute), 60))}
				}
				cfg := inMemory(t, o)
				ctx := t.Context()
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				start := time.Now()
				_, err := newPod(t, cfg, testPod).Deletion(ctx)
				if tc.wantErr == 0 {
					require.NoError(t, err)
				} else {
					var apiErr *kube.APIError
					require.ErrorAs(t, err, &apiErr)
					assert.Equal(t, tc.wantErr, apiErr.StatusCode)
				}
				assert.Equal(t, tc.wantTime, time.Since(start))
				assert.Equal(t, tc.wantReqs, o.count())
			})
		})
	}
}

// The same, over TLS on loopback: the read shed once succeeds within its
// 2 s, the token sent again.
func TestReadShedOnceSucceedsOnALoopbackAPIServer(t *testing.T) {
	o := &inOrder{}
	a, cfg := newAPIServer(t, o.ServeHTTP)
	o.handlers = []http.HandlerFunc{shed("1"), podJSON(t, deleted(time.Now().Add(30*time.Second), 30))}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	d, err := newPod(t, cfg, testPod).Deletion(ctx)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, d.Grace)
	a.mu.Lock()
	defer a.mu.Unlock()
	assert.Equal(t, []string{"Bearer token-1", "Bearer token-1"}, a.tokens)
}

// An event the API server sheds (429: API Priority and Fairness, the
// EventRateLimit admission plugin) is posted again after its Retry-After
// when its EventTimeout has room, not dropped.
func TestEventShedByTheAPIServerIsPostedAfterRetryAfter(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, nil))
	o := &inOrder{handlers: []http.HandlerFunc{shed("1"), a.storeEvent}}
	a.postEvent = o.ServeHTTP
	p := newPod(t, cfg, testPod)
	p.Record(kube.Event{Reason: "DrainStarted", Note: "3 sandboxes to preserve"})
	stats := p.Flush(t.Context())
	assert.Equal(t, 1, stats.Posted, "last error: %s", stats.LastError)
	assert.Equal(t, 0, stats.Dropped)
	require.Len(t, a.posted(), 1)
	assert.Equal(t, "DrainStarted", a.posted()[0].Reason)
}

// A Retry-After given as an HTTP date is a time of the clock that sent it,
// the API server's (or a proxy's in front of it), as the answer's Date is:
// the wait is that date less the API server's now, not less this node's.
// Fault: it was waited for by this node's clock, so with the API server
// 10 minutes ahead a read shed once ("Retry-After: <its now + 1 s>") was
// not retried within its 2 s (a wait of 10 min 1 s, past the deadline: the
// 429 at once, 1 request), and with the API server 10 minutes behind it was
// retried at once (1 ms), where it asked for one second.
func TestRetryAfterDateIsTheAPIServersClock(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		t.Run("server ahead by "+skew.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				kill := time.Now().Add(30 * time.Second)
				shedAt := func(w http.ResponseWriter, r *http.Request) {
					now := time.Now().Add(skew)
					w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
					shed(now.Add(time.Second).UTC().Format(http.TimeFormat))(w, r)
				}
				o := &inOrder{handlers: []http.HandlerFunc{shedAt, podJSON(t, deleted(kill, 30))}}
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				defer cancel()
				start := time.Now()
				d, err := newPod(t, inMemory(t, o), testPod).Deletion(ctx)
				require.NoError(t, err)
				assert.Equal(t, 30*time.Second, d.Grace)
				assert.Equal(t, time.Second, time.Since(start), "retried at the date the API server named")
				assert.Equal(t, 2, o.count())
			})
		})
	}
}

// resetMidAnswer answers 200 with half a body and resets the connection,
// as an API server instance going away behind the Service cuts one.
func resetMidAnswer(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Length", "100")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"kind":"Pod",`))
	_ = http.NewResponseController(w).Flush()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tcp, ok := conn.(*tls.Conn).NetConn().(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
		_ = tcp.Close()
	}
}

// Fault (docs/faults.md row 2742): a read whose connection was reset while
// its answer came failed, and the drain read again a second later. A GET is
// sent again at once; an Event's POST is not (the API server may have
// created it).
func TestReadCutMidAnswerIsSentAgainAtOnce(t *testing.T) {
	o := &inOrder{}
	_, cfg := newAPIServer(t, o.ServeHTTP)
	o.handlers = []http.HandlerFunc{resetMidAnswer, podJSON(t, deleted(time.Now().Add(30*time.Second), 30))}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	d, err := newPod(t, cfg, testPod).Deletion(ctx)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, d.Grace)
	assert.Equal(t, 2, o.count())

	a, cfg := newAPIServer(t, podJSON(t, nil))
	posts := &inOrder{handlers: []http.HandlerFunc{resetMidAnswer, a.storeEvent}}
	a.postEvent = posts.ServeHTTP
	cfg.UID = "8d3c2f1e-0000-4000-8000-000000000001"
	p := newPod(t, cfg, testPod)
	p.Record(kube.Event{Reason: "DrainStarted"})
	stats := p.Flush(t.Context())
	assert.Equal(t, 1, stats.Dropped, "the POST cut is not sent again")
	assert.Equal(t, 1, posts.count())
}
