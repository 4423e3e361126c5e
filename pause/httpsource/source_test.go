package httpsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

func TestNewRejectsBadConfigurationNamingTheField(t *testing.T) {
	cases := []struct {
		name string
		url  string
		cfg  Config
		want string
	}{
		{"relative url", "127.0.0.1:8080", Config{}, "httpsource: baseURL must be an absolute http(s) URL"},
		{"ftp url", "ftp://host", Config{}, "baseURL"},
		{"query", "http://host/?a=1", Config{}, "baseURL"},
		{"port past 65535", "http://127.0.0.1:80000", Config{}, "httpsource: baseURL http://127.0.0.1:80000: its port must be 1 to 65535, got 80000"},
		{"port 0", "http://host:0/api", Config{}, "its port must be 1 to 65535, got 0"},
		{"list path", "http://host", Config{ListPath: "sandboxes"}, `httpsource: Config.ListPath must start with "/", got "sandboxes"`},
		{"fallback path", "http://host", Config{FallbackListPath: "v1"}, `Config.FallbackListPath must start with "/"`},
		{"pause path without id", "http://host", Config{PausePath: "/pause"}, `httpsource: Config.PausePath must contain "{id}", got "/pause"`},
		{"half pagination", "http://host", Config{PageTokenHeader: "x-next"}, "Config.PageTokenHeader and Config.PageTokenParam must be set together"},
		{"running states", "http://host", Config{RunningStates: []string{}}, "Config.RunningStates must not be empty"},
		{"size unit", "http://host", Config{SizeField: "mb", SizeUnit: -1}, "httpsource: Config.SizeUnit must be >= 0, got -1"},
		{"pause timeout", "http://host", Config{PauseTimeout: -1}, "httpsource: Config.PauseTimeout must be >= 0, got -1ns"},
		{"max in flight", "http://host", Config{MaxInFlight: -1}, "httpsource: Config.MaxInFlight must be >= 0, got -1"},
		{"gone status", "http://host", Config{GoneStatus: []int{500}}, "httpsource: Config.GoneStatus must hold 4xx codes, got 500"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.url, c.cfg)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	_, err := New("http://127.0.0.1:1/api/", Config{NoStateField: true, RunningStates: []string{}})
	assert.NoError(t, err, "no state field needs no running states")
}

// The zero Config is the generic shape with its defaults: GET /sandboxes,
// "id" and "state" fields, "running", POST /sandboxes/{id}/pause, 404 and
// 410 gone, a 10 s list timeout, the API key (when set) in X-API-Key.
func TestZeroConfigIsTheGenericShape(t *testing.T) {
	c := Config{}.resolve()
	assert.Equal(t, "/sandboxes", c.listPath)
	assert.Equal(t, "/sandboxes/{id}/pause", c.pausePath)
	assert.Equal(t, http.MethodPost, c.pauseMethod)
	assert.Equal(t, "id", c.idField)
	assert.Equal(t, "state", c.stateField)
	assert.Equal(t, []string{"running"}, c.running)
	assert.Equal(t, []int{http.StatusNotFound, http.StatusGone}, c.gone)
	assert.Equal(t, 10*time.Second, c.listTimeout)
	assert.Equal(t, "X-API-Key", c.apiHeader)
	assert.Zero(t, Config{ListTimeout: -1}.resolve().listTimeout, "a negative list timeout leaves the context alone")

	a := AgentENV().resolve()
	assert.Equal(t, "/v2/sandboxes", a.listPath, "no state filter: a sandbox being created or resumed is running there")
	assert.Equal(t, "sandboxID", a.idField)
	assert.Equal(t, "state", a.stateField)
	assert.Equal(t, int64(1<<20), a.sizeUnit)
}

func TestListReturnsOnlyRunningSandboxesInServerOrder(t *testing.T) {
	f := newFakeServer(0)
	f.add("one", "running")
	f.add("two", "paused")
	f.add("three", "RUNNING")
	f.add("four", "pausing")
	src, err := New(f.start(t), Config{})
	require.NoError(t, err)

	got, err := src.List(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"one", "three"}, ids(got))
}

