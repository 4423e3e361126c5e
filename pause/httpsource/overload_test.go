package httpsource

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
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
	parseRetryAfter := func(v string, now time.Time) time.Duration {
		d, _ := parseRetryAfter(v, now)
		return d
	}
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

// Fault: a pause the server answered 429 while another was out waits for
// a request slot, and one still waiting at the deadline said only
// "waiting for a request slot: context deadline exceeded": the Report's
// entry did not say that the server's overload answer held it back, nor
// what the answer was. Through the Preserver, as a drain runs it: a
// server that pauses one sandbox at a time, a pause longer than the phase.
func TestPauseWaitingForASlotAtTheDeadlineNamesTheOverloadAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(2, func(f *fakeServer) {
			f.serial = reject
			f.retryAfter = "1"
			f.pauseDelay = 2 * time.Minute
		})
		p, err := pause.New(inProcess(t, f.handler(), Config{}), pause.Config{Limit: 2})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
		var waited []pause.Entry
		for _, e := range rep.Entries {
			if strings.Contains(e.Error, "request slot") {
				waited = append(waited, e)
			}
		}
		require.Len(t, waited, 1, "%+v", rep.Entries)
		e := waited[0]
		assert.Equal(t, pause.TimedOut, e.Outcome)
		assert.Contains(t, e.Error, "429 Too Many Requests (retry after 1s)", "the answer that held it back")
		assert.Contains(t, e.Error, "1 other pause", "why the answer held it back")
		assert.Contains(t, e.Error, "deadline exceeded")
		time.Sleep(2 * time.Minute) // the server's pause ends
	})
}

// A pause that waits for a slot with no overload answer of its own, the
// Source's limit lowered by another sandbox's: its error says the Source
// sends one at a time and which answer made it so.
func TestPauseWaitingForALoweredLimitNamesTheAnswerThatLoweredIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(3, func(f *fakeServer) {
			f.serial = reject
			f.pauseDelay = 2 * time.Minute
		})
		src := inProcess(t, f.handler(), Config{})
		ctx := ctxWithDeadline(t, time.Minute)
		out, held := make(chan error, 1), make(chan error, 1)
		go func() { out <- src.Sandbox(sandboxID(0)).Preserve(ctx) }() // on the server past the deadline
		synctest.Wait()
		go func() { held <- src.Sandbox(sandboxID(1)).Preserve(ctx) }() // 429, then waits
		synctest.Wait()
		require.Equal(t, 1, src.Limit())
		err := src.Sandbox(sandboxID(2)).Preserve(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "waiting for a request slot")
		assert.ErrorContains(t, err, "1 at once", "why it waited")
		assert.ErrorContains(t, err, "/sandboxes/"+sandboxID(1)+"/pause: 429 Too Many Requests", "the answer that lowered the limit")
		assert.False(t, errors.As(err, new(*StatusError)), "another sandbox's answer is named, not its own")

		err = <-held
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var se *StatusError
		require.ErrorAs(t, err, &se, "its own answer")
		assert.Equal(t, http.StatusTooManyRequests, se.StatusCode)
		assert.ErrorIs(t, <-out, context.DeadlineExceeded)
		time.Sleep(2 * time.Minute) // the server's pause ends
	})
}

// Fault: a 503 whose Retry-After asks for no wait (0, or a date already
// past: a server whose clock is behind this node's) was not taken for an
// overload, though the package says a 503 with Retry-After is one: the
// limiter kept sending as many pauses at once as before. The header's
// presence is the server's word that it is overloaded; its value only
// says how long to wait.
func TestA503WithRetryAfterOfNoWaitIsAnOverload(t *testing.T) {
	for _, v := range []string{"0", "Mon, 01 Jan 2001 00:00:00 GMT"} {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", v)
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		ts := httptest.NewServer(mux)
		src, err := New(ts.URL, Config{})
		require.NoError(t, err)
		err = src.Sandbox("a").Preserve(ctxWithDeadline(t, time.Minute))
		ts.Close()
		var se *StatusError
		require.ErrorAs(t, err, &se)
		assert.Zero(t, se.RetryAfter, "Retry-After: %s asks for no wait", v)
		assert.True(t, se.Overloaded(), "a 503 with Retry-After: %s", v)
	}
	assert.False(t, (&StatusError{StatusCode: http.StatusServiceUnavailable}).Overloaded(), "a 503 without Retry-After is no overload")
}
