package drain

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
)

// brokenReader is a DeletionReader whose error is err: a client's whose
// methods panic (listingErrors).
type brokenReader struct{ err error }

func (r brokenReader) DeletionTimestamp(context.Context) (time.Time, error) {
	return time.Time{}, r.err
}

// A HookGuard whose Check returns an error whose methods panic refuses the
// preStop call with 403 naming the error's type, and RequireTerminating,
// whose DeletionReader returns one, takes it for a failed read, which lets
// the call through. The guard read the error outside any recover (Wrap's
// err.Error(), RequireTerminating's errors.Is): net/http's recover closed
// the kubelet's connection with no answer, its hook failed
// (FailedPreStopHook) and the kubelet sent SIGTERM at once, the preStop
// wait lost; an ExecHook took the reset for a failure, asking again
// MaxFailures times instead of stopping at the refusal.
func TestAGuardErrorWhoseMethodsPanicIsAnAnswerNotAReset(t *testing.T) {
	for _, tc := range listingErrors {
		t.Run(tc.name+", Check", func(t *testing.T) {
			guard := &HookGuard{Secret: "s3cret", Check: func(*http.Request) error { return tc.err }}
			code, body := callGuarded(t, guard)
			assert.Equal(t, http.StatusForbidden, code)
			assert.Contains(t, body, "drain: HookGuard.Check "+tc.says)
		})
		t.Run(tc.name+", RequireTerminating", func(t *testing.T) {
			guard := &HookGuard{Secret: "s3cret", Check: RequireTerminating(brokenReader{tc.err}, time.Second)}
			code, body := callGuarded(t, guard)
			assert.Equal(t, http.StatusOK, code, "a failed read lets the call through")
			assert.Equal(t, "drain wait over", body)
		})
	}
}

// callGuarded calls, as the kubelet's httpGet hook does, a server on
// loopback answering "drain wait over" behind guard, and returns the
// answer's status and body.
func callGuarded(t *testing.T, guard *HookGuard) (int, string) {
	t.Helper()
	srv := httptest.NewServer(guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "drain wait over")
	})))
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/drain", nil)
	require.NoError(t, err)
	req.Header.Set(defaultHookHeader, "s3cret")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err, "the hook gets an answer")
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// transportFunc is an http.RoundTripper of a user's: a proxy-less dialer,
// an auth wrapper.
type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An ExecHook whose Client's Transport returns an error whose Unwrap
// panics (a nil *T returned as an error) counts a failed request, and
// gives up after MaxFailures, 1 s apart, with that error named. Its Run
// met the error outside any recover (errors.As's Unwrap, through the
// *url.Error http.Client wraps it in), and the panic ended drainhook at
// its first request: the kubelet's hook failed and SIGTERM came at once,
// the preStop wait lost.
//
//	0 s  request 1 fails   1 s  request 2 fails   2 s  request 3 fails: Run returns
func TestAnExecHookTransportErrorWhoseMethodsPanicIsAFailedRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		requests := 0
		broken := transportFunc(func(*http.Request) (*http.Response, error) {
			requests++
			return nil, (*apiError)(nil)
		})
		start := time.Now()
		sum, err := ExecHook{URL: "http://127.0.0.1:8082/drain", MaxFailures: 3, Client: &http.Client{Transport: broken}}.Run(t.Context())
		assert.Nil(t, sum)
		assert.ErrorContains(t, err, "drainhook: 3 consecutive failures, last: ")
		assert.ErrorContains(t, err, "drain: ExecHook.Client's Transport returned a nil *drain.apiError as its error")
		assert.Equal(t, 3, requests)
		assert.Equal(t, 2*time.Second, time.Since(start))
	})
}