func TestListReadsConfiguredFields(t *testing.T) {
	body := `{"sandboxes":[{"sandboxID":7,"phase":"Active"},{"sandboxID":"x","phase":"Paused"},{"sandboxID":"y"}]}`
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/list", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) })
	src := inProcess(t, mux, Config{ListPath: "/v2/list", ItemsField: "sandboxes", IDField: "sandboxID", StateField: "phase", RunningStates: []string{"active", "resuming"}})

	got, err := src.List(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"7", "y"}, ids(got), "numbers are IDs too; no state field counts as running")
}

// A state of null is no state: the sandbox counts as running, as one
// without the field does (pausing it needlessly costs a request, missing
// it costs the sandbox). It read as the state "", and was skipped.
func TestListCountsANullStateAsRunning(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `[{"id":"a","state":null},{"id":"b","state":"paused"},{"id":"c"}]`)
	})
	got, err := inProcess(t, mux, Config{}).List(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "c"}, ids(got))
}

func TestListWithoutStateFieldTakesEverySandbox(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `[{"id":"a","state":"paused"},{"id":"b"}]`)
	})
	src := inProcess(t, mux, Config{IDField: "id", NoStateField: true})
	got, err := src.List(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, ids(got))
}

func TestListRejectsMalformedAnswersAsPermanent(t *testing.T) {
	for name, body := range map[string]string{
		"not json":        `<html>`,
		"object":          `{"id":"a"}`,
		"missing id":      `[{"state":"running"}]`,
		"empty id":        `[{"id":"","state":"running"}]`,
		"id is an object": `[{"id":{},"state":"running"}]`,
		"no id, paused":   `[{"sandboxID":"a","state":"paused"}]`, // a wrong IDField shows before any runs
	} {
		t.Run(name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) })
			_, err := inProcess(t, mux, Config{}).List(t.Context())
			require.Error(t, err)
			assert.True(t, isPermanent(err), "a malformed list does not get better by asking again: %v", err)
		})
	}
}

func TestAPIKeyIsSentAndItsAbsenceIsPermanent(t *testing.T) {
	f := newFakeServer(2, func(f *fakeServer) { f.apiKey = "s3cret" })
	url := f.start(t)

	without, err := New(url, Config{})
	require.NoError(t, err)
	_, err = without.List(t.Context())
	var se *StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusUnauthorized, se.StatusCode)
	assert.True(t, isPermanent(err))

	with, err := New(url, Config{APIKey: "s3cret"})
	require.NoError(t, err)
	got, err := with.List(t.Context())
	require.NoError(t, err)
	assert.Len(t, got, 2)
	require.NoError(t, got[0].Preserve(t.Context()))
	assert.Equal(t, []string{got[0].ID()}, f.paused())
}

func TestPreserveClassifiesAnswers(t *testing.T) {
	cases := []struct {
		status    int
		gone      bool
		permanent bool
	}{
		{http.StatusNoContent, false, false},
		{http.StatusOK, false, false},
		{http.StatusNotFound, true, false},
		{http.StatusGone, true, false},
		{http.StatusBadRequest, false, true},
		{http.StatusForbidden, false, true},
		{http.StatusRequestTimeout, false, false},
		{http.StatusTooManyRequests, false, false},
		{http.StatusInternalServerError, false, false},
		{http.StatusBadGateway, false, false},
		{http.StatusServiceUnavailable, false, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
			})
			err := inProcess(t, mux, Config{}).Sandbox("a").Preserve(t.Context())
			if c.status/100 == 2 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			var se *StatusError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, c.status, se.StatusCode)
			assert.Equal(t, c.gone, errors.Is(err, pause.ErrGone), "gone")
			assert.Equal(t, c.permanent, isPermanent(err), "permanent")
		})
	}
}

func TestGoneStatusIsConfigurable(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
	})
	err := inProcess(t, mux, Config{GoneStatus: []int{404, 409}}).Sandbox("a").Preserve(t.Context())
	assert.ErrorIs(t, err, pause.ErrGone)
}

