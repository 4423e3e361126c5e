package httpsource

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// Fault: a numeric Retry-After too long for a time.Duration overflowed:
// 10000000000 s (317 years) wrapped to a negative wait, read as no
// Retry-After, and 18446744074 s (584 years) to 0.29 s, a wait the client
// kept; one past int64 failed to parse, read as none. The server that
// asked to be left alone got the pause again at once.
func TestRetryAfterTooLongForADurationSaturates(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, v := range []string{"10000000000", "18446744074", "99999999999999999999", "9223372037"} {
		assert.Equal(t, time.Duration(math.MaxInt64), parseRetryAfter(v, now), v)
	}
	assert.Equal(t, 9223372036*time.Second, parseRetryAfter("9223372036", now), "the longest that fits is exact")
	assert.Zero(t, parseRetryAfter("-99999999999999999999", now))
	assert.Equal(t, time.Duration(math.MaxInt64), parseRetryAfter("Fri, 31 Dec 9999 23:59:59 GMT", now))
}

// The same through the Preserver, as a drain runs it: the server's 584
// years are longer than the phase, so the pause is not sent again before
// the deadline, and the Report's entry says what the server asked, not a
// wrapped Duration.
func TestRetryAfterTooLongForADurationIsNotRetriedEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, at := rateLimited(1, "18446744074")
		mux := http.NewServeMux()
		mux.Handle("POST /sandboxes/{id}/pause", h)
		mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
			state := "running"
			if len(*at) > 1 { // the second pause is answered 204
				state = "paused"
			}
			_, _ = w.Write([]byte(`[{"id": "a", "state": "` + state + `"}]`))
		})
		p, err := pause.New(inProcess(t, mux, Config{}), pause.Config{})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
		e := entry(t, rep, "a")
		assert.Equal(t, pause.Failed, e.Outcome, e.Error)
		assert.Len(t, *at, 1, "asked once: the server's Retry-After is past the deadline")
		assert.Contains(t, e.Error, "retry after 18446744074s", "what the server asked")
	})
}

func TestStatusErrorOfASaturatedRetryAfterSaysWhatTheServerSent(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	ts := httptest.NewServer(mux)
	defer ts.Close()
	src, err := New(ts.URL, Config{})
	require.NoError(t, err)
	err = src.Sandbox("a").Preserve(ctxWithDeadline(t, time.Minute))
	var se *StatusError
	require.ErrorAs(t, err, &se)
	assert.True(t, se.Overloaded())
	assert.Equal(t, time.Duration(math.MaxInt64), se.RetryAfter)
	assert.Contains(t, err.Error(), "(retry after Fri, 31 Dec 9999 23:59:59 GMT)")
	assert.ErrorIs(t, err, errNoFit)
}
