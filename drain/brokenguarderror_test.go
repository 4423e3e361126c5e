package drain

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
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