// Fault: a pause answered 404 (or 410) was the sandbox gone whatever the
// server still listed: a pause path the server does not have (a
// -pause-path typo, a proxy in front that routes only the listing), whose
// 404 every pause gets, made every sandbox vanished, listed running at
// every pass, and the Report said none lost, Err nil, while SIGKILL took
// them all. A gone answer for a sandbox the listing still shows running is
// now no gone sandbox: transient (a sandbox being deleted, which AgentENV
// lists running while it is killed, is gone at a retry), its error naming
// the pause path; one the listing no longer shows is gone, as before. In
// virtual time, a Run of 20 s:
//
//	0 s    list: a, b running; POST /sandbox/{id}/pause: 404 page not found
//	20 s   the phase's end: a and b failed, lost, the 404 and the path named
func TestPauseAnsweredGoneWhileListedRunningIsNotGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `[{"id":"a","state":"running"},{"id":"b","state":"running"}]`)
		})
		mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"message":"sandbox not found"}`, http.StatusNotFound) // c: deleted since it was listed
		})
		src := inProcess(t, mux, Config{PausePath: "/sandbox/{id}/pause"}) // not the server's: Go's 404 page
		p, err := pause.New(src, pause.Config{})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, 20*time.Second), time.Time{})

		assert.Equal(t, 2, rep.Lost(), "%+v", rep.Entries)
		require.Error(t, rep.Err())
		for _, id := range []string{"a", "b"} {
			e := entry(t, rep, id)
			assert.Equal(t, pause.Failed, e.Outcome, "%s: listed running at every pass: %s", id, e.Error)
			assert.Contains(t, e.Error, "404 Not Found")
			assert.Contains(t, e.Error, "still listed running")
			assert.Contains(t, e.Error, `"/sandbox/{id}/pause"`)
		}

		gone := inProcess(t, mux, Config{}).Sandbox("c").Preserve(t.Context())
		assert.ErrorIs(t, gone, pause.ErrGone, "a 404 for a sandbox no longer listed: gone")
	})
}

func TestPreservePathEscapesTheID(t *testing.T) {
	var got string
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /api/vms/{id}/suspend", func(w http.ResponseWriter, r *http.Request) {
		got = r.PathValue("id")
	})
	s, err := New("http://sandbox-server.test/api/", Config{PauseMethod: http.MethodPut, PausePath: "/vms/{id}/suspend", Client: &http.Client{Transport: handlerTransport{mux}}})
	require.NoError(t, err)
	require.NoError(t, s.Sandbox("a/b c").Preserve(t.Context()))
	assert.Equal(t, "a/b c", got)
}

func TestConnectionErrorsAreTransient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	src, err := New(url, Config{})
	require.NoError(t, err)
	_, err = src.List(t.Context())
	require.Error(t, err)
	assert.False(t, isPermanent(err))
	err = src.Sandbox("a").Preserve(t.Context())
	require.Error(t, err)
	assert.False(t, isPermanent(err))
	assert.NotErrorIs(t, err, pause.ErrGone)
}

func TestPauseTimeoutBoundsEachRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // a pause that hangs
		})
		src := inProcess(t, mux, Config{PauseTimeout: 30 * time.Second})
		start := time.Now()
		err := src.Sandbox("a").Preserve(ctxWithDeadline(t, time.Hour))
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.False(t, isPermanent(err), "a timed-out request may be retried")
		assert.Equal(t, 30*time.Second, time.Since(start))
	})
}

func TestRequestsEndAtTheContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mux := http.NewServeMux()
		hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
		mux.HandleFunc("GET /sandboxes", hang)
		mux.HandleFunc("POST /sandboxes/{id}/pause", hang)
		src := inProcess(t, mux, Config{ListTimeout: time.Minute, PauseTimeout: time.Minute})

		start := time.Now()
		_, err := src.List(ctxWithDeadline(t, 3*time.Second))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 3*time.Second, time.Since(start), "the budget wins over the list timeout")

		start = time.Now()
		err = src.Sandbox("a").Preserve(ctxWithDeadline(t, 4*time.Second))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 4*time.Second, time.Since(start), "the budget wins over the pause timeout")
	})
}

func TestListTimeoutDefaultBoundsAHungList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		start := time.Now()
		_, err := inProcess(t, mux, Config{}).List(ctxWithDeadline(t, time.Hour))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, defaultListTimeout, time.Since(start))
	})
}

// rateLimited answers 429 with the given Retry-After to the first n pause
// requests and 204 after, recording when each request came.
func rateLimited(n int, retryAfter string) (http.Handler, *[]time.Time) {
	var at []time.Time
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		at = append(at, time.Now())
		if len(at) <= n {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux, &at
}

func TestRetryAfterIsWaitedWhenItFits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, at := rateLimited(1, "5")
		src := inProcess(t, h, Config{})
		start := time.Now()
		require.NoError(t, src.Sandbox("a").Preserve(ctxWithDeadline(t, time.Minute)))
		require.Len(t, *at, 2)
		assert.Equal(t, 5*time.Second, (*at)[1].Sub((*at)[0]), "retried exactly when the server said")
		assert.Equal(t, 5*time.Second, time.Since(start))
	})
}

func TestRetryAfterThatDoesNotFitIsNotWaitedNorCutShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, at := rateLimited(1, "120")
		src := inProcess(t, h, Config{})
		sb := src.Sandbox("a")
		start := time.Now()
		err := sb.Preserve(ctxWithDeadline(t, time.Minute))
		require.Error(t, err)
		assert.Zero(t, time.Since(start), "returns at once instead of sleeping past the deadline")
		var se *StatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, 120*time.Second, se.RetryAfter)
		assert.False(t, isPermanent(err), "a later, longer phase may still retry it")

		// The Preserver retries within the minute: no request reaches the
		// server before its Retry-After time.
		time.Sleep(10 * time.Second)
		err = sb.Preserve(ctxWithDeadline(t, time.Minute))
		assert.ErrorIs(t, err, errNoFit)
		assert.Len(t, *at, 1)

		// With enough time left, the retry waits for the Retry-After time.
		require.NoError(t, sb.Preserve(ctxWithDeadline(t, 5*time.Minute)))
		require.Len(t, *at, 2)
		assert.Equal(t, 120*time.Second, (*at)[1].Sub((*at)[0]))
	})
}

func TestRetryAfterAsHTTPDate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, at := rateLimited(1, time.Now().Add(7*time.Second).UTC().Format(http.TimeFormat))
		require.NoError(t, inProcess(t, h, Config{}).Sandbox("a").Preserve(ctxWithDeadline(t, time.Minute)))
		require.Len(t, *at, 2)
		// HTTP dates have whole seconds: the wait is 6 to 7 s.
		assert.InDelta(t, 7*time.Second, (*at)[1].Sub((*at)[0]), float64(time.Second))
	})
}

func TestOverloadWithoutRetryAfterIsLeftToTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
		})
		err := inProcess(t, mux, Config{}).Sandbox("a").Preserve(ctxWithDeadline(t, time.Minute))
		var se *StatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, http.StatusTooManyRequests, se.StatusCode)
		assert.False(t, isPermanent(err))
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{" 3 ", 3 * time.Second, true},
		{"0", 0, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true}, // past: no wait, and read
		{"-4", 0, false},
		{"+4", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	} {
		d, ok := parseRetryAfter(c.v, now)
		assert.Equal(t, c.want, d, "%q", c.v)
		assert.Equal(t, c.ok, ok, "%q read", c.v)
	}
}

func TestStatusErrorMessageNamesTheRequest(t *testing.T) {
	e := &StatusError{Op: "pause", URL: "http://h/sandboxes/a/pause", StatusCode: 429,
		RetryAfter: time.Second, Body: strings.Repeat("x", 10)}
	assert.Equal(t, "httpsource: pause http://h/sandboxes/a/pause: 429 Too Many Requests (retry after 1s): xxxxxxxxxx", e.Error())
}

func ids(sbs []pause.Sandbox) []string {
	out := make([]string, len(sbs))
	for i, s := range sbs {
		out[i] = s.ID()
	}
	return out
}

func isPermanent(err error) bool {
	var p *backoff.PermanentError
	return errors.As(err, &p)
}

// A 409 is settled by listing again: a sandbox no longer listed running was
// paused by someone else (gone for the Preserver); one still listed running
// is in a state the server will not pause yet (retry).
func TestConflictIsSettledByListingAgain(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `[{"id":"paused-meanwhile","state":"paused"},{"id":"resuming","state":"running"}]`)
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
	})
	src := inProcess(t, mux, Config{})

	err := src.Sandbox("paused-meanwhile").Preserve(t.Context())
	assert.ErrorIs(t, err, pause.ErrGone)

	err = src.Sandbox("resuming").Preserve(t.Context())
	require.Error(t, err)
	assert.NotErrorIs(t, err, pause.ErrGone)
	assert.False(t, isPermanent(err), "retried: it will be running and pausable")
	var se *StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusConflict, se.StatusCode)

	mux2 := http.NewServeMux()
	mux2.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	mux2.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
	})
	err = inProcess(t, mux2, Config{}).Sandbox("x").Preserve(t.Context())
	assert.False(t, isPermanent(err), "undecided: the list's 500 is transient, and a retry lists again")
	assert.ErrorContains(t, err, "500")
}

// A proxy in front of the server that redirects to its sign-in page (302)
// turns the pause POST into a GET of that page, which answers 200: that is
// not a pause. Neither the Source's own client nor a client that follows
// redirects takes it for one; the list fails naming the redirect, and the
// API key never reaches the sign-in host. A redirect on the same host that
// keeps the method (a canonical list URL) is still followed.
func TestRedirectIsNotAnAnswer(t *testing.T) {
	var signIns atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		signIns.Add(1)
		fmt.Fprint(w, "<html>sign in</html>")
	}))
	t.Cleanup(idp.Close)
	mux := http.NewServeMux()
	toSignIn := func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, idp.URL+"/sign-in", http.StatusFound)
	}
	mux.HandleFunc("POST /sandboxes/{id}/pause", toSignIn)
	mux.HandleFunc("GET /sandboxes", toSignIn)
	mux.HandleFunc("POST /v2/sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/sandboxes/"+r.PathValue("id")+"/paused", http.StatusFound) // same host
	})
	mux.HandleFunc("GET /sandboxes/{id}/paused", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v2/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v2/sandboxes/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /v2/sandboxes/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `[{"id":"a","state":"running"}]`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	own, err := New(srv.URL, Config{APIKey: "s3cret"})
	require.NoError(t, err)
	err = own.Sandbox("a").Preserve(t.Context())
	var se *StatusError
	require.ErrorAs(t, err, &se, "a redirect is not a pause")
	assert.Equal(t, http.StatusFound, se.StatusCode)
	assert.True(t, isPermanent(err), "asking again meets the same redirect")
	_, err = own.List(t.Context())
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusFound, se.StatusCode, "the list names the redirect, not the page's HTML")
	assert.Zero(t, signIns.Load(), "the sign-in host was never asked, nor given the API key")

	v2, err := New(srv.URL, Config{APIKey: "s3cret", ListPath: "/v2/sandboxes", PausePath: "/v2/sandboxes/{id}/pause"})
	require.NoError(t, err)
	got, err := v2.List(t.Context())
	require.NoError(t, err, "a same-host GET redirect is followed")
	assert.Equal(t, []string{"a"}, ids(got))
	err = got[0].Preserve(t.Context())
	require.ErrorAs(t, err, &se, "a same-host redirect that turns the POST into a GET is not")
	assert.Equal(t, http.StatusFound, se.StatusCode)

	following, err := New(srv.URL, Config{Client: &http.Client{}})
	require.NoError(t, err)
	err = following.Sandbox("a").Preserve(t.Context())
	require.Error(t, err, "a client that follows the redirect got 200 for a GET, not for the pause")
	assert.True(t, isPermanent(err))
	assert.Contains(t, err.Error(), "redirected it to GET "+idp.URL+"/sign-in")
}

// A base URL may carry user information (Basic auth, to a proxy in front of
// the server): its password is sent, and never shown in an error or a log
// line.
func TestBaseURLPasswordIsSentButNeverShown(t *testing.T) {
	var auth atomic.Value
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); ok {
			auth.Store(u + ":" + p)
		}
		http.Error(w, "down", http.StatusBadRequest)
	}))
	defer ts.Close()
	base := strings.Replace(ts.URL, "http://", "http://drain:hunter2@", 1)
	var logs strings.Builder
	c := Config{FallbackListPath: "/v1", Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	src, err := New(base, c)
	require.NoError(t, err)
	_, listErr := src.List(t.Context())
	require.Error(t, listErr)
	pauseErr := src.Sandbox("a").Preserve(t.Context())
	require.Error(t, pauseErr)
	assert.Equal(t, "drain:hunter2", auth.Load(), "the password is sent")
	for _, err := range []error{listErr, pauseErr} {
		assert.NotContains(t, err.Error(), "hunter2")
		assert.Contains(t, err.Error(), "drain:xxxxx@")
		var se *StatusError
		require.ErrorAs(t, err, &se)
		assert.NotContains(t, se.URL, "hunter2")
	}

	ts404 := httptest.NewServer(http.NotFoundHandler())
	defer ts404.Close()
	src, err = New(strings.Replace(ts404.URL, "http://", "http://drain:hunter2@", 1), c)
	require.NoError(t, err)
	_, err = src.List(t.Context())
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
	assert.Contains(t, logs.String(), "fallback", "the switch to the fallback is logged")
	assert.NotContains(t, logs.String(), "hunter2")
}

// A list answer longer than the Source reads is refused with an error that
// says so, not parsed cut short ("unexpected end of JSON input").
func TestOversizedListAnswerIsNamed(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elem := []byte(`{"id":"` + strings.Repeat("x", 1000) + `","state":"paused"},`)
		_, _ = w.Write([]byte("["))
		for n := 0; n <= maxBody; n += len(elem) {
			if _, err := w.Write(elem); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`{"id":"last","state":"running"}]`))
	}))
	defer ts.Close()
	// No list timeout, the context alone: under the race detector, reading
	// the 32 MiB takes 3 s of CPU (0.1 s without), and at a load of 10 on
	// 2 cores the default 10 s ran out before the size was known. What is
	// checked is the size, not the time.
	src, err := New(ts.URL, Config{ListTimeout: -1})
	require.NoError(t, err)
	_, err = src.List(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "longer than 32 MiB")
	var perm *backoff.PermanentError
	assert.ErrorAs(t, err, &perm, "the same answer comes again")
}

// Fault: a Source not made by New (a zero httpsource.Source, or the nil
// *Source New returns with its error) panicked with a nil dereference in
// List, RunningIDs, Limit and CloseIdleConnections, and in the Preserve of
// a sandbox its Sandbox returned: a pause.Preserver over it recovered the
// listing's panic, but the drain's count and a caller of its own did not.
// Each now returns the permanent error "httpsource: Source not made by
// httpsource.New" (no retry can make one), Limit 0. docs/faults.md row
// 241.
func TestSourceNotMadeByNewIsAPermanentError(t *testing.T) {
	const want = "httpsource: Source not made by httpsource.New"
	for name, s := range map[string]*Source{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			var perm *backoff.PermanentError
			sbs, err := s.List(t.Context())
			assert.Nil(t, sbs)
			require.ErrorContains(t, err, want)
			assert.ErrorAs(t, err, &perm)
			ids, err := s.RunningIDs(t.Context())
			assert.Nil(t, ids)
			require.ErrorContains(t, err, want)
			err = s.Sandbox("sb-1").Preserve(t.Context())
			require.ErrorContains(t, err, want)
			assert.ErrorAs(t, err, &perm)
			assert.Zero(t, s.Limit())
			assert.NotPanics(t, s.CloseIdleConnections)

			p, err := pause.New(s, pause.Config{})
			if s == nil {
				require.ErrorContains(t, err, "the Lister must not be nil", "a typed nil is refused at New")
				return
			}
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			rep := p.Run(ctx, time.Time{})
			assert.True(t, rep.Unknown, "no listing succeeded")
			assert.Contains(t, rep.ListErr, want)
			assert.Equal(t, 1, rep.Passes, "a permanent error: not listed again")
		})
	}
}

// Fault: a 409 whose listing again failed was made permanent, and the
// listing's error dropped: a sandbox paused by someone else between the
// listing and its pause (a 409 from a generic server), whose listing
// again met one 503, was Failed, lost in the Report and the exit status,
// with "409 Conflict" as its only error. The 409 now takes the listing's
// class: after a transient failure it is retried, and the retry's listing
// settles it (gone: already paused); after a permanent one it stays
// permanent. Either way its error names the listing's. On loopback.
func TestConflictWhoseListingFailsTakesTheListingsClass(t *testing.T) {
	var lists atomic.Int64
	var refuse atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case refuse.Load():
			http.Error(w, `{"message":"unauthorized"}`, http.StatusUnauthorized)
		case lists.Add(1) == 1:
			http.Error(w, `{"message":"busy"}`, http.StatusServiceUnavailable)
		default:
			fmt.Fprint(w, `[{"id":"paused-meanwhile","state":"paused"}]`)
		}
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"message":"not running"}`, http.StatusConflict)
	})
	ts := httptest.NewServer(mux)
	defer ts.Close()
	src, err := New(ts.URL, Config{})
	require.NoError(t, err)
	sb := src.Sandbox("paused-meanwhile")

	err = sb.Preserve(t.Context())
	require.Error(t, err)
	assert.False(t, isPermanent(err), "the listing's 503 is transient, so is the 409 it left undecided: %v", err)
	assert.ErrorContains(t, err, "503")
	var se *StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusConflict, se.StatusCode, "the 409 is the error errors.As finds")
	assert.ErrorIs(t, sb.Preserve(t.Context()), pause.ErrGone, "the retry's listing settles it: no longer running")

	refuse.Store(true)
	err = sb.Preserve(t.Context())
	assert.True(t, isPermanent(err), "a refused listing does not get better: %v", err)
	assert.ErrorContains(t, err, "401")
}

