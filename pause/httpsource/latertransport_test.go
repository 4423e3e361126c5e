package httpsource

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: with a Client whose Transport is nil (http.DefaultTransport at
// each request), the Source looked once, in New, at what transport that
// was: net/http's, whose trace says when a request was written, and so a
// failed pause without that trace was taken for one never sent. A program
// that put another RoundTripper there afterwards (a mock, as
// httpmock.Activate does, an in-process one, telemetry set up after the
// drain's wiring) sends requests without that trace: a pause the server
// had and whose answer was lost was taken for one never sent, and a gone
// answer to the next pause counted the sandbox gone, not lost.
//
//	New        http.DefaultTransport is net/http's
//	program    puts a RoundTripper there that sends on its own
//	pause a    the server has it; its answer lost: before, "not sent";
//	           now no answer
//	the server removes a (its pause failed); pause a again: 404
//	           before: gone (Vanished); now lost
func TestAPauseThroughATransportPutInDefaultTransportLaterMayHaveBeenSent(t *testing.T) {
	f := newFakeServer(1)
	url := f.start(t)
	src, err := New(url, Config{Client: &http.Client{}})
	require.NoError(t, err)
	lossy := &answerLost{next: http.DefaultTransport}
	http.DefaultTransport = lossy
	t.Cleanup(func() { http.DefaultTransport = lossy.next })
	a := src.Sandbox(sandboxID(0))

	err = a.Preserve(ctxWithDeadline(t, time.Minute))
	require.Error(t, err)
	assert.Equal(t, 1, f.pauseRequests()[sandboxID(0)], "the server had the pause")
	assert.NotContains(t, err.Error(), "not sent")

	f.remove(sandboxID(0)) // its pause failed: the server removed it
	err = a.Preserve(ctxWithDeadline(t, time.Minute))
	require.Error(t, err)
	assert.True(t, isPermanent(err), "lost after a pause the server had: %v", err)
}

// answerLost is a RoundTripper of a program's own: it sends each request
// with a context of its own, and loses the answer to a pause that
// succeeded.
type answerLost struct{ next http.RoundTripper }

func (l *answerLost) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r.WithContext(context.WithoutCancel(context.Background())))
	if err != nil {
		return nil, err
	}
	if r.Method != http.MethodPost || resp.StatusCode/100 != 2 {
		return resp, nil
	}
	_ = resp.Body.Close()
	return nil, errors.New("connection reset by peer")
}