// Fault: a pause method or an API key header name that no HTTP request can
// carry (a header name copied from curl's -H "X-API-Key: ...", a method
// with a trailing space from a config file) passed New, and http.NewRequest
// or Go's transport refused every request before sending it: the drain's
// first listing failed, every sandbox unknown, or every pause failed,
// found at SIGTERM. New now fails naming the field and the value.
// docs/faults.md row 473.
func TestWhatNoRequestCanCarryIsRefusedAtNew(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"header with its colon", Config{APIKey: "k", APIKeyHeader: "X-API-Key:"}, `httpsource: Config.APIKeyHeader must be a header name`},
		{"header with a space", Config{APIKey: "k", APIKeyHeader: "X API Key"}, `got "X API Key"`},
		{"method with a space", Config{PauseMethod: "POST "}, `httpsource: Config.PauseMethod must be an HTTP method`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(newFakeServer(1).start(t), c.cfg)
			if err == nil {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				defer cancel()
				var sendErr error
				if sbs, err := s.List(ctx); err != nil {
					sendErr = err
				} else if len(sbs) > 0 {
					sendErr = sbs[0].Preserve(ctx)
				}
				t.Fatalf("New passed it; at the drain, the first request said: %v", sendErr)
			}
			assert.Nil(t, s)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	_, err := New("http://127.0.0.1:1", Config{APIKey: "k", APIKeyHeader: "Authorization", PauseMethod: "PUT"})
	assert.NoError(t, err, "a header name and a method")
}
